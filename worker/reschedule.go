package worker

import (
	"fmt"
	"time"
)

// RateLimitedError is what a paced handler returns to reschedule its task to
// the slot kept for it: the wait was longer than Options.MaxSleep, the
// task's deadline was too near to sleep through it, or the provider answered
// 429 (see Pause). Match it with errors.As.
//
// It is not a failure: with Config (or IsFailure, RetryDelay and
// ErrorHandler) in asynq.Config, asynq reschedules the task RetryIn from now
// without counting a retry, and keeps it out of the error handler.
type RateLimitedError struct {
	Key     string        // the key the task is paced on
	Slot    time.Time     // the slot kept for the task, on Options.Clock; for a fair task, or while Redis is unavailable, nothing is kept: when its turn or slot is expected
	RetryIn time.Duration // when asynq should run the task again: Options.Lead before Slot
	Paused  bool          // the key was paused (the provider answered 429)
	// InFlight: no seat on the key's in-flight band came within
	// Options.MaxSleep; nothing is kept for the task, which comes back
	// RetryIn (MaxSleep) later and waits for a seat again.
	InFlight bool
}

func (e *RateLimitedError) Error() string {
	if e.Paused {
		return fmt.Sprintf("worker: %q paused by the provider; rescheduled to its slot in %v", e.Key, e.RetryIn)
	}
	if e.InFlight {
		return fmt.Sprintf("worker: no seat free on %q's in-flight band; rescheduled in %v", e.Key, e.RetryIn)
	}
	return fmt.Sprintf("worker: rate limited on %q; rescheduled to its slot in %v", e.Key, e.RetryIn)
}
