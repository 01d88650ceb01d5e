// Package lead holds the asynq timing that packages worker and scheduler
// must agree on, so that each is defined once.
package lead

import "time"

// Default is how long before its slot a task is made due (asynq.ProcessAt,
// or a retry's delay): it fits the asynq intervals worker.Config sets (a
// task comes back within DelayedTaskCheckInterval + 1.5 TaskCheckInterval
// = 400 ms of the time it was due), plus 100 ms.
const Default = 500 * time.Millisecond

// The asynq.Config intervals worker.Config sets when they are zero, and
// that Default fits.
const (
	DelayedTaskCheckInterval = 250 * time.Millisecond
	TaskCheckInterval        = 100 * time.Millisecond
)

// Resolve turns an Options.Lead into the lead to use: 0 means Default,
// negative means none.
func Resolve(d time.Duration) time.Duration {
	switch {
	case d == 0:
		return Default
	case d < 0:
		return 0
	}
	return d
}
