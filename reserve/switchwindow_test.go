package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestLocalClosesWindowAtSwitch: a member that starts pacing locally in the
// middle of a window takes none of it. The state Redis last showed it does
// not hold what the others took of that window since, up to all of it:
// before, it took its share of a window the fleet had filled (combination
// runner, Cluster seed 14: 7 in a window of 6). Its local share starts with
// the next window. And the units that close the window are Redis's, not the
// member's: the handback does not send them, so the fleet on Redis keeps
// what is left of the window.
func TestLocalClosesWindowAtSwitch(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	// No heartbeat after New's: a heartbeat late on a busy machine puts a
	// Limiter's view in doubt, and the other member counted held (on the
	// fleet sizes 1 and 2 both, b having just joined) leaves a's calls on
	// Redis no room in the window (CI beside a CPU hog: a's first call
	// here went to the next window). a's view is a fleet of one: its local
	// share of a window is all of it.
	opts := reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: time.Hour,
		ProbeInterval: 20 * time.Millisecond, CallTimeout: 200 * time.Millisecond, FailAfter: 1}
	a, p := viaProxy(t, s, opts)
	cb := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { cb.Close() })
	b, err := reserve.New(cb, opts)
	require.NoError(t, err)
	closeLimiter(t, b)

	// Windows of 4 an hour; the current one began a minute ago.
	const n = 4
	length := time.Hour
	origin := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	window := func(ns int64) int64 { return (ns - origin.UnixNano()) / int64(length) }
	req := func(key string) reserve.Request {
		return reserve.Request{Key: key, Policy: reserve.Policy{{Name: "win", Unit: reserve.PermitsUnit,
			Window: reserve.Window{N: n, Length: length, Origin: origin}}}, Cost: reserve.Permits(1)}
	}
	onRedis := func(l *reserve.Limiter, key string) int64 {
		t.Helper()
		r, err := l.ReserveN(ctx, req(key))
		require.NoError(t, err)
		ns, ok := reserve.ServerSlot(r)
		require.True(t, ok, "a call on Redis was granted locally")
		return ns
	}

	// "full": a saw 1 of 4 taken; b took the other 3. The state a saw left
	// it 3.
	require.EqualValues(t, 0, window(onRedis(a, "full")))
	for range 3 {
		require.EqualValues(t, 0, window(onRedis(b, "full")))
	}
	// "rest": a saw 1 of 4 taken, and nobody took more.
	require.EqualValues(t, 0, window(onRedis(a, "rest")))

	p.Disable(t)
	local := func(key string) *reserve.Reservation {
		t.Helper()
		for {
			r, err := a.ReserveN(ctx, req(key))
			require.NoError(t, err)
			if _, ok := reserve.ServerSlot(r); ok { // reached Redis before a noticed
				t.Fatalf("a reached Redis through a disabled proxy")
			}
			if _, ok := reserve.LocalSlot(r); ok {
				return r
			}
		}
	}
	for _, key := range []string{"full", "rest"} {
		r := local(key)
		ns, _ := reserve.LocalSlot(r)
		assert.EqualValues(t, 1, window(ns), "%s: a's first local slot is in window %d, want the next one (1)", key, window(ns))
		require.NoError(t, r.Cancel(ctx))
	}
	p.Enable(t)
	backOnRedis(t, a)
	// "rest" on Redis: 3 of the 4 are left, whoever takes them.
	for i := range 3 {
		assert.EqualValues(t, 0, window(onRedis(b, "rest")), "b's call %d on \"rest\" after a's handback", i+1)
	}
	assert.EqualValues(t, 1, window(onRedis(a, "rest")), "a fifth call in the first window")
	assert.EqualValues(t, 1, window(onRedis(b, "full")), "a fifth call in the first window of \"full\"")
}

// viaProxy returns a Limiter on s through a proxy of its own (Disable cuts
// it off from Redis while the others reach it), closed on t.Cleanup, and
// the proxy.
func viaProxy(t *testing.T, s *redistest.Server, opts reserve.Options) (*reserve.Limiter, *redistest.Proxy) {
	t.Helper()
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, l)
	return l, p
}
