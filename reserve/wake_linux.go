package reserve

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// lockThread gives the waker an OS thread of its own, whose timer slack (how
// late the kernel may end a sleep to batch wake-ups; 50 µs by default) it
// sets to 1 µs. The thread ends with the goroutine.
func (w *waker) lockThread() {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0) // best effort
}

// preciseSleep sleeps for d with nanosleep, which the kernel ends within the
// timer slack, instead of Go's poller, which sleeps in whole milliseconds.
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil) // an early return (EINTR) just loops once more
}
