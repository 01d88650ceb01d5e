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
	b, _, rs := lostReservations(t)
	return b, rs[len(rs)-1]
}

// lostReservations is lostReservation with the clock, and all five of the
// other Limiter's reservations, numbered 1 to 5, their slots now and 1 to
// 4 s ahead.
func lostReservations(t *testing.T) (b *reserve.Limiter, clk *fakeclock.Clock, lost []*reserve.Reservation) {
	t.Helper()
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk = fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
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
		lost = append(lost, r)
	}
	require.NoError(t, s.Client.Del(ctx, layout.Key(prefix, "k")).Err(), "Redis loses the key's state")
	return newLimiter(), clk, lost
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

// TestCancelAfterLossSeenGivesNothing: a reservation of a state Redis lost,
// cancelled by its Limiter after that Limiter has seen the loss (a read
// showed a state numbered before the one it saw), gives nothing back,
// also where adjust.lua cannot tell it from one of the new state's: its
// number at or below the new state's last, its slot within the new
// state's queue. Before, adjust.lua gave back what the new state's later
// slots had not built on (0.9 of a unit here), so that the next
// reservation lay 0.1 s after the new state's last slot: two in 0.1 s on a
// bucket of burst 1. A settle gives nothing back either, and its raise is
// still charged.
func TestCancelAfterLossSeenGivesNothing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		adjust func(context.Context, *reserve.Reservation) error
		later  time.Duration // the next slot after the new state's last
	}{
		{"cancel", func(ctx context.Context, r *reserve.Reservation) error { return r.Cancel(ctx) }, 0},
		{"settle lower", func(ctx context.Context, r *reserve.Reservation) error {
			return r.Settle(ctx, reserve.Cost{reserve.PermitsUnit: 0})
		}, 0},
		{"settle higher", func(ctx context.Context, r *reserve.Reservation) error {
			return r.Settle(ctx, reserve.Cost{reserve.PermitsUnit: 2})
		}, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testAdjustAfterLossSeen(t, tc.adjust, tc.later)
		})
	}
}

func testAdjustAfterLossSeen(t *testing.T, adjust func(context.Context, *reserve.Reservation) error, later time.Duration) {
	ctx := context.Background()
	b, clk, lost := lostReservations(t)

	// 100 ms on, the new state's first reservation, then a sleeper's check
	// of a's first slot, which reads the new state: numbered 1, before
	// a's 5, and written after a's last.
	clk.Advance(100 * time.Millisecond)
	first, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	require.Equal(t, lost[0].Time().Add(100*time.Millisecond), first.Time())
	time.Sleep(time.Millisecond) // older than what a reply's state answers for (checkShare)
	for range 2 {                // the first check is the reply's own
		_, err = reserve.CheckPause(ctx, lost[0])
		require.NoError(t, err)
	}
	require.True(t, reserve.LostSince(lost[4]), "a has seen Redis lose the state of its reservations")

	// The new state grows to number 6, its slots to 5.1 s after a's
	// first; the cancel of its last moves its last event back to 4.1 s,
	// 0.1 s after the slot of a's reservation number 5.
	var last *reserve.Reservation
	for i := range 5 {
		last, err = b.Reserve(ctx, "k", lostLim)
		require.NoError(t, err)
		require.Equal(t, first.Time().Add(time.Duration(i+1)*time.Second), last.Time())
	}
	require.NoError(t, last.Cancel(ctx))

	require.NoError(t, adjust(ctx, lost[4]), "a's reservation of the lost state, 0.1 s before the new state's last event")
	next, err := b.Reserve(ctx, "k", lostLim)
	require.NoError(t, err)
	require.Equal(t, last.Time().Add(later), next.Time(),
		"the next slot lies %v after the new state's first, where its last lies %v after it",
		next.Time().Sub(first.Time()), last.Time().Sub(first.Time()))
}
