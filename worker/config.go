package worker

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/lead"
)

// The asynq.Config intervals Config sets when they are zero, and that
// DefaultLead fits.
const (
	// DelayedTaskCheckInterval: how often a server moves due scheduled and
	// retry tasks to their queue (asynq's default is 5 s). Each check is one
	// small script per queue.
	DelayedTaskCheckInterval = lead.DelayedTaskCheckInterval

	// TaskCheckInterval: how often an idle server looks for new tasks
	// (asynq's default is 1 s). Each look is one small script per queue, on
	// idle servers only.
	TaskCheckInterval = lead.TaskCheckInterval
)

// Config returns cfg set up for a Pacer's Middleware:
//
//   - IsFailure says a *RateLimitedError is not a failure, so asynq counts
//     no retry for it; cfg.IsFailure, if set, decides for other errors.
//   - RetryDelayFunc reschedules a *RateLimitedError to its RetryIn;
//     cfg.RetryDelayFunc (default asynq.DefaultRetryDelayFunc) handles
//     other errors.
//   - ErrorHandler, if set, no longer sees *RateLimitedError.
//   - DelayedTaskCheckInterval and TaskCheckInterval, if zero, are set to
//     the values above, which Options.Lead's default fits: a rescheduled
//     task comes back within about DelayedTaskCheckInterval + 1.5
//     TaskCheckInterval (400 ms) of the time it was due.
//
// Use it as asynq.NewServer(redis, worker.Config(asynq.Config{...})).
func Config(cfg asynq.Config) asynq.Config {
	if isFailure := cfg.IsFailure; isFailure != nil {
		cfg.IsFailure = func(err error) bool { return IsFailure(err) && isFailure(err) }
	} else {
		cfg.IsFailure = IsFailure
	}
	if delay := cfg.RetryDelayFunc; delay != nil {
		cfg.RetryDelayFunc = func(n int, err error, t *asynq.Task) time.Duration {
			var rl *RateLimitedError
			if errors.As(err, &rl) {
				return rl.RetryIn
			}
			return delay(n, err, t)
		}
	} else {
		cfg.RetryDelayFunc = RetryDelay
	}
	cfg.ErrorHandler = ErrorHandler(cfg.ErrorHandler)
	if cfg.DelayedTaskCheckInterval == 0 {
		cfg.DelayedTaskCheckInterval = DelayedTaskCheckInterval
	}
	if cfg.TaskCheckInterval == 0 {
		cfg.TaskCheckInterval = TaskCheckInterval
	}
	return cfg
}

// IsFailure is for asynq.Config.IsFailure: a *RateLimitedError is not a
// failure (asynq does not count a retry for it); any other non-nil error is.
//
// To combine it with your own predicate:
//
//	IsFailure: func(err error) bool { return worker.IsFailure(err) && mine(err) },
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	var rl *RateLimitedError
	return !errors.As(err, &rl)
}

// RetryDelay is for asynq.Config.RetryDelayFunc: it reschedules a task that
// returned a *RateLimitedError to RetryIn from now, and falls back to
// asynq.DefaultRetryDelayFunc for other errors.
//
// To keep your own function for other errors, check for the error first:
//
//	var rl *worker.RateLimitedError
//	if errors.As(err, &rl) {
//		return rl.RetryIn
//	}
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	var rl *RateLimitedError
	if errors.As(err, &rl) {
		return rl.RetryIn
	}
	return asynq.DefaultRetryDelayFunc(n, err, t)
}

// ErrorHandler is for asynq.Config.ErrorHandler: it passes errors to h
// except *RateLimitedError, which is a reschedule, not an error. It returns
// nil for a nil h.
func ErrorHandler(h asynq.ErrorHandler) asynq.ErrorHandler {
	if h == nil {
		return nil
	}
	return asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
		var rl *RateLimitedError
		if errors.As(err, &rl) {
			return
		}
		h.HandleError(ctx, t, err)
	})
}
