package pacehttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// traceRecorder is a reserve.Tracer that writes down what it is told, one
// line per event.
type traceRecorder struct {
	mu    sync.Mutex
	lines []string
}

type ctxMark struct{}

func (tr *traceRecorder) add(format string, a ...any) {
	tr.mu.Lock()
	tr.lines = append(tr.lines, fmt.Sprintf(format, a...))
	tr.mu.Unlock()
}

func (tr *traceRecorder) take() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	l := tr.lines
	tr.lines = nil
	return l
}

func (tr *traceRecorder) StartWait(ctx context.Context, key string) (context.Context, reserve.WaitTrace) {
	tr.add("start %s mark=%v", key, ctx.Value(ctxMark{}))
	return ctx, waitRecorder{tr}
}

type waitRecorder struct{ tr *traceRecorder }

func (w waitRecorder) Reserved(r *reserve.Reservation) { w.tr.add("reserved %s", r.Key()) }
func (w waitRecorder) Sleeping(r *reserve.Reservation, d time.Duration) {
	w.tr.add("sleeping %s", r.Key())
}
func (w waitRecorder) Moved(r *reserve.Reservation, why string) { w.tr.add("moved %s", why) }
func (w waitRecorder) End(err error, late time.Duration) {
	if err == nil {
		w.tr.add("end ok late>=0 %v", late >= 0)
		return
	}
	_, refused := errors.AsType[*reserve.WaitTooLongError](err)
	w.tr.add("end refused=%v", refused)
}

// TestTracer: Options.Tracer follows each request's wait, with the
// request's context (a span in it is the parent of the wait's): Reserved,
// Sleeping, End; a slot after the deadline ends the wait with a refusal
// and no Reserved. On an adaptive key too.
func TestTracer(t *testing.T) {
	ls := fleet(t, 1)
	srv := newServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, adapt := range []bool{false, true} {
		t.Run(fmt.Sprintf("adaptive=%v", adapt), func(t *testing.T) {
			rec := &traceRecorder{}
			opts := pacehttp.Options{Limit: reserve.Limit{Rate: 0.5, Burst: 1}, Tracer: rec}
			key := host
			if adapt {
				opts.Adaptive = &adaptive.Config{Start: 0.5, Min: 0.5, Max: 0.5}
				// Another key than the first run's: its burst is taken.
				opts.Route = func(*http.Request) (pacehttp.Route, error) { return pacehttp.Route{Key: "adaptive"}, nil }
				key = "adaptive"
			}
			c := &http.Client{Transport: transport(t, ls[0], opts)}
			ctx := context.WithValue(context.Background(), ctxMark{}, "req")
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			resp, err := c.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, []string{"start " + key + " mark=req", "reserved " + key, "sleeping " + key, "end ok late>=0 true"}, rec.take())

			dctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond) // the next slot is 2 s away
			defer cancel()
			req, _ = http.NewRequestWithContext(dctx, http.MethodGet, srv.URL, nil)
			_, err = c.Do(req)
			tooLong, ok := errors.AsType[*reserve.WaitTooLongError](err)
			require.True(t, ok, "err = %v, want a *reserve.WaitTooLongError", err)
			assert.True(t, tooLong.Deadline)
			assert.Equal(t, []string{"start " + key + " mark=req", "end refused=true"}, rec.take())
		})
	}
}
