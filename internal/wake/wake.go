// Package wake ends sleeps on time.
//
// Go's timers wake up to about a millisecond late: the runtime's poller
// sleeps in whole milliseconds. A Sleeper sleeps on a timer until Margin
// before its deadline, then finishes on a precise timer of the operating
// system (on Linux a timerfd read through Go's poller, see
// precise_linux.go), which parks the goroutine like any read and wakes it
// within tens of µs of the deadline.
package wake

import (
	"context"
	"time"
)

// DefaultMargin is how long before a deadline a Sleeper hands over from Go's
// timer to the precise one unless told otherwise: Go's timers are rarely
// later than that.
const DefaultMargin = 2 * time.Millisecond

// A Sleeper sleeps until deadlines. Margin is the last part of a sleep spent
// on the precise timer; negative: Go's timer only.
type Sleeper struct {
	Margin time.Duration
}

// Coarse sleeps on Go's timer until Margin before deadline (or until
// deadline when Margin is negative), or until ctx ends; it returns
// ctx.Err() then.
func (s Sleeper) Coarse(ctx context.Context, deadline time.Time) error {
	d := time.Until(deadline)
	if s.Margin > 0 {
		d -= s.Margin
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// CoarseOr is Coarse that also ends when wake is closed: woken reports
// that it did.
func (s Sleeper) CoarseOr(ctx context.Context, deadline time.Time, wake <-chan struct{}) (woken bool, err error) {
	d := time.Until(deadline)
	if s.Margin > 0 {
		d -= s.Margin
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-wake:
			return true, ctx.Err()
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	return false, ctx.Err()
}

// Fine sleeps until deadline on the precise timer (Go's timer when Margin
// is negative or the precise timer fails). It does not watch any context:
// it is meant for the last Margin of a sleep.
func (s Sleeper) Fine(deadline time.Time) {
	if s.Margin < 0 {
		if d := time.Until(deadline); d > 0 {
			time.Sleep(d)
		}
		return
	}
	sleepUntil(deadline, preciseUntil)
}

// Sleep is Coarse then Fine: it sleeps until deadline, or returns ctx.Err()
// if ctx ends before the last Margin.
func (s Sleeper) Sleep(ctx context.Context, deadline time.Time) error {
	if err := s.Coarse(ctx, deadline); err != nil {
		return err
	}
	s.Fine(deadline)
	return nil
}

// sleepUntil sleeps with until until deadline has passed, falling back to
// time.Sleep when until fails. until reports whether it returned once the
// deadline had passed (it was woken for it: no clock read needed).
func sleepUntil(deadline time.Time, until func(time.Time) bool) {
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return
		}
		if until(deadline) {
			return
		}
		if d := time.Until(deadline); d > 0 {
			time.Sleep(d)
		}
	}
}
