package wake

import "time"

// preciseSleep sleeps for d on the process's shared timerfd (see shared):
// the goroutine parks, holding no thread, and the poller wakes the timer's
// goroutine as soon as the kernel's timer fires (the poller's own timeout,
// in whole milliseconds, plays no part); false if the timerfd could not be
// made or set.
//
// nanosleep on the goroutine's own thread was measured too: as precise, but
// it holds a P until the runtime takes it back, which made other sleepers
// milliseconds late.
func preciseSleep(d time.Duration) bool {
	return shared.sleep(time.Now().Add(d))
}
