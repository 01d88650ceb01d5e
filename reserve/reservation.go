package reserve

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A Reservation holds permits granted by a Limiter for a slot in time. Its
// permits should be used at Time() and not before; Delay says how long until
// then. A Reservation is safe for concurrent use.
type Reservation struct {
	lim   *Limiter
	key   string
	limit Limit
	n     int
	at    time.Time // the slot, on the limiter's clock

	// The slot as the script knows it, exact, and the reservation's number
	// on its key: they identify the reservation to cancel.lua.
	slotUS, slotFrac string
	seq              int64

	// local is set when the reservation was made by the local fallback.
	local *rate.Reservation

	mu       sync.Mutex
	canceled bool
}

// Key returns the key the permits were reserved on.
func (r *Reservation) Key() string { return r.key }

// N returns the number of permits reserved.
func (r *Reservation) N() int { return r.n }

// Limit returns the Limit the permits were reserved with.
func (r *Reservation) Limit() Limit { return r.limit }

// Time returns the slot: the time, on the limiter's clock, from which the
// permits may be used. With Redis server time (no Options.Clock) it is the
// local time the reply arrived plus the wait Redis computed, so it is never
// earlier than the slot Redis granted.
func (r *Reservation) Time() time.Time { return r.at }

// DelayFrom returns how long after t the permits may be used; zero if they
// already may.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	d := r.at.Sub(t)
	if d < 0 {
		return 0
	}
	return d
}

// Delay is DelayFrom the limiter's clock's now.
func (r *Reservation) Delay() time.Duration {
	return r.DelayFrom(r.lim.clock.Now())
}

// Sleep sleeps until the slot: on Go's timer, then, for the last
// Options.PreciseWake, on a precise sleep, so it returns within tens of µs
// after the slot on Linux (Go's timer alone wakes up to about a millisecond
// late). If ctx ends first, Sleep cancels the reservation (its permits go
// back, see Cancel; best effort, bounded by Options.CallTimeout) and returns
// ctx.Err(); a ctx that ends within the last PreciseWake is not noticed, and
// Sleep returns at the slot.
func (r *Reservation) Sleep(ctx context.Context) error {
	l := r.lim
	err := l.waker.sleep(ctx, r.Delay())
	if err == nil {
		return nil
	}
	// ctx can no longer carry the call; CallTimeout bounds it.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.opts.CallTimeout)
	defer cancel()
	// A reservation that cannot be canceled just keeps its slot, as if its
	// caller had used it.
	_ = r.Cancel(cctx)
	return err
}

// Cancel gives the permits back, as x/time/rate's CancelAt does, at the time
// of the limiter's clock: it restores the permits that later reservations
// have not already built on, never more than the burst and never once the
// slot has passed, and it never shortens a Pause. Calls after one that
// succeeded do nothing, and so does a call that Redis runs twice (a client
// retry): each key remembers its last 16 cancels. If Cancel fails (Redis
// unreachable), it may be called again. A reservation made by the local
// fallback is canceled locally.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.canceled {
		return nil
	}
	l := r.lim
	if r.local != nil {
		r.local.CancelAt(l.clock.Now())
		r.canceled = true
		return nil
	}
	_, args := l.args(r.limit, r.n, r.slotUS, r.slotFrac, r.seq)
	if _, err := l.run(ctx, "cancel", l.cancelScript, r.key, args); err != nil {
		return err
	}
	r.canceled = true
	return nil
}
