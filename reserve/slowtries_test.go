package reserve_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateScripts is a go-redis hook that, while on, sends each script call on
// a key whose name holds tag as if it had been held up on the way: its
// deadline (core.lua's ARGV[1]) one in the past, so Redis refuses it
// (PACER_STALE) and it changes nothing, however fast the machine. Pings,
// the clock's reads and the fleet's heartbeats go out as they are.
type lateScripts struct {
	passHook
	tag  string
	on   atomic.Bool
	hits atomic.Int64
}

func (h *lateScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k, ok := scriptKey(cmd); ok && h.on.Load() && strings.Contains(k, h.tag) {
			args := cmd.Args()
			if n, err := strconv.Atoi(fmt.Sprint(args[2])); err == nil && len(args) > 3+n {
				if d, ok := args[3+n].(string); ok && d != "" {
					h.hits.Add(1)
					args[3+n] = "1" // Unix ms: long past
				}
			}
		}
		return next(ctx, cmd)
	}
}

// TestStaleTriesStayOnRedis ("never over the limit"): a member whose
// reservations on a key all run past their deadlines (PACER_STALE) while
// Redis answers its pings and heartbeats is on Redis for the fleet, which
// leaves it no local share: its calls wait for Redis, however many tries
// fail so. Before, after maxSlowTries (4) each batch was granted by the
// local fallback at the member's share, beside the whole rate the others
// took on Redis, and the Limiter never switched (Degraded false).
func TestStaleTriesStayOnRedis(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	const callTimeout = 50 * time.Millisecond
	late := &lateScripts{tag: "{api}"}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	c.AddHook(late)
	// A refusal counts as a failure of Redis, and FailAfter of them in a
	// row (no call answered between) would switch the Limiter to local
	// pacing, which is then safe: the fleet hears it. Here Redis answers
	// between the refusals, as its heartbeats did when the refusals came
	// a round trip apart, and the Limiter stays on Redis.
	opts := reserve.Options{KeyPrefix: prefix, Logger: quiet, CallTimeout: callTimeout, HeartbeatInterval: 50 * time.Millisecond, FailAfter: 1 << 20}
	b, err := reserve.New(s.Client, opts) // another member, on Redis throughout
	require.NoError(t, err)
	closeLimiter(t, b)
	a, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, time.Millisecond)
	// The fleet's change (a joined) grows old, so that a is no newcomer:
	// it has a local share.
	time.Sleep(20 * opts.HeartbeatInterval)
	lim := reserve.Limit{Rate: 100, Burst: 1}
	_, err = a.Reserve(ctx, "api", lim) // the key's state, and the clock's estimate
	require.NoError(t, err)

	late.on.Store(true)
	type outcome struct {
		r   *reserve.Reservation
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		r, err := a.Reserve(ctx, "api", lim)
		done <- outcome{r, err}
	}()
	// Past maxSlowTries (4 tries after the first), each refused as stale.
	deadline := time.Now().Add(60 * time.Second)
	for late.hits.Load() < 7 {
		select {
		case o := <-done:
			require.NoError(t, o.err)
			t.Fatalf("granted (source %v) after %d stale tries, Degraded %v: want the caller to wait for Redis",
				o.r.Source(), late.hits.Load(), a.Degraded())
		case <-time.After(time.Millisecond):
		}
		require.True(t, time.Now().Before(deadline), "the reservation's tries stopped at %d, not granted", late.hits.Load())
	}
	assert.False(t, a.Degraded(), "switched to local pacing with Redis answering")
	// A caller with a maximum wait is refused when it passes, as in an
	// outage; nothing was granted.
	_, err = a.TryReserveN(ctx, reserve.Single("api", lim, 1), 100*time.Millisecond)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, reserve.OutageBinding, tooLong.Band)
	late.on.Store(false)
	o := <-done
	require.NoError(t, o.err)
	assert.Equal(t, reserve.SourceRedis, o.r.Source())
	assert.False(t, a.Degraded())
}
