//go:build !linux

package reserve

import "time"

// lockThread does nothing: precise sleeps are implemented on Linux only.
func (w *waker) lockThread() {}

// preciseSleep is time.Sleep: precise sleeps are implemented on Linux only.
func preciseSleep(d time.Duration) { time.Sleep(d) }
