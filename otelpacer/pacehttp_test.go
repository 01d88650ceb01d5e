package otelpacer_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// TestPacehttpSpans: a pacehttp Transport under otelhttp's: each request's
// wait for its slot is a pacer.wait span, a child of the HTTP client span,
// itself a child of the caller's span. The second request waits for the
// permits band (10/s, burst 1).
func TestPacehttpSpans(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{MaxLateness: -1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()

	paced, err := pacehttp.New(l, pacehttp.Options{Limit: reserve.Limit{Rate: 10, Burst: 1}, Tracer: g.tel, Logger: quiet})
	require.NoError(t, err)
	client := &http.Client{Transport: otelhttp.NewTransport(paced,
		otelhttp.WithTracerProvider(g.tp), otelhttp.WithMeterProvider(noop.NewMeterProvider()))}
	ctx, job := g.tp.Tracer("test").Start(context.Background(), "job")
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		require.NoError(t, err)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	job.End()
	client.CloseIdleConnections()

	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, sp := range g.spans.Ended() {
		byID[sp.SpanContext().SpanID()] = sp
	}
	waits := g.waitSpans()
	require.Len(t, waits, 2)
	clients := map[trace.SpanID]bool{}
	for i, w := range waits {
		c, ok := byID[w.Parent().SpanID()]
		require.True(t, ok, "wait span %d's parent ended", i)
		assert.Equal(t, trace.SpanKindClient, c.SpanKind(), "wait span %d's parent is the client span, %q", i, c.Name())
		assert.Equal(t, job.SpanContext().SpanID(), c.Parent().SpanID(), "the client span is the job's child")
		clients[c.SpanContext().SpanID()] = true
		assert.Equal(t, []string{"reserved", "slept", "woke"}, eventNames(w))
		assert.Equal(t, srv.Listener.Addr().String(), attrMap(w.Attributes())["pacer.key"])
	}
	assert.Len(t, clients, 2, "one wait span per request")
	assert.Equal(t, "none", attrMap(waits[0].Attributes())["pacer.band"])
	assert.Equal(t, "permits", attrMap(waits[1].Attributes())["pacer.band"])
}
