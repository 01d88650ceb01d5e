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

// TestCloseOnSlowRedis: Close leaves the fleet within the call timeout the
// Limiter has learned, as every other call does, not within
// Options.CallTimeout alone. A slow machine is not an outage: on a loaded
// CI run, pacerbench's Close failed with "heartbeat: context deadline
// exceeded" while the Limiter's other calls went on, and the member stayed
// listed (holding its share back) until found gone.
func TestCloseOnSlowRedis(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	l, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, Logger: quiet, CallTimeout: 100 * time.Millisecond,
		HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1000, Burst: 1000}
	_, err = l.Reserve(ctx, "k", lim)
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
