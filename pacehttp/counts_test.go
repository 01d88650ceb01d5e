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
	"github.com/stretchr/testify/require"
)

// runWindow has 3 processes of 8 goroutines call a fixed-window provider in
// dialect for d, each with a Limit far above the quota, and returns the
// provider's counts over the whole windows of the run.
func runWindow(t *testing.T, dialect string, ignore bool, d time.Duration) provider.WindowStats {
	t.Helper()
	return runWindowP(t, dialect, ignore, d).Stats()
}

func runWindowP(t *testing.T, dialect string, ignore bool, d time.Duration) *provider.Window {
	t.Helper()
	p := &provider.Window{Quota: 20, Per: 2 * time.Second, Dialect: dialect, Latency: 20 * time.Millisecond}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	for _, l := range fleet(t, 3) {
		c := &http.Client{Transport: transport(t, l, pacehttp.Options{
			Limit: reserve.Limit{Rate: 1000, Burst: 10}, IgnoreCounts: ignore, MaxRetries: -1})}
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
	return p
}

// TestCountsFixedWindow: a fleet that reads the provider's counts, in each
// dialect, is refused nothing after the first window (whose first calls
// went out before any count was known), and uses every window. With the
// counts ignored, the same fleet is refused in the same windows: the
// provider does refuse what goes beyond.
func TestCountsFixedWindow(t *testing.T) {
	for _, dialect := range provider.WindowDialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			s := runWindow(t, dialect, false, 9*time.Second)
			t.Logf("%d whole windows of 20: %d used (the fewest in one %d), %d refused", s.Windows, s.Used, s.MinUsed, s.Refused)
			require.GreaterOrEqual(t, s.Windows, 2)
			assert.Zero(t, s.Refused, "refused after the first window")
			assert.Positive(t, s.MinUsed, "a window unused")
		})
	}
	t.Run("ignored", func(t *testing.T) {
		t.Parallel()
		s := runWindow(t, provider.DialectGitHub, true, 7*time.Second)
		t.Logf("counts ignored: %d whole windows of 20: %d used, %d refused", s.Windows, s.Used, s.Refused)
		assert.Positive(t, s.Refused, "the provider refused nothing with the counts ignored: the test proves nothing")
	})
}
