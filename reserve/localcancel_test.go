package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestLocalCancelAfterHandback: a local grant cancelled once its Limiter
// is back on Redis, with local grants after it still live, gives back
// nothing those later ones built on. Before, the handback's floor made
// the bucket empty at the last local slot but left the key's last event
// at Redis's own, before every local slot, so adjust.lua took any local
// grant for the last reservation and gave its whole unit back: the next
// slot fell on the last local one, still live (two calls at one instant
// on a bucket of burst 1).
func TestLocalCancelAfterHandback(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	l, _ := onFakeClock(t, s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), FailAfter: 1, ProbeInterval: 10 * time.Millisecond})
	lim := reserve.Limit{Rate: 1, Burst: 1}
	r0, err := l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	require.False(t, r0.Local())
	heal := outage(t, s)
	var locals []*reserve.Reservation
	for range 3 {
		r, err := l.Reserve(ctx, "k", lim)
		require.NoError(t, err)
		require.True(t, r.Local())
		locals = append(locals, r)
	}
	heal()
	backOnRedis(t, l)
	require.NoError(t, locals[1].Cancel(ctx), "a local grant before the last one")
	next, err := l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	require.False(t, next.Local())
	require.True(t, next.Time().After(locals[2].Time()), "the next slot %v, on or before the last local one %v, still live",
		next.Time().Sub(r0.Time()), locals[2].Time().Sub(r0.Time()))

	// The last local grant cancelled: its slot comes back, as a cancel of
	// a key's last reservation does.
	require.NoError(t, next.Cancel(ctx))
	require.NoError(t, locals[2].Cancel(ctx), "the last local grant")
	again, err := l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	require.Equal(t, locals[2].Time(), again.Time(), "the last local grant's slot, given back")
}
