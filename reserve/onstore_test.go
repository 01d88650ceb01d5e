package reserve_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestOnStoreSlowCallIsNotAnOutage: a Limiter on a store (package
// pacertest) has no Redis to ping. A script the store runs slower than
// CallTimeout (a loaded machine) is neither an outage nor a reason to ping:
// the call returns its result. It panicked (a ping on the nil Redis
// client, from the slow-call watch) in CI beside other work.
func TestOnStoreSlowCallIsNotAnOutage(t *testing.T) {
	var slow atomic.Bool
	st := luastore.New(func() time.Time {
		if slow.Load() {
			// Longer than CallTimeout, whatever the machine's load: a
			// sleep lasts at least as long as asked.
			time.Sleep(50 * time.Millisecond)
		}
		return time.Now()
	})
	v, err := hook.OnStore(st, reserve.Options{CallTimeout: 5 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	l := v.(*reserve.Limiter)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 1000, Burst: 1000}
	ctx := context.Background()
	_, err = l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	slow.Store(true)
	for range 3 {
		r, err := l.Reserve(ctx, "k", lim)
		require.NoError(t, err)
		require.False(t, r.Local(), "a slow store is not an outage")
	}
	// The slow-call watch runs its ping in a goroutine of its own: give it
	// the time to (wrongly) run before the test ends.
	slow.Store(false)
	time.Sleep(100 * time.Millisecond)
	_, err = l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
}

// TestOnStoreInFlight: a Limiter on a store runs an in-flight band's seats
// on the store, as it runs its other scripts there (it ran them on the nil
// Redis client and panicked). pacertest's TestInFlight holds seats shared
// by two Limiters on a store for a minute of fake time.
func TestOnStoreInFlight(t *testing.T) {
	v, err := hook.OnStore(luastore.New(nil), reserve.Options{Logger: quiet})
	require.NoError(t, err)
	l := v.(*reserve.Limiter)
	closeLimiter(t, l)
	req := seatsReq("k", 2)
	ctx := context.Background()
	a, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	b, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = l.Acquire(short, req)
	require.ErrorIs(t, err, context.DeadlineExceeded, "a third call while 2 are open")
	a.Done()
	c, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	b.Done()
	c.Done()
}
