package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
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
	// due: it fits the intervals Config sets (a task comes back within
	// DelayedTaskCheckInterval + 1.5 TaskCheckInterval = 400 ms of the
	// time it was due), plus 100 ms. See Options.Lead.
	DefaultLead = 500 * time.Millisecond

	// DefaultRetryAfter is the pause TooManyRequests uses when the response
	// has no usable Retry-After header.
	DefaultRetryAfter = time.Second
)

// ErrInvalidOptions is returned, wrapped, for Options that cannot work.
var ErrInvalidOptions = errors.New("worker: invalid options")

// Options configure Middleware. The zero value paces nothing and is invalid:
// set Pace.
type Options struct {
	// Pace says whether task t is paced, and what one run of it costs: the
	// key it is paced on, the key's Limit and the permits (per task type,
	// per tenant found in the payload, ...). Tasks for which it returns
	// false run straight through. PerType builds one from a map. Required.
	Pace func(t *asynq.Task) (reserve.Permits, bool)

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
	// once (or takes a fresh slot when later than StaleAfter), and late
	// tasks that come back together make a burst. A longer Lead means more
	// handlers asleep: about Rate * (Lead + 0.5 s) per key, up to Rate *
	// (Lead + 1 s), and the servers need that many workers free, or tasks
	// wait for one and come back late. Default (0):
	// DefaultLead, 500 ms, which fits the intervals Config sets; with
	// asynq's own defaults (5 s and 1 s) use 7 s. Negative: no lead.
	Lead time.Duration

	// StaleAfter is how late a slot kept for a task may be and still be
	// used when the task runs. A later one is dropped and a fresh slot
	// taken, so that a backlog (workers were down) drains at the rate
	// instead of all at once. Default (0): reserve.DefaultStaleAfter.
	StaleAfter time.Duration

	// RetryAfter is the pause TooManyRequests uses when the response has no
	// usable Retry-After header. Default (0): DefaultRetryAfter, 1 s.
	RetryAfter time.Duration

	// Clock is the local time, for sleeping and for the time left before a
	// task's deadline. Default (nil): time.Now. Use the Limiter's Clock if
	// it has one.
	Clock reserve.Clock
}

// Validate reports whether o can be used, with an error wrapping
// ErrInvalidOptions.
func (o Options) Validate() error {
	if o.Pace == nil {
		return fmt.Errorf("%w: Pace is nil", ErrInvalidOptions)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"MaxSleep", o.MaxSleep}, {"StaleAfter", o.StaleAfter}, {"RetryAfter", o.RetryAfter}} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s %v is negative", ErrInvalidOptions, d.name, d.v)
		}
	}
	return nil
}

// withDefaults returns o with its zero fields set.
func (o Options) withDefaults() Options {
	if o.MaxSleep == 0 {
		o.MaxSleep = DefaultMaxSleep
	}
	switch {
	case o.Lead == 0:
		o.Lead = DefaultLead
	case o.Lead < 0:
		o.Lead = 0
	}
	if o.RetryAfter == 0 {
		o.RetryAfter = DefaultRetryAfter
	}
	if o.Clock == nil {
		o.Clock = systemClock{}
	}
	return o
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// PerType paces the task types named in limits, each on a key of its own
// name with its Limit and one permit per task: Options{Pace:
// worker.PerType(map[string]reserve.Limit{"email:send": {Rate: 20, Burst: 5}})}.
// Other types are not paced.
func PerType(limits map[string]reserve.Limit) func(*asynq.Task) (reserve.Permits, bool) {
	return func(t *asynq.Task) (reserve.Permits, bool) {
		lim, ok := limits[t.Type()]
		if !ok {
			return reserve.Permits{}, false
		}
		return reserve.Permits{Key: t.Type(), Limit: lim, N: 1}, true
	}
}
