package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// ErrNotPaced is returned by Pause, TooManyRequests and Settle when the
// handler's task is not paced by a Pacer's Middleware.
var ErrNotPaced = errors.New("worker: task is not paced by Middleware")

// Pause tells the fleet that the provider refused a call of the running task
// (for example 429 Too Many Requests with Retry-After d): no worker gets a
// slot on the task's key before d from now, and the bucket is empty when the
// pause ends, so the fleet resumes at the rate (see reserve.Limiter.Pause).
//
// It returns the error the handler should return: a *RateLimitedError with
// Paused set, which reschedules the task to a slot kept for it after the
// pause. A task with no retries left is not rescheduled: the middleware
// sleeps until that slot and runs the handler again.
//
// ctx must be the handler's context. Pause fails with ErrNotPaced if the
// task is not paced, and with a Redis error if the pause could not be
// recorded.
func Pause(ctx context.Context, d time.Duration) error {
	tk, ok := ctx.Value(taskKey{}).(*task)
	if !ok {
		return ErrNotPaced
	}
	if d <= 0 {
		return fmt.Errorf("worker: pause: %w: %v", reserve.ErrInvalidDuration, d)
	}
	p, key := tk.p, tk.req.Key
	if err := p.l.Pause(ctx, key, d); err != nil {
		return fmt.Errorf("worker: pause %q: %w", key, err)
	}
	now := p.clock.Now()
	if !tk.slotted() {
		// A policy of seats alone: no slot for the pause to hold, so the
		// task comes back after it (asynq may make it due up to a second
		// early), or the middleware waits it out. The key's other tasks
		// of such a policy are not held by it.
		return &RateLimitedError{Key: key, Slot: now.Add(d), RetryIn: d + secondRounding, Paused: true}
	}
	if tk.id == "" || tk.req.Fair() {
		// No ID to keep a slot for, or a fair task (booked only in its
		// turn): the middleware reserves a fresh one.
		return &RateLimitedError{Key: key, Slot: now.Add(d), RetryIn: d, Paused: true}
	}
	g, err := p.holds.Claim(ctx, tk.id, tk.req, 0)
	if errors.Is(err, reserve.ErrUnavailable) {
		// Redis is unavailable: the pause holds on the local fallback, and
		// no slot can be kept. The task comes back after the pause, without
		// using a retry.
		return &RateLimitedError{Key: key, Slot: now.Add(d), RetryIn: max(0, d-p.opts.Lead), Paused: true}
	}
	if err != nil {
		return fmt.Errorf("worker: pause %q: keep a slot for task %s: %w", key, tk.id, err)
	}
	if !g.Kept {
		// The pause already ended (d was tiny) and the slot is now: give
		// it back, and let the task claim a fresh one when it runs again.
		_ = g.Reservation.Cancel(ctx)
		return &RateLimitedError{Key: key, Slot: g.Reservation.Time(), Paused: true}
	}
	return p.rescheduled(tk, g.Reservation, true)
}

// TooManyRequests is Pause for an HTTP response: it returns nil unless
// status is 429 Too Many Requests. Otherwise it pauses the task's key for
// the response's Retry-After (delta-seconds or an HTTP date, as the header
// gives it; Options.RetryAfter when it is missing, invalid or not in the
// future) and returns the error the handler should return:
//
//	if err := worker.TooManyRequests(ctx, resp.StatusCode, resp.Header.Get("Retry-After")); err != nil {
//		return err // the key is paused fleet-wide and the task rescheduled
//	}
func TooManyRequests(ctx context.Context, status int, retryAfter string) error {
	if status != http.StatusTooManyRequests {
		return nil
	}
	tk, ok := ctx.Value(taskKey{}).(*task)
	if !ok {
		return fmt.Errorf("worker: provider answered 429: %w", ErrNotPaced)
	}
	return Pause(ctx, parseRetryAfter(retryAfter, tk.p.clock.Now(), tk.p.opts.RetryAfter))
}

// maxRetryAfter caps a Retry-After in seconds (a day), far below overflow.
const maxRetryAfter = 24 * 60 * 60

// parseRetryAfter reads a Retry-After header (RFC 9110 10.2.3) at now, or
// returns def.
func parseRetryAfter(h string, now time.Time, def time.Duration) time.Duration {
	h = strings.TrimSpace(h)
	if h == "" {
		return def
	}
	if secs, err := strconv.ParseInt(h, 10, 64); err == nil {
		if secs <= 0 {
			return def
		}
		return time.Duration(min(secs, maxRetryAfter)) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return def
}
