//go:build !linux

package wake

import "time"

// preciseUntil is time.Sleep: precise sleeps are implemented on Linux only.
func preciseUntil(deadline time.Time) bool { time.Sleep(time.Until(deadline)); return true }
