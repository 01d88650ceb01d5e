package wake

import "time"

// preciseUntil sleeps until deadline on the process's shared timerfd (see
// shared): the goroutine parks, holding no thread, and the poller wakes the
// timer's goroutine as soon as the kernel's timer fires (the poller's own
// timeout, in whole milliseconds, plays no part). It reports whether it
// slept until the deadline; false if the timerfd could not be made or set
// (the caller sleeps the rest on Go's timer).
//
// nanosleep on the goroutine's own thread was measured too: as precise, but
// it holds a P until the runtime takes it back, which made other sleepers
// milliseconds late.
func preciseUntil(deadline time.Time) bool {
	return shared.sleep(deadline)
}
