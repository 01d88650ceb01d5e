package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBackWaitsForFleetOnRedis: a Limiter of a fleet of 5 comes back from
// an outage first, while the 4 others (their heartbeats say so) still pace
// locally. A call on Redis would take a slot on its own rank's instants,
// one in five, and move the key's queue past the others' (TestBackWaitsForFleet
// has the rule): it waits for them instead. A caller with a maximum wait
// is refused, told why, and nothing is reserved; once the others are back,
// the calls reserve on Redis.
func TestBackWaitsForFleetOnRedis(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	keys := reserve.FleetKeysOf(prefix)
	others := []string{"m1", "m2", "m3", "m4"}
	beat := func(mode string) {
		t.Helper()
		for _, id := range others {
			// As a Limiter with hour-long heartbeats: heard from now,
			// live for two hours, in mode since now.
			require.NoError(t, redis.NewScript(lua.Heartbeat).Run(ctx, s.Client, keys, id, mode,
				fmt.Sprint(time.Now().UnixMilli(), " 0 5"), 7_200_000, 10_800_000, 3_960_000, 60_000, "").Err())
		}
	}
	beat("redis")
	// The fleet of 5 changed long ago (a is no newcomer to it).
	require.NoError(t, s.Client.HSet(ctx, keys[1], "~n", fmt.Sprint("5 ", time.Now().Add(-10*time.Hour).UnixMilli(), " 4")).Err())
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	// Hour-long heartbeats: the test runs them, but for the one the loop
	// sends when it is back.
	a, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: time.Hour, SilentHold: 3 * time.Hour,
		ProbeInterval: 20 * time.Millisecond, CallTimeout: 200 * time.Millisecond, FailAfter: 1})
	require.NoError(t, err)
	closeLimiter(t, a)
	require.NoError(t, a.Beat(ctx))
	require.Equal(t, 5, a.FleetSize())
	lim := reserve.Limit{Rate: 50, Burst: 1} // a burst under the fleet's 5: the lattice
	const key = "back.example"

	p.Disable(t)
	for !a.Degraded() {
		cc, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, _ = a.Reserve(cc, key, lim)
		cancel()
	}
	beat("local") // the others lost Redis too
	p.Enable(t)
	backOnRedis(t, a)
	require.NoError(t, a.Beat(ctx))
	state := func() string {
		v, err := s.Client.Get(ctx, a.RedisKey(key)).Result()
		if errors.Is(err, redis.Nil) {
			return ""
		}
		require.NoError(t, err)
		return v
	}
	before := state() // the handback's floor, if a granted locally meanwhile

	_, err = a.TryReserveN(ctx, reserve.Single(key, lim, 1), 50*time.Millisecond)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "back first of 5, a call with a maximum wait")
	assert.Equal(t, reserve.OutageBinding, tooLong.Band)
	assert.Contains(t, err.Error(), "4 of the fleet's 5 members are still held")
	cc, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	r, err := a.Reserve(cc, key, lim)
	cancel()
	require.True(t, errors.Is(err, context.DeadlineExceeded), "back first of 5, a call that can wait waits for the fleet; got %v, %v", r, err)
	assert.Equal(t, before, state(), "a reserved on Redis while waiting for the fleet")

	beat("redis") // the others are back
	require.NoError(t, a.Beat(ctx))
	for range 3 {
		r, err := a.Reserve(ctx, key, lim)
		require.NoError(t, err)
		require.Equal(t, reserve.SourceRedis, r.Source())
	}
}

// fleetCut is a go-redis hook that, while on, fails every script call on
// the fleet's records (its first key) as a refused connection would, or
// (timeout) as one that timed out.
type fleetCut struct {
	passHook
	key     string
	on      atomic.Bool
	timeout bool         // fail as a call that timed out instead
	hits    atomic.Int64 // calls failed
}

func (h *fleetCut) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k, ok := scriptKey(cmd); ok && h.on.Load() && k == h.key {
			h.hits.Add(1)
			var err error = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
			if h.timeout {
				err = context.DeadlineExceeded
			}
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestFleetUnreachablePacesLocally: the fleet's records are out of reach
// (on a Cluster, their shard fails over) while the keys answer. After two
// heartbeats in a row failed so, the Limiter paces locally on its share,
// as when Redis is gone, and comes back when a probe finds the records.
// Before, its calls took its own rank's share on Redis: on a key whose
// burst is under the fleet's size, each slot on its own rank's instants
// moved the key's queue past every other rank's, and a 200-process
// Cluster run put its keys on the healthy masters 28 s ahead. Its calls on
// the keys succeeded meanwhile, so it never switched.
func TestFleetUnreachablePacesLocally(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	cut := &fleetCut{key: reserve.FleetKeysOf(prefix)[0]}
	// Options New keeps the client with (its hook stays).
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	c.AddHook(cut)
	opts := reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond, ProbeInterval: 20 * time.Millisecond}
	b, err := reserve.New(s.Client, opts) // another member, on Redis throughout
	require.NoError(t, err)
	closeLimiter(t, b)
	a, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, time.Millisecond)
	lim := reserve.Limit{Rate: 1000, Burst: 1}
	// The fleet's change (a joined) grows old, so that a is no newcomer:
	// it has a local share.
	time.Sleep(20 * opts.HeartbeatInterval)

	cut.on.Store(true)
	// a's calls on a key go on answering meanwhile.
	require.Eventually(t, func() bool {
		cc, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, _ = a.Reserve(cc, "answers", lim)
		return a.Degraded()
	}, 30*time.Second, 5*time.Millisecond, "the fleet's records out of reach: a never paced locally")
	require.Eventually(t, func() bool {
		cc, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		r, err := a.Reserve(cc, "k", lim)
		return err == nil && r.Source() == reserve.SourceLocal
	}, 30*time.Second, 5*time.Millisecond, "a's calls never paced locally")

	cut.on.Store(false)
	backOnRedis(t, a)
	r, err := a.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	assert.Equal(t, reserve.SourceRedis, r.Source())
}

// TestSlowHeartbeatsStayOnRedis: heartbeats that time out (a loaded
// machine, a slow shard) are no evidence that the fleet's records are gone:
// the timed-out call pings, Redis answers, and the Limiter stays on Redis
// however many fail in a row (TestFleetUnreachablePacesLocally has those
// that fail for want of Redis).
func TestSlowHeartbeatsStayOnRedis(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	cut := &fleetCut{key: reserve.FleetKeysOf(prefix)[0], timeout: true}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	c.AddHook(cut)
	a, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 20 * time.Millisecond, ProbeInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, a)
	cut.on.Store(true)
	require.Eventually(t, func() bool { return cut.hits.Load() >= 4 }, 30*time.Second, time.Millisecond, "the heartbeats never ran")
	assert.False(t, a.Degraded(), "%d heartbeats timed out in a row: a switched to local pacing", cut.hits.Load())
	r, err := a.Reserve(ctx, "k", reserve.Limit{Rate: 1000, Burst: 1})
	require.NoError(t, err)
	assert.Equal(t, reserve.SourceRedis, r.Source())
}
