package otelpacer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestMain fails the package when goroutines of pacer or of this package
// outlive the tests (Limiters closed, Waits ended, servers stopped).
func TestMain(m *testing.M) {
	redis.SetLogger(reserve.RedisLogger(nil)) // go-redis's dial errors: Debug, through slog
	code := m.Run()
	if code == 0 {
		if left := leftGoroutines(5 * time.Second); left != "" {
			fmt.Fprintf(os.Stderr, "goroutines left after the tests:\n%s\n", left)
			code = 1
		}
	}
	os.Exit(code)
}

// leftGoroutines waits up to d for the goroutines running pacer's code to
// end, and returns the stacks of those that did not.
func leftGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var left []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "github.com/pacer-go/pacer/") && !strings.Contains(g, "otelpacer_test.TestMain") &&
				!strings.Contains(g, "otelpacer_test.leftGoroutines") {
				left = append(left, g)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rig is a Telemetry on the SDK's in-memory reader and span recorder.
type rig struct {
	tel    *otelpacer.Telemetry
	mp     *sdkmetric.MeterProvider
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newRig(t *testing.T, opts otelpacer.Options) *rig {
	t.Helper()
	g := &rig{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	g.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(g.reader))
	g.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(g.spans))
	t.Cleanup(func() {
		_ = g.mp.Shutdown(context.Background())
		_ = g.tp.Shutdown(context.Background())
	})
	opts.MeterProvider, opts.TracerProvider = g.mp, g.tp
	tel, err := otelpacer.New(opts)
	require.NoError(t, err)
	g.tel = tel
	return g
}

// limiter returns a Limiter on rdb with its own key prefix, reporting to
// g's Telemetry, closed when t ends.
func (g *rig) limiter(t *testing.T, rdb redis.UniversalClient, prefix string, opts reserve.Options) *reserve.Limiter {
	t.Helper()
	opts.KeyPrefix, opts.Logger = prefix, quiet
	if opts.Metrics == nil {
		opts.Metrics = g.tel
	}
	if opts.Tracer == nil {
		opts.Tracer = g.tel
	}
	l, err := reserve.New(rdb, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// metric returns the instrument name's data, and false when it has none.
func (g *rig) metric(t *testing.T, name string) (metricdata.Metrics, bool) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, g.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == name {
				require.Equal(t, otelpacer.ScopeName, sm.Scope.Name)
				return m, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// attrs writes an attribute set as "k=v,k=v", sorted by key.
func attrs(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// values returns each data point of a counter, up-down counter or gauge
// by its attributes (see attrs), and the instrument's unit.
func (g *rig) values(t *testing.T, name string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	m, ok := g.metric(t, name)
	if !ok {
		return out
	}
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Sum[float64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = p.Value
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = float64(p.Value)
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			out[attrs(p.Attributes)] = p.Value
		}
	default:
		t.Fatalf("%s: %T is not a sum or a gauge", name, m.Data)
	}
	return out
}

// moved is how many fresh slots the Waits took (pacer.rate_limiting.moved,
// every reason): each is one more grant in pacer.rate_limiting.requests. A
// Wait that wakes later than its slot allows (MaxLateness) takes one, which
// a loaded machine can cause at any rate.
func (g *rig) moved(t *testing.T) float64 {
	t.Helper()
	n := 0.0
	for _, v := range g.values(t, "pacer.rate_limiting.moved") {
		n += v
	}
	return n
}

// counts returns each data point of a histogram's count by its
// attributes, and checks its bucket boundaries.
func (g *rig) counts(t *testing.T, name string, bounds []float64) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	m, ok := g.metric(t, name)
	if !ok {
		return out
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s: %T is not a histogram", name, m.Data)
	for _, p := range h.DataPoints {
		out[attrs(p.Attributes)] = p.Count
		require.Equal(t, bounds, p.Bounds, "%s's buckets", name)
	}
	return out
}

// unit returns the unit of the instrument name.
func (g *rig) unit(t *testing.T, name string) string {
	t.Helper()
	m, ok := g.metric(t, name)
	require.True(t, ok, "no data for %s", name)
	return m.Unit
}

// event is a span event as the tests compare it: its name and attributes.
type event struct {
	Name  string
	Attrs map[string]any
}

// events returns s's events, without their times.
func events(s sdktrace.ReadOnlySpan) []event {
	var out []event
	for _, e := range s.Events() {
		out = append(out, event{e.Name, attrMap(e.Attributes)})
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]any {
	m := map[string]any{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.AsInterface()
	}
	return m
}

// eventNames returns the names of s's events, in order.
func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// waitSpans returns the ended pacer.wait spans, in the order they ended.
func (g *rig) waitSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range g.spans.Ended() {
		if s.Name() == otelpacer.SpanName {
			out = append(out, s)
		}
	}
	return out
}

// keys returns m's keys, sorted.
func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
