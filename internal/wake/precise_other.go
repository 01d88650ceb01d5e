//go:build !linux

package wake

import "time"

// preciseSleep is time.Sleep: precise sleeps are implemented on Linux only.
func preciseSleep(d time.Duration) bool { time.Sleep(d); return true }
