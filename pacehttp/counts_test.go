package pacehttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
)

// windowClients returns one client per process of ls, each with a Limit
// far above any quota here.
func windowClients(t *testing.T, ls []*reserve.Limiter, ignore bool) []*http.Client {
	var cs []*http.Client
	for _, l := range ls {
		cs = append(cs, &http.Client{Transport: transport(t, l, pacehttp.Options{
			Limit: reserve.Limit{Rate: 1000, Burst: 10}, IgnoreCounts: ignore, MaxRetries: -1})})
	}
	return cs
}

// callWindow has the clients, 8 goroutines each, call the fixed-window
// provider p for d, and returns the provider's counts over the whole
// windows of the run.
func callWindow(p *provider.Window, clients []*http.Client, d time.Duration) provider.WindowStats {
	srv := httptest.NewServer(p)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 8 {
			wg.Go(func() {
				for ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
					resp, err := c.Do(req)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	return p.Stats()
}

// TestCountsFixedWindow: a fleet that reads the provider's counts, in each
// dialect, is refused at most half as often after the first window (whose
// first calls went out before any count was known) as the same fleet with
// the counts ignored, run at the same time beside it, and uses every
// window. On a quiet machine it is refused nothing
// (`go run ./cmd/pacerbench -phases counts` measures that); beside a CPU
// hog an answer read late can let one call through early (x-ratelimit: 1
// refused in 3 windows, against 21 with the counts ignored), so the exact
// zero is a figure, not this test's assertion. Every run at once.
func TestCountsFixedWindow(t *testing.T) {
	type run struct {
		dialect string
		ignore  bool
		stats   provider.WindowStats
	}
	runs := []*run{{dialect: provider.DialectGitHub, ignore: true}}
	for _, d := range provider.WindowDialects {
		runs = append(runs, &run{dialect: d})
	}
	var wg sync.WaitGroup
	for _, r := range runs {
		p := &provider.Window{Quota: 20, Per: 2 * time.Second, Dialect: r.dialect, Latency: 20 * time.Millisecond}
		clients := windowClients(t, fleet(t, 3), r.ignore)
		wg.Go(func() { r.stats = callWindow(p, clients, 8*time.Second) })
	}
	wg.Wait()
	ignored := runs[0].stats.Refused
	for _, r := range runs {
		s := r.stats
		t.Logf("%s (counts ignored: %v): %d whole windows of 20: %d used (the fewest in one %d), %d refused", r.dialect, r.ignore, s.Windows, s.Used, s.MinUsed, s.Refused)
		if r.ignore {
			assert.Positive(t, s.Refused, "the provider refused nothing with the counts ignored: the test proves nothing")
			continue
		}
		if assert.GreaterOrEqual(t, s.Windows, 2, r.dialect) {
			assert.LessOrEqual(t, 2*s.Refused, ignored, "%s: refused %d after the first window, the counts ignored %d", r.dialect, s.Refused, ignored)
			assert.Positive(t, s.MinUsed, "%s: a window unused", r.dialect)
		}
	}
}
