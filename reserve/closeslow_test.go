package reserve_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestCloseOnSlowRedis: Close leaves the fleet within the call timeout the
// Limiter has learned, as every other call does, not within
// Options.CallTimeout alone. A slow machine is not an outage: on a loaded
// CI run, pacerbench's Close failed with "heartbeat: context deadline
// exceeded" while the Limiter's other calls went on, and the member stayed
// listed (holding its share back) until found gone.
func TestCloseOnSlowRedis(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	l, p := viaProxy(t, s, reserve.Options{KeyPrefix: prefix, Logger: quiet, CallTimeout: 100 * time.Millisecond,
		HeartbeatInterval: time.Hour})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1000, Burst: 1000}
	_, err := l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	require.NoError(t, s.Client.ZScore(ctx, prefix+"{limiters}", l.ID()).Err(), "not listed in the fleet")

	// Every round trip now takes 150 ms longer: past CallTimeout, and the
	// Limiter's calls wait for their replies and learn it.
	p.AddLatency(t, 150*time.Millisecond)
	for range 3 {
		r, err := l.Reserve(ctx, "k", lim)
		require.NoError(t, err)
		require.False(t, r.Local(), "a slow Redis paced locally")
	}
	require.False(t, l.Degraded())
	assert.NoError(t, l.Close(), "Close on a slow Redis")
	assert.ErrorIs(t, s.Client.ZScore(ctx, prefix+"{limiters}", l.ID()).Err(), redis.Nil, "still listed in the fleet after Close")
}

// TestPendingSettleGivesBackAtItsShare: a settle of a reservation Redis
// granted, made while Redis was unavailable, is made on Redis when it
// answers again. Made at the share the reservation was granted at (a
// member held: half the rate), it gives back what was not used at that
// share's spacing, what those units took (adjust.lua's "@"), as it would
// have on time. Before, the kept settle forgot the share and gave them back
// at the whole rate's spacing: half of them.
func TestPendingSettleGivesBackAtItsShare(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	a, p := viaProxy(t, s, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 20 * time.Millisecond,
		ProbeInterval: 20 * time.Millisecond, CallTimeout: 200 * time.Millisecond, FailAfter: 1})
	var mode atomic.Value
	mode.Store("local")
	otherMember(t, s, a, &mode)
	require.Eventually(t, func() bool { return a.Share() == 0.5 }, 30*time.Second, 5*time.Millisecond, "the other member never counted as held")

	// 10 tokens a second, burst 400: a's half is 5 a second and a burst
	// of 200.
	pol := reserve.Policy{{Name: "tps", Unit: "tokens", Limit: reserve.Limit{Rate: 10, Burst: 400}}}
	tok := func(n float64) reserve.Cost { return reserve.Cost{"tokens": n} }
	r, err := a.ReserveN(ctx, reserve.Request{Key: "k", Policy: pol, Cost: tok(100)})
	require.NoError(t, err)
	require.False(t, r.Local())
	require.Empty(t, r.Band(), "100 of the half's burst of 200, at once")
	p.Disable(t)
	require.NoError(t, r.Settle(ctx, tok(40)), "a settle while Redis is unavailable is kept for it")
	p.Enable(t)
	backOnRedis(t, a)
	require.Eventually(t, func() bool { return a.Share() == 0.5 }, 30*time.Second, 5*time.Millisecond)
	// 60 came back at the half's spacing: 160 of the 200 are there at once
	// (and what refilled meanwhile). At the whole rate's, 30 came back:
	// 130 and 5 a second, so 155 waited up to 5 s.
	r2, err := a.ReserveN(ctx, reserve.Request{Key: "k", Policy: pol, Cost: tok(155)})
	require.NoError(t, err)
	require.False(t, r2.Local())
	assert.Empty(t, r2.Band(), "155 tokens waited %v for %s: the settle's 60 did not come back whole", r2.Delay(), r2.Band())
}
