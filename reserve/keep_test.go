package reserve_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestNewcomerLeavesMissingShare: Redis restarted empty while members a
// and c paced locally (they lost it); c is back first, and remembers a,
// which still cannot reach Redis. A newcomer that joins then leaves a its share, on the
// fleet's lattice as a paces on it. Before, the newcomer took a's rank,
// heard of nobody held, and took the whole of every key on Redis beside
// a's local slots (the combination runner's seed 49: 36 requests in 1.6 s
// where 34 were allowed).
func TestNewcomerLeavesMissingShare(t *testing.T) {
	s := redistest.NewProcess(t)
	prefix := redistest.Prefix(t)
	opts := reserve.Options{KeyPrefix: prefix, HeartbeatInterval: 100 * time.Millisecond, ProbeInterval: 50 * time.Millisecond, Logger: quiet}
	p := redistest.NewProxy(t, s.Addr)
	ca := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer ca.Close()
	a, err := reserve.New(ca, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	pc := redistest.NewProxy(t, s.Addr)
	cc := redis.NewClient(&redis.Options{Addr: pc.Addr()})
	defer cc.Close()
	c, err := reserve.New(cc, opts)
	require.NoError(t, err)
	closeLimiter(t, c)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && c.FleetSize() == 2 && c.Share() == 1 }, 10*time.Second, 10*time.Millisecond,
		"c never saw a fleet of two on Redis")
	// The change of the fleet's size grows old (two suspect intervals), so
	// that c is no newcomer to a fleet of one: it remembers a when it
	// loses Redis.
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, a.Beat(t.Context()))
	require.NoError(t, c.Beat(t.Context()))

	// Both lose Redis, which restarts empty (the fleet is forgotten);
	// c is back first.
	p.Disable(t)
	pc.Disable(t)
	require.Eventually(t, func() bool { return a.Degraded() && c.Degraded() }, 10*time.Second, 10*time.Millisecond, "a and c never paced locally")
	s.Restart(t)
	pc.Enable(t)
	require.Eventually(t, func() bool { return !c.Degraded() }, 10*time.Second, 10*time.Millisecond, "c never came back")
	require.NoError(t, c.Beat(t.Context()))
	require.True(t, a.Degraded(), "a is still away")

	d, err := reserve.New(s.NewClient(t), opts)
	require.NoError(t, err)
	closeLimiter(t, d)
	assert.Equal(t, 0.5, d.Share(), "the newcomer beside a, missing, and c: it leaves a its half")
	assert.Equal(t, 0.5, c.Share(), "c")
}
