package reserve

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Wait is WaitN(ctx, key, lim, 1).
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit) error {
	return l.WaitN(ctx, key, lim, 1)
}

// WaitN reserves n permits on key and sleeps until their slot.
//
// If ctx has a deadline, WaitN waits no later than it: when the slot would
// come after the deadline, it reserves nothing and fails at once with an error
// wrapping a *WaitTooLongError. If ctx ends while WaitN sleeps, the
// reservation is canceled (its permits go back, see Reservation.Cancel) and
// ctx.Err() is returned.
func (l *Limiter) WaitN(ctx context.Context, key string, lim Limit, n int) error {
	if err := validate(key, lim, n); err != nil {
		return err
	}
	if l.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	maxWait := time.Duration(-1)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = deadline.Sub(l.clock.Now())
		if maxWait < 0 {
			return fmt.Errorf("reserve: wait %q: %w", key, context.DeadlineExceeded)
		}
	}
	r, err := l.reserve(ctx, "wait", key, lim, n, maxWait)
	if err != nil {
		var tooLong *WaitTooLongError
		if errors.As(err, &tooLong) {
			return fmt.Errorf("reserve: wait %q would exceed the context deadline: %w", key, err)
		}
		return err
	}
	d := r.Delay()
	if d == 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		// ctx can no longer carry the call; CallTimeout bounds it.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.CallTimeout)
		defer cancel()
		// Best effort: a reservation that cannot be canceled just keeps its
		// slot, as if its caller had used it.
		_ = r.Cancel(cctx)
		return ctx.Err()
	}
}
