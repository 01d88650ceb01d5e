package reserve_test

import (
	"cmp"
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestFleetSwitchToIndexes: a fleet switched to format 3 (`pacer format 3`)
// keeps the heartbeat's indexes from its members' next heartbeats
// (docs/protocol.md, Heartbeat: the writers, the holes) with every rank as
// it was; a member that leaves frees its rank as a hole, which the next
// newcomer takes; a member killed is forgotten as before; switched back
// (format 2, before a rollback), the members leave the indexes and the
// fleet is read as before, ranks unchanged.
func TestFleetSwitchToIndexes(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	opts := reserve.Options{KeyPrefix: prefix, HeartbeatInterval: 50 * time.Millisecond, SilentHold: 10 * time.Minute, Logger: quiet}
	keys := layout.FleetKeys(prefix)
	open := func() *reserve.Limiter {
		l, err := reserve.New(s.Client, opts)
		require.NoError(t, err)
		closeLimiter(t, l)
		return l
	}
	sizes := func(n int, ls ...*reserve.Limiter) func() bool {
		return func() bool {
			for _, l := range ls {
				if l.FleetSize() != n {
					return false
				}
			}
			return true
		}
	}
	a := open()
	require.Eventually(t, sizes(1, a), 30*time.Second, 5*time.Millisecond)
	b := open()
	require.Eventually(t, sizes(2, a, b), 30*time.Second, 5*time.Millisecond)
	c := open()
	require.Eventually(t, sizes(3, a, b, c), 30*time.Second, 5*time.Millisecond)
	ranks := map[string]int{a.ID(): a.Rank(), b.ID(): b.Rank(), c.ID(): c.Rank()}
	require.Equal(t, []int{0, 1, 2}, []int{a.Rank(), b.Rank(), c.Rank()}, "ranks in the order of joining")
	require.Zero(t, s.Client.Exists(ctx, keys[9], keys[10], keys[11]).Val(), "indexes written before the switch")

	require.NoError(t, s.Client.Set(ctx, layout.FormatKey(prefix), "3", 0).Err())
	require.Eventually(t, func() bool {
		return s.Client.ZCard(ctx, keys[9]).Val() == 3 && s.Client.ZScore(ctx, keys[11], "v").Err() == nil
	}, 30*time.Second, 5*time.Millisecond, "the members do not keep the indexes")
	for _, l := range []*reserve.Limiter{a, b, c} {
		require.NoError(t, l.Beat(ctx))
		require.Equal(t, ranks[l.ID()], l.Rank(), "a rank moved at the switch")
		require.Equal(t, 3, l.FleetSize())
	}

	// b (rank 1) leaves: a hole, which the next newcomer takes.
	require.NoError(t, b.Close())
	require.Equal(t, []string{"v", "1"}, s.Client.ZRange(ctx, keys[11], 0, -1).Val(), "the holes after rank 1 left")
	d := open()
	require.Equal(t, 1, d.Rank(), "the newcomer's rank: the hole")
	require.Equal(t, []string{"v"}, s.Client.ZRange(ctx, keys[11], 0, -1).Val(), "the holes after the newcomer")
	require.Eventually(t, sizes(3, a, c, d), 30*time.Second, 5*time.Millisecond)

	// c (rank 2, the top) killed: forgotten once its connection is found
	// gone, and the fleet is 2 again.
	c.Kill()
	require.Eventually(t, func() bool { return sizes(2, a, d)() && a.Share() == 1 && d.Share() == 1 }, 30*time.Second, 5*time.Millisecond,
		"c is still counted (sizes %d, %d)", a.FleetSize(), d.FleetSize())
	require.Equal(t, []string{"v"}, s.Client.ZRange(ctx, keys[11], 0, -1).Val(), "the holes after the top was forgotten")

	// Back to format 2: the members leave the indexes; ranks unchanged.
	require.NoError(t, s.Client.Set(ctx, layout.FormatKey(prefix), "2", 0).Err())
	require.Eventually(t, func() bool { return s.Client.ZCard(ctx, keys[9]).Val() == 0 }, 30*time.Second, 5*time.Millisecond,
		"members still in the writers' index after the switch back")
	require.NoError(t, a.Beat(ctx))
	require.NoError(t, d.Beat(ctx))
	require.Equal(t, []int{0, 1, 2, 2}, []int{a.Rank(), d.Rank(), a.FleetSize(), d.FleetSize()})
}

// forFleetFormats runs test on a fleet left at its default format and on
// one switched to format 3 before its Limiters start (`pacer format 3`:
// the members keep the heartbeat's indexes and answer from them), each on a
// server and prefix of its own.
func forFleetFormats(t *testing.T, test func(t *testing.T, s *redistest.Server, prefix string)) {
	for _, format := range []string{"", "3"} {
		t.Run("format="+cmp.Or(format, "unset"), func(t *testing.T) {
			s := redistest.New(t)
			prefix := redistest.Prefix(t)
			if format != "" {
				require.NoError(t, s.Client.Set(context.Background(), layout.FormatKey(prefix), format, 0).Err())
			}
			test(t, s, prefix)
		})
	}
}
