package reserve_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// keyHold is a go-redis hook that, once armed, holds the next script call
// on one Redis key until released.
type keyHold struct {
	armed
	key string
}

func (h *keyHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *keyHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if name := strings.ToLower(cmd.Name()); (name == "evalsha" || name == "eval") && len(args) >= 4 && args[3] == h.key {
			h.stop()
		}
		return next(ctx, cmd)
	}
}

func (h *keyHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestNoLocalGrantDuringHandback: when Redis answers again, the Limiter
// hands back what its local fallback granted, key by key, and switches
// back to Redis after the last. A call on a key already handed back, made
// while later keys were still being handed back, was granted by the local
// fallback, and that slot never reached Redis: Redis then granted the same
// instant again (the cmd/pacerbench cluster phase, 100 processes through a
// master killed: 59 calls in a second of a key at 50/s, burst 5, 8 of them
// slots granted locally during their process's handback, at the instants
// of slots Redis granted later). The test holds the handback of key "b"
// (after "a"'s), reserves on "a" meanwhile, lets the handback finish, and
// has another member reserve on "a": at burst 1 the two slots must be
// 1/rate apart.
func TestNoLocalGrantDuringHandback(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	defer c.Close()
	hold := &keyHold{key: prefix + "{b}"}
	c.AddHook(hold)
	l, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, FailAfter: 1, ProbeInterval: 20 * time.Millisecond,
		CallTimeout: 200 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	require.Equal(t, hold.key, l.RedisKey("b"))
	lim := reserve.Limit{Rate: 10, Burst: 1}
	for _, k := range []string{"a", "b"} {
		_, err := l.Reserve(ctx, k, lim)
		require.NoError(t, err)
	}

	p.Disable(t)
	for _, k := range []string{"a", "b"} {
		r, err := l.Reserve(ctx, k, lim)
		require.NoError(t, err)
		require.True(t, r.Local(), "%s: a reservation while Redis is away", k)
	}
	entered, release := hold.arm()
	defer release()
	p.Enable(t)
	select {
	case <-entered: // "a" is handed back, "b" is on its way
	case <-time.After(30 * time.Second):
		t.Fatal("the handback of b never came")
	}
	var (
		during *reserve.Reservation
		errD   error
		wg     sync.WaitGroup
	)
	wg.Go(func() { during, errD = l.Reserve(ctx, "a", lim) })
	// With the bug the local fallback answers at once; the fix waits for
	// the handback. Either way the reservation is asked for during it.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
	}
	release()
	wg.Wait()
	require.NoError(t, errD)
	backOnRedis(t, l)
	// Another member of the fleet, on Redis: it knows only what Redis
	// knows.
	l2, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l2)
	after, err := l2.Reserve(ctx, "a", lim)
	require.NoError(t, err)
	require.False(t, after.Local())
	t.Logf("during the handback: local %v at %v; after it, another member: local %v at %v",
		during.Local(), during.Time().Format("15:04:05.000"), after.Local(), after.Time().Format("15:04:05.000"))
	// With the bug, the call during the handback was granted locally, at
	// an instant Redis granted again. The fix waits for the handback, so
	// both slots are Redis's: compared on the server's clock, since local
	// times place slots by the clock estimate of their replies, which a
	// loaded machine's round trips shift by milliseconds (CI beside a CPU
	// hog: 97.9 ms).
	require.False(t, during.Local(), "a call during the handback was granted by the local fallback at %v",
		during.Time().Format("15:04:05.000"))
	first, ok := reserve.ServerSlot(during)
	require.True(t, ok)
	second, ok := reserve.ServerSlot(after)
	require.True(t, ok)
	require.GreaterOrEqual(t, second-first, int64(99*time.Millisecond),
		"slots of a at burst 1, 10/s: one reserved during the handback at %v, one after it, by another member, %v later",
		during.Time().Format("15:04:05.000"), time.Duration(second-first))
}
