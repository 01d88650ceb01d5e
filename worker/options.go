package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/lead"
	"github.com/pacer-go/pacer/reserve"
)

// Defaults for the zero fields of Options.
const (
	// DefaultMaxSleep is the longest wait a handler sleeps through before
	// the task is rescheduled instead. asynq makes a rescheduled task due in
	// whole seconds, so when it comes back it still sleeps about Lead +
	// 0.5 s (up to Lead + 1 s) to keep the spacing: rescheduling a shorter
	// wait than about two seconds saves the worker little, for an extra
	// trip through asynq's retry queue. Longer waits (a deep backlog, a
	// pause after a 429) are where holding a worker asleep costs, and they
	// are rescheduled. It also bounds the handlers asleep on fresh slots to
	// about Rate * 2 s per key, whatever the server's concurrency.
	DefaultMaxSleep = 2 * time.Second

	// DefaultLead is how long before its slot a rescheduled task is made
	// due; see Options.Lead. It is also package scheduler's default.
	DefaultLead = lead.Default

	// DefaultRetryAfter is the pause TooManyRequests uses when the response
	// has no usable Retry-After header.
	DefaultRetryAfter = time.Second
)

// ErrInvalidOptions is returned, wrapped, by New for Options that cannot
// work.
var ErrInvalidOptions = errors.New("worker: invalid options")

// Options configure a Pacer. Set Pace; the other fields' zero values mean
// their defaults.
type Options struct {
	// Pace says whether task t is paced, and what one run of it costs: the
	// key it is paced on, the key's policy (a single reserve.Limit's
	// Policy(), or several bands) and the cost (per task type, per tenant
	// found in the payload, the tokens a prompt will use, ...). Tasks for
	// which it returns false run straight through. PerType builds one from a
	// map. Required.
	Pace func(t *asynq.Task) (reserve.Request, bool)

	// MaxSleep is the longest wait a handler sleeps through. A longer wait
	// reschedules the task to its slot (the handler returns a
	// *RateLimitedError), and the slot is kept for the task. A wait shorter
	// than Lead is always slept: a reschedule could not bring the task back
	// before its slot. Tasks with no retries left are never rescheduled
	// (asynq would archive them), and sleep however long the wait. In every
	// case a handler sleeps at most half the time left before the task's
	// deadline, keeping the other half for the work. Default (0):
	// DefaultMaxSleep, 2 s.
	MaxSleep time.Duration

	// Lead is how long before its slot a rescheduled task is made due, so
	// that it comes back a little early and sleeps the rest, and the calls
	// keep the spacing the limit asks for. asynq makes a task due in whole
	// seconds (rounding down, which makes it up to 1 s earlier still), and a
	// due task runs after the next DelayedTaskCheckInterval tick plus the
	// time a worker takes to pick it up (up to 1.5 TaskCheckInterval when
	// idle): Lead must cover those two. A task that comes back late runs at
	// once, or takes a fresh slot when it is more than half a slot late
	// (see hold.Options.StaleAfter), so late tasks never fire
	// together. A longer Lead means more handlers asleep: about Rate * (Lead
	// + 0.5 s) per key, up to Rate * (Lead + 1 s), and the servers need that
	// many workers free. Default (0): DefaultLead, 500 ms, which fits the
	// intervals Config sets; with asynq's own defaults (5 s and 1 s) use
	// 7 s. Negative: no lead.
	Lead time.Duration

	// RetryAfter is the pause TooManyRequests uses when the response has no
	// usable Retry-After header. Default (0): DefaultRetryAfter, 1 s.
	RetryAfter time.Duration
}

// validate reports whether o can be used, with an error wrapping
// ErrInvalidOptions, and returns it with its defaults.
func (o Options) validate() (Options, error) {
	if o.Pace == nil {
		return o, fmt.Errorf("%w: Pace is nil", ErrInvalidOptions)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"MaxSleep", o.MaxSleep}, {"RetryAfter", o.RetryAfter}} {
		if d.v < 0 {
			return o, fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, d.name, d.v)
		}
	}
	if o.MaxSleep == 0 {
		o.MaxSleep = DefaultMaxSleep
	}
	o.Lead = lead.Resolve(o.Lead)
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	return o, nil
}

// PerType paces the task types named in limits, each on a key of its own
// name with its Limit and one permit per task: Options{Pace:
// worker.PerType(map[string]reserve.Limit{"email:send": {Rate: 20, Burst: 5}})}.
// Other types are not paced.
func PerType(limits map[string]reserve.Limit) func(*asynq.Task) (reserve.Request, bool) {
	return func(t *asynq.Task) (reserve.Request, bool) {
		lim, ok := limits[t.Type()]
		if !ok {
			return reserve.Request{}, false
		}
		return reserve.Single(t.Type(), lim, 1), true
	}
}
