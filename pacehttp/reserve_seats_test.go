package pacehttp_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReserveSleepMoveGivesSeatsBack shows a bug in package reserve's
// in-flight code (found while building pacehttp's, which does not depend
// on it: pacehttp takes its seats apart and ends them on every error).
//
// A reservation of ReserveN on a policy with an in-flight band beside a
// bucket holds its seat while it sleeps. When a pause comes to cover its
// slot and the first slot after the pause is past the context's deadline,
// Sleep returns an error wrapping *reserve.WaitTooLongError ("moving to a
// fresh slot") and the reservation keeps its seat: the call cannot be made
// (its slot lies inside the pause), yet its seat stays taken until the
// caller thinks of calling Done, or the Limiter closes. Sleep gives the
// seat back when ctx ends; a failed move should too, as Acquire (which
// calls Done on any error of Sleep) does for its callers.
//
// Fixed: Sleep gives the seats back whenever it returns an error.
func TestReserveSleepMoveGivesSeatsBack(t *testing.T) {
	l := fleet(t, 1)[0]
	ctx := context.Background()
	req := reserve.Request{Key: "k", Policy: reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 1},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 1, Burst: 1}},
	}, Cost: reserve.Cost{"requests": 1}}
	first, err := l.ReserveN(ctx, req) // spends the burst: the next slot is 1 s away
	require.NoError(t, err)
	first.Done()
	r, err := l.ReserveN(ctx, req)
	require.NoError(t, err)
	require.Greater(t, r.Delay(), time.Duration(0))
	require.NoError(t, l.Pause(ctx, "k", time.Hour))

	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	err = r.Sleep(sctx)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "the slot after the pause is past the deadline")

	// The call was not made and cannot be: its seat should be free.
	next, err := l.TryReserveN(ctx, reserve.Request{Key: "k", Policy: reserve.Policy{req.Policy[0]}, Cost: req.Cost}, 0)
	if assert.NoError(t, err, "the seat of a reservation whose Sleep failed to move is still held") {
		next.Done()
	}
	r.Done()
}
