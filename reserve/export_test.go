package reserve

import (
	"math"
	"strconv"
)

// ServerSlot returns the slot Redis granted r, in Unix ns on the server's
// clock, exact to the ns, for tests that judge the schedule itself rather
// than when callers woke; ok is false for a reservation of the local
// fallback.
func ServerSlot(r *Reservation) (ns int64, ok bool) {
	if r.local != nil {
		return 0, false
	}
	us, err1 := strconv.ParseInt(r.slotUS, 10, 64)
	frac, err2 := strconv.ParseFloat(r.slotFrac, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return us*1000 + int64(math.Round(frac*1000)), true
}

// FleetSize exposes the fleet size last learned, for tests.
func (l *Limiter) FleetSize() int { return l.fleetSize() }

// Degraded exposes whether the Limiter paces locally, for tests.
func (l *Limiter) Degraded() bool { return l.isDegraded() }

// Queued returns how many callers wait on key and lim for a call in flight to
// return, for tests.
func (l *Limiter) Queued(key string, lim Limit) int {
	c := &l.coalescer
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[batchKey{key, lim}]; q != nil {
		return len(q.pending)
	}
	return 0
}
