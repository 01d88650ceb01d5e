package reserve

import (
	"context"
	"time"
)

// DefaultPreciseWake is Options.PreciseWake's default.
const DefaultPreciseWake = 2 * time.Millisecond

// A waker ends sleeps on time. Go's timers wake up to about a millisecond
// late: the runtime's poller sleeps in whole milliseconds. A sleep runs on a
// timer until margin before its deadline, then finishes on a precise timer
// of the operating system (preciseSleep: a timerfd read through Go's poller
// on Linux, see wake_linux.go), which parks the goroutine like any read and
// wakes it when the kernel's timer fires.
type waker struct {
	margin time.Duration // < 0: timers only
}

func newWaker(margin time.Duration) *waker { return &waker{margin: margin} }

// sleep sleeps for d of real time, or until ctx ends (then it returns
// ctx.Err()). The last margin of the sleep does not watch ctx.
func (w *waker) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	deadline := time.Now().Add(d)
	coarse := d
	if w.margin >= 0 {
		coarse = d - w.margin
	}
	if coarse > 0 {
		t := time.NewTimer(coarse)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	sleepUntil(deadline, preciseSleep)
	return nil
}

// sleepUntil sleeps with sleepFor until deadline has passed, falling back to
// time.Sleep if sleepFor fails.
func sleepUntil(deadline time.Time, sleepFor func(time.Duration) bool) {
	for {
		d := time.Until(deadline)
		if d <= 0 {
			return
		}
		if !sleepFor(d) {
			time.Sleep(d)
		}
	}
}
