package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// lostLim is the lost-reservation tests' limit: a slot a second.
var lostLim = reserve.Limit{Rate: 1, Burst: 1}

// lostReservation returns a Limiter b and another Limiter's reservation of
// key "k" under lostLim, numbered 5, its slot 4 s ahead, of a state Redis has
// since lost (deleted): b has never used the key. Both run on one fake
// clock (the scripts too), so that slots compare exactly on a loaded
// machine.
func lostReservation(t *testing.T) (b *reserve.Limiter, lost *reserve.Reservation) {
	t.Helper()
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	newLimiter := func() *reserve.Limiter {
		l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Clock: clk, ClientTime: true, Logger: quiet})
		require.NoError(t, err)
		closeLimiter(t, l)
		return l
	}
	a := newLimiter()
	for range 5 {
		r, err := a.Reserve(ctx, "k", lostLim)
		require.NoError(t, err)
		require.False(t, r.Local())
		lost = r
	}
	require.NoError(t, s.Client.Del(ctx, layout.Key(prefix, "k")).Err(), "Redis loses the key's state")
	return newLimiter(), lost
}

// TestCancelOfLostReservationGivesNothing: a reservation of a state Redis
// lost (restarted empty) that is cancelled once a new state has grown on
// the key gives nothing back to the new state, which never charged it.
// Before, adjust.lua read it as one of the new state's: its slot, ahead of
// the new state's last one, made it the last reservation, and its unit came
// back, so that the next reservation took the new state's last slot a
// second time (the combination runner's Cluster seed 54: a reservation
// moved by an operator's pause, which a resume moved back in a state Redis
// then lost, was cancelled at its old slot after the restart; two
// reservations on one slot of a bucket of burst 1).
func TestCancelOfLostReservationGivesNothing(t *testing.T) {
	ctx := context.Background()
	b, lost := lostReservation(t)

	// A new state: b never saw the key, so it brings no horizon of the lost
	// one, and its slots start now.
	r1, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	r2, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	require.Equal(t, r1.Time().Add(time.Second), r2.Time())

	require.NoError(t, lost.Cancel(ctx), "a's reservation of the lost state, its slot still ahead")
	r3, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	require.Equal(t, r2.Time().Add(time.Second), r3.Time(),
		"the new state's next slot %v came back to its last one's, %v: the cancel of a reservation it never granted gave a unit back",
		r3.Time().Sub(r1.Time()), r2.Time().Sub(r1.Time()))
}

// TestCancelBeyondLastEventGivesNothing: the same when the new state's
// numbers have caught up with the lost reservation's, so that its number
// no longer tells it from the new state's: its slot lies beyond the new
// state's last event, which no reservation of the new state can (the last
// event never moves back but for a cancel of the last), so nothing comes
// back either.
func TestCancelBeyondLastEventGivesNothing(t *testing.T) {
	ctx := context.Background()
	b, lost := lostReservation(t)

	// The new state: b's first reservation now, then one a second later,
	// cancelled and taken again until the state has numbered 6.
	first, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	var last *reserve.Reservation
	for i := range 5 {
		r, err := b.Reserve(ctx, "k", lostLim)
		require.NoError(t, err)
		require.Equal(t, first.Time().Add(time.Second), r.Time())
		if i < 4 {
			require.NoError(t, r.Cancel(ctx), "the last reservation: its slot comes back")
		}
		last = r
	}

	require.NoError(t, lost.Cancel(ctx), "a's reservation of the lost state, its slot beyond the new state's last")
	next, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	require.Equal(t, last.Time().Add(time.Second), next.Time(),
		"the new state's next slot %v came back to its last one's, %v", next.Time().Sub(first.Time()), last.Time().Sub(first.Time()))
}
