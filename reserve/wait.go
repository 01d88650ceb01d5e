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

// WaitN reserves n permits on key and sleeps until their slot (see
// Reservation.Sleep: it never returns into a pause, nor long after the slot).
//
// If ctx has a deadline, WaitN waits no later than it: when the slot would
// come after the deadline, it reserves nothing and fails at once with an
// error wrapping a *WaitTooLongError. If ctx ends while WaitN sleeps, the
// reservation is canceled (its permits go back, see Reservation.Cancel) and
// ctx.Err() is returned.
func (l *Limiter) WaitN(ctx context.Context, key string, lim Limit, n int) error {
	s, amounts, err := l.single(key, lim, n)
	if err != nil {
		return err
	}
	return l.wait(ctx, key, s, amounts)
}

// WaitPolicy is WaitN for a policy: it reserves cost on key (see
// ReservePolicy) and sleeps until the slot. Use the reservation's Settle
// through ReservePolicy instead when the actual cost is known only after the
// call.
func (l *Limiter) WaitPolicy(ctx context.Context, key string, pol Policy, cost Cost) error {
	s, amounts, err := l.policy(key, pol, cost)
	if err != nil {
		return err
	}
	return l.wait(ctx, key, s, amounts)
}

func (l *Limiter) wait(ctx context.Context, key string, s *spec, amounts []float64) error {
	if l.closed.Load() {
		return ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	maxWait := time.Duration(-1)
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		// A context deadline is wall-clock time, whatever Options.Clock is.
		maxWait = time.Until(deadline)
		if maxWait < 0 {
			return fmt.Errorf("reserve: wait %q: %w", key, context.DeadlineExceeded)
		}
	}
	r, err := l.reserve(ctx, "wait", key, s, amounts, maxWait)
	if err != nil {
		var tooLong *WaitTooLongError
		if errors.As(err, &tooLong) {
			tooLong.Deadline = true
			return fmt.Errorf("reserve: wait %q: context deadline too near: %w", key, err)
		}
		return err
	}
	if hasDeadline {
		// The script measured the wait from when it ran; the slot counts
		// from the reply. If the round trip pushed it past the deadline,
		// give the slot back now, while it is still in the future.
		if wait := r.Delay(); time.Now().Add(wait).After(deadline) {
			r.cancelDetached()
			return fmt.Errorf("reserve: wait %q: context deadline too near: %w", key,
				&WaitTooLongError{Wait: wait, MaxWait: time.Until(deadline), Deadline: true})
		}
	}
	return r.Sleep(ctx)
}
