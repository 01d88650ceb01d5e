package hold_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestHoldWaitsForRedis: Hold while Redis is down waits for it and then
// holds, instead of returning the outage's error; a Limiter that fails
// closed gets reserve.ErrUnavailable at once; a context that ends first
// gets its own error. CI beside a CPU hog: one Redis call slower than the
// CallTimeout made scheduler.Enqueue fail, and examples/batch exit.
func TestHoldWaitsForRedis(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	opts := reserve.Options{KeyPrefix: prefix, CallTimeout: 100 * time.Millisecond, FailAfter: 1,
		ProbeInterval: 50 * time.Millisecond, Logger: quiet}
	l, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, l)
	closed := opts
	closed.FailClosed = true
	fc, err := reserve.New(s.NewClient(t), closed)
	require.NoError(t, err)
	closeLimiter(t, fc)
	b := holds(t, l, hold.Options{})
	reqs := []hold.Request{{ID: "t1", Request: permits("out")}, {ID: "t2", Request: permits("out")}}
	_, err = b.Hold(ctx, reqs[:1]) // Redis known, scripts loaded
	require.NoError(t, err)

	s.Stop(t)
	_, err = holds(t, fc, hold.Options{}).Hold(ctx, reqs)
	require.ErrorIs(t, err, reserve.ErrUnavailable, "failing closed")
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = b.Hold(short, reqs)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "a context that ends while Redis is down")
	require.False(t, errors.Is(err, reserve.ErrUnavailable), "%v", err)

	type result struct {
		gs  []*hold.Grant
		err error
	}
	done := make(chan result, 1)
	go func() {
		gs, err := b.Hold(ctx, reqs)
		done <- result{gs, err}
	}()
	select {
	case r := <-done:
		t.Fatalf("Hold returned while Redis was down: %v", r.err)
	case <-time.After(300 * time.Millisecond):
	}
	s.Restart(t)
	r := <-done
	require.NoError(t, r.err)
	require.Len(t, r.gs, 2)
	for _, g := range r.gs {
		require.True(t, g.Kept)
	}
}
