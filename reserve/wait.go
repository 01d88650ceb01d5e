package reserve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/names"
)

// The way of a call, top-down (docs/design.md, "The way of a call"). Wait,
// and every method that reserves, passes four stages once each, in this
// order, each in its file:
//
//  1. forming a batch (batch.go, lease.go): concurrent callers on one key
//     share one Redis call, and a hot key's callers take leased slots;
//  2. running it (run.go): one script call on Redis, or the same scripts
//     on the local store while Redis is unavailable (local.go);
//  3. placing the slots on the local clock (place.go): the reply's waits,
//     counted on the server's clock, become Reservations;
//  4. sleeping and redeeming (sleep.go): Wait sleeps to the slot, moved by
//     a pause or a resume, and a caller that woke too late takes a fresh
//     slot.
//
// Before the first stage, reserve.go checks the input and refuses a maximum
// wait it already knows to be too short (refusals.go).

// Wait is WaitN(ctx, Single(key, lim, 1)): what most callers want.
func (l *Limiter) Wait(ctx context.Context, key string, lim Limit) error {
	ctx, tr := l.startWait(ctx, key)
	s, amounts, err := l.single(key, lim, 1)
	var late time.Duration
	if err == nil {
		late, err = l.waitFor(ctx, key, s, amounts, nil, tr)
	}
	return endWait(tr, err, late)
}

// WaitN reserves req's cost (see ReserveN) and sleeps until its slot (see
// Reservation.Sleep: it never returns into a pause, nor long after the
// slot). Use ReserveN and the reservation's Settle instead when the actual
// cost is known only after the call.
//
// If ctx has a deadline, WaitN waits no later than it: when the slot would
// come after the deadline, it reserves nothing and fails at once with an
// error wrapping a *WaitTooLongError. If ctx ends while WaitN sleeps, the
// reservation is canceled (its cost goes back, see Reservation.Cancel) and
// ctx.Err() is returned.
//
// A fair request (one naming a Tenant or a Lane) waits for its turn, then
// for its slot; with a deadline it fails once its turn cannot come before
// the deadline.
func (l *Limiter) WaitN(ctx context.Context, req Request) error {
	ctx, tr := l.startWait(ctx, req.Key)
	s, amounts, f, err := l.check(req)
	var late time.Duration
	if err == nil {
		late, err = l.waitFor(ctx, req.Key, s, amounts, f, tr)
	}
	return endWait(tr, err, late)
}

// startWait starts the Wait's trace, before its input is checked: a Wait
// refused for bad input is traced too (nil: no Tracer).
func (l *Limiter) startWait(ctx context.Context, key string) (context.Context, WaitTrace) {
	if l.opts.Tracer == nil {
		return ctx, nil
	}
	return l.opts.Tracer.StartWait(ctx, key)
}

// endWait ends tr, if any, with the Wait's outcome, and returns err.
func endWait(tr WaitTrace, err error, late time.Duration) error {
	if tr != nil {
		tr.End(err, late)
	}
	return err
}

// waitFor is wait, reporting to tr (nil: no Tracer); late is how long
// after its slot it woke.
func (l *Limiter) waitFor(ctx context.Context, key string, s *spec, amounts []float64, f *fairness, tr WaitTrace) (late time.Duration, err error) {
	if l.closed.Load() {
		return 0, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	maxWait := time.Duration(-1)
	deadline, hasDeadline := ctx.Deadline()
	if hasDeadline {
		// A context deadline is wall-clock time, whatever Options.Clock is.
		maxWait = time.Until(deadline)
		if maxWait < 0 {
			return 0, fmt.Errorf("reserve: wait %q: %w", key, context.DeadlineExceeded)
		}
	}
	r, err := l.reserve(ctx, names.OpWait, key, s, amounts, f, maxWait)
	if err != nil {
		var tooLong *WaitTooLongError
		if errors.As(err, &tooLong) {
			tooLong.Deadline = true
			return 0, fmt.Errorf("reserve: wait %q: context deadline too near: %w", key, err)
		}
		return 0, err
	}
	if tr != nil {
		tr.Reserved(r)
	}
	if hasDeadline {
		// The script measured the wait from when it ran; the slot counts
		// from the reply. If the round trip pushed it past the deadline,
		// give the slot back now, while it is still in the future.
		now := time.Now()
		wait := r.DelayFrom(now) // the system clock: one reading
		if l.clock != systemClockValue {
			wait = r.Delay()
		}
		if now.Add(wait).After(deadline) {
			r.cancelDetached()
			return 0, fmt.Errorf("reserve: wait %q: context deadline too near: %w", key,
				&WaitTooLongError{Wait: wait, MaxWait: time.Until(deadline), Deadline: true, Band: r.Band()})
		}
	}
	l.replyCovers(r)
	return r.sleep(ctx, tr)
}
