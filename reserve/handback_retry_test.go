package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestFailedHandbackRetriedWithHeartbeat: a key's handback that Redis
// refused when the Limiter came back (on a Cluster, the key's master still
// frozen while the others answered the probe; here, the key briefly of
// another type) is handed over again after the next heartbeat that finds
// Redis, not only with the Limiter's next call on the key: a pause made
// locally during the outage then reaches the fleet while it is in force.
// Before, it waited for that call, which the Limiter's own callers,
// waiting the pause out, make only once it has ended (combination runner,
// Cluster seed 16: another process fired into such a pause 60 ms after
// the key's master thawed).
func TestFailedHandbackRetriedWithHeartbeat(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	l, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, FailAfter: 1, ProbeInterval: 20 * time.Millisecond,
		HeartbeatInterval: 50 * time.Millisecond, CallTimeout: 200 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 10, Burst: 1}
	_, err = l.Reserve(ctx, "api", lim)
	require.NoError(t, err)

	p.Disable(t)
	r, err := l.Reserve(ctx, "api", lim)
	require.NoError(t, err)
	require.True(t, r.Local())
	require.NoError(t, l.Pause(ctx, "api", time.Minute))
	key := l.RedisKey("api")
	require.NoError(t, s.Client.Del(ctx, key).Err())
	require.NoError(t, s.Client.RPush(ctx, key, "not pacer's").Err())
	p.Enable(t)
	backOnRedis(t, l)
	require.Equal(t, "list", s.Client.Type(ctx, key).Val(), "the handback changed a key of another type")
	require.NoError(t, s.Client.Del(ctx, key).Err())

	// No call on "api" from here: the pause must reach Redis by itself.
	require.Eventually(t, func() bool {
		state, err := s.Client.Get(ctx, key).Result()
		return err == nil && layout.PauseEnd(state) > time.Now().Add(30*time.Second).UnixNano()
	}, 20*time.Second, 5*time.Millisecond, "the pause made while pacing locally never reached Redis")
}
