package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/reserve"
)

// secondRounding is how early asynq may make a task due: it stores retry and
// ProcessAt times in whole seconds, rounded down.
const secondRounding = time.Second

// Middleware returns asynq middleware that paces the tasks opts.Pace selects
// on l, fleet-wide; other tasks pass straight through.
//
// Before a paced handler runs, the middleware claims the task's slot: the
// slot kept for the task by ID if it has one (it was rescheduled, or
// enqueued for it by package scheduler), else a fresh one. Then:
//
//   - a slot within Options.MaxSleep (and within half the time left before
//     the task's deadline) is slept for, and the handler runs at it;
//   - a later slot is kept for the task, and the handler returns a
//     *RateLimitedError that reschedules the task Options.Lead before it,
//     without counting a retry (see IsFailure and RetryDelay);
//   - a task with no retries left, which asynq would archive on any error,
//     is never rescheduled: it sleeps until its slot, whatever MaxSleep
//     says. If even half the time before its deadline is too short, nothing
//     is reserved and an error wrapping *reserve.WaitTooLongError is
//     returned: asynq archives the task, as it would any task that cannot
//     finish before its deadline.
//
// A kept slot that comes back a little late (at most Options.StaleAfter) is
// used at once; a later one is dropped and a fresh slot taken, so a backlog
// drains at the rate rather than as a burst. A slot nobody comes back for
// expires. A handler that slept checks, before it runs, that no Pause (a
// 429 seen by another worker) has come to cover its slot meanwhile; if one
// has, the task claims a slot after the pause instead.
//
// Errors from Redis are returned wrapped, so asynq retries the task as for
// any failure. If opts is not valid (see Options.Validate) or l is nil, every
// task fails with an error wrapping ErrInvalidOptions.
func Middleware(l *reserve.Limiter, opts Options) asynq.MiddlewareFunc {
	err := opts.Validate()
	if err == nil && l == nil {
		err = fmt.Errorf("%w: nil Limiter", ErrInvalidOptions)
	}
	p := &pacer{
		l:    l,
		opts: opts.withDefaults(),
		hold: reserve.HoldOptions{StaleAfter: opts.StaleAfter},
		err:  err,
	}
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			return p.process(ctx, t, next)
		})
	}
}

// pacer is one Middleware's state.
type pacer struct {
	l    *reserve.Limiter
	opts Options // with defaults
	hold reserve.HoldOptions
	err  error // invalid options
}

// task is a paced task being run; handlers reach it through the context
// (see Pause).
type task struct {
	p          *pacer
	id         string // "" when not run by an asynq server
	permits    reserve.Permits
	reschedule bool // the task has retries left, so it may be rescheduled
}

type taskKey struct{}

func (p *pacer) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	if p.err != nil {
		return p.err
	}
	permits, ok := p.opts.Pace(t)
	if !ok {
		return next.ProcessTask(ctx, t)
	}
	id, hasID := asynq.GetTaskID(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	tk := &task{p: p, id: id, permits: permits, reschedule: hasID && retried < maxRetry}
	ctx = context.WithValue(ctx, taskKey{}, tk)
	for {
		r, err := p.slot(ctx, tk)
		if err != nil {
			return err
		}
		slept, err := p.sleep(ctx, r)
		if err != nil {
			return err
		}
		if slept {
			// Another worker may have paused the key (a 429) while this
			// one slept: then the slot is inside the pause, and the task
			// claims one after it instead of calling the provider.
			in, err := r.InPause(ctx)
			if err != nil && !errors.Is(err, reserve.ErrUnavailable) {
				return fmt.Errorf("worker: task %s: %w", tk.id, err)
			}
			// With Redis unavailable no pause can be known: go on, as
			// the local fallback does.
			if in {
				continue
			}
		}
		err = next.ProcessTask(ctx, t)
		var rl *RateLimitedError
		if !tk.reschedule && errors.As(err, &rl) && rl.Paused {
			// Pause kept a slot for a task that cannot be rescheduled:
			// sleep until it here and run the handler again.
			continue
		}
		return err
	}
}

// slot claims the task's slot and returns it when the handler should sleep
// until it, or a *RateLimitedError when the task is rescheduled to it.
func (p *pacer) slot(ctx context.Context, tk *task) (*reserve.Reservation, error) {
	now := p.opts.Clock.Now()
	limit := time.Duration(math.MaxInt64) // half the time left before the deadline
	if deadline, ok := ctx.Deadline(); ok {
		limit = max(0, deadline.Sub(now)/2)
	}
	maxWait := limit
	hold := p.hold
	if tk.reschedule {
		// A wait shorter than Lead is slept whatever MaxSleep says: a
		// reschedule could not bring the task back before its slot.
		maxWait = min(max(p.opts.MaxSleep, p.opts.Lead), limit)
		// A rescheduled task comes back up to Lead + 1 s before its slot
		// (asynq rounds the retry time down to the second): it sleeps the
		// rest rather than leaving again.
		hold.Early = min(p.opts.Lead+secondRounding, limit)
	}
	key := tk.permits.Key
	if tk.id == "" {
		n := tk.permits.N
		if n == 0 {
			n = 1
		}
		r, err := p.l.TryReserve(ctx, key, tk.permits.Limit, n, maxWait)
		if err != nil {
			return nil, fmt.Errorf("worker: reserve on %q: %w", key, err)
		}
		return r, nil
	}
	if tk.reschedule {
		c, err := p.l.Claim(ctx, tk.id, tk.permits, maxWait, hold)
		if errors.Is(err, reserve.ErrUnavailable) {
			return p.local(ctx, tk, maxWait)
		}
		if err != nil {
			return nil, fmt.Errorf("worker: task %s: %w", tk.id, err)
		}
		if c.Held {
			return nil, p.rescheduled(tk, c.Reservation, false)
		}
		return c.Reservation, nil
	}
	c, err := p.l.TryClaim(ctx, tk.id, tk.permits, maxWait, hold)
	if errors.Is(err, reserve.ErrUnavailable) {
		return p.local(ctx, tk, maxWait)
	}
	var tooLong *reserve.WaitTooLongError
	if errors.As(err, &tooLong) {
		return nil, fmt.Errorf("worker: task %s has no retries left and its slot on %q comes after half the time left before its deadline: %w", tk.id, key, err)
	}
	if err != nil {
		return nil, fmt.Errorf("worker: task %s: %w", tk.id, err)
	}
	return c.Reservation, nil
}

// local paces tk while Redis is unavailable: Limiter.TryReserve then uses
// its local fallback (at the key's rate divided by the fleet), so tasks go
// on at a safe rate instead of failing and burning retries. No slot can be
// kept for the task: a longer wait reschedules it to about when the local
// slot would have been. With reserve.Options.FailClosed the error is
// returned, and asynq retries the task.
func (p *pacer) local(ctx context.Context, tk *task, maxWait time.Duration) (*reserve.Reservation, error) {
	n := max(tk.permits.N, 1)
	r, err := p.l.TryReserve(ctx, tk.permits.Key, tk.permits.Limit, n, maxWait)
	var tooLong *reserve.WaitTooLongError
	if tk.reschedule && errors.As(err, &tooLong) {
		return nil, &RateLimitedError{
			Key:     tk.permits.Key,
			Slot:    p.opts.Clock.Now().Add(tooLong.Wait),
			RetryIn: max(0, tooLong.Wait-p.opts.Lead),
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker: task %s: %w", tk.id, err)
	}
	return r, nil
}

// rescheduled is the error that reschedules tk to the slot kept for it.
func (p *pacer) rescheduled(tk *task, r *reserve.Reservation, paused bool) *RateLimitedError {
	retryIn := r.Time().Sub(p.opts.Clock.Now()) - p.opts.Lead
	return &RateLimitedError{
		Key:     tk.permits.Key,
		Slot:    r.Time(),
		RetryIn: max(0, retryIn),
		Paused:  paused,
	}
}

// sleep waits until r's slot (precisely: see reserve.Reservation.Sleep) and
// reports whether it had to wait. If ctx ends first, r's permits are given
// back and the error wraps ctx.Err().
func (p *pacer) sleep(ctx context.Context, r *reserve.Reservation) (bool, error) {
	if r.DelayFrom(p.opts.Clock.Now()) <= 0 {
		return false, nil
	}
	if err := r.Sleep(ctx); err != nil {
		return false, fmt.Errorf("worker: sleeping until the slot on %q: %w", r.Key(), err)
	}
	return true, nil
}
