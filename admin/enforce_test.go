package admin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestStoredInFlightEnforced: an operator's N (SetInFlight) is the N every
// Limiter keeps to from its next call for seats, in place of its code's,
// also on a key whose seats record expired; UnsetInFlight gives the code's
// back.
func TestStoredInFlightEnforced(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	req := reserve.Request{Key: "host", Policy: reserve.Policy{{Name: "open", Unit: "requests", InFlight: 4}},
		Cost: reserve.Cost{"requests": 1}}
	tooLong := func() bool {
		r, err := l.TryReserveN(ctx, req, 0)
		if err == nil {
			r.Done()
		}
		var wt *reserve.WaitTooLongError
		return errors.As(err, &wt) && wt.Band == "open"
	}

	_, err = a.SetInFlight(ctx, "host", 1, "ops", "one at a time")
	require.NoError(t, err)
	r1, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	require.True(t, tooLong(), "N 1 stored: a second call finds no seat")
	r1.Done()

	// The seats record gone (expired): the stored N stays in force.
	require.NoError(t, s.Client.Del(ctx, prefix+"{host}:seats", prefix+"{host}:seatq").Err())
	r1, err = l.Acquire(ctx, req)
	require.NoError(t, err)
	require.True(t, tooLong(), "N 1 stored, the seats record gone: still one")

	_, err = a.UnsetInFlight(ctx, "host", "ops", "back to the code's")
	require.NoError(t, err)
	require.False(t, tooLong(), "the code's N 4 again")
	r1.Done()
}
