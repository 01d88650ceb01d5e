package pacehttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// TestTakesCoalesced: while the provider's count has nothing to take (a
// probe out after a window's end, the window spent), one caller of a
// process asks it again for all of them; the others wait for that answer.
// Before, each waiting caller asked every quarter of a round trip (at
// least every 5 ms) while a probe was out: 10 callers made about 10 times
// the takes of one. Here every call the provider gets is held, so that the
// probes stay out: over the time measured, at most one take per 5 ms and
// what the callers' wake-ups add (docs/http.md, "The cost"). A machine too
// slow to poll that often only makes fewer.
func TestTakesCoalesced(t *testing.T) {
	s := redistest.New(t)
	// As New uses it (reserve.New): else it makes a client of its own,
	// without the hook.
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	var takes atomic.Int64
	// The takes from the provider's count (lua/quota.lua's "take").
	c.AddHook(redistest.Commands{N: &takes, Match: func(args []any) bool { return slices.Contains(args, any("take")) }})
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })

	p := &provider.Window{Quota: 2, Per: 500 * time.Millisecond, Dialect: provider.DialectGitHub}
	var hold atomic.Bool
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hold.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		p.ServeHTTP(w, r)
	}))
	defer srv.Close()
	client := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: reserve.Limit{Rate: 1000, Burst: 10}, MaxRetries: -1})}
	call := func(ctx context.Context) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := client.Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	// The count learned: the window's quota and the round trip.
	for range 3 {
		call(context.Background())
	}
	require.Positive(t, takes.Load(), "no take: the count was never known")

	hold.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	const callers = 10
	var wg sync.WaitGroup
	for range callers {
		wg.Go(func() {
			for ctx.Err() == nil {
				call(ctx)
			}
		})
	}
	defer func() { cancel(); close(release); wg.Wait() }()
	time.Sleep(600 * time.Millisecond) // past the window's end: a probe out, held
	n0, t0 := takes.Load(), time.Now()
	time.Sleep(time.Second)
	n, elapsed := takes.Load()-n0, time.Since(t0)
	bound := int64(2*elapsed/(5*time.Millisecond)) + 2*callers
	t.Logf("%d takes in %v from %d callers (bound %d)", n, elapsed.Round(time.Millisecond), callers, bound)
	assert.LessOrEqual(t, n, bound, "every waiting caller asked the count for itself")
}
