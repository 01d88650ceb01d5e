package asynqtest

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hibiken/asynq"
)

// A Call is one run of a paced handler: the provider call it stands for.
type Call struct {
	At      time.Time
	TaskID  string
	Retried int // asynq's retry count when it ran
}

// Recorder records the calls handlers make and how long handlers sleep in
// the middleware. Wrap the paced handler with Outer (outside the pacing
// middleware) and Inner (inside it); a task is asleep from entering Outer
// until Inner starts, or until Outer returns when Inner never ran (the task
// was rescheduled).
type Recorder struct {
	mu     sync.Mutex
	calls  []Call
	done   map[string]bool
	asleep []interval
	errs   []error // non-nil errors returned through Outer
}

type interval struct{ from, to time.Time }

type innerKey struct{}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{done: map[string]bool{}}
}

// Outer is middleware to put outside the pacing middleware.
func (r *Recorder) Outer(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		enter := time.Now()
		var started time.Time
		err := next.ProcessTask(context.WithValue(ctx, innerKey{}, &started), t)
		end := started
		if end.IsZero() {
			end = time.Now()
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.asleep = append(r.asleep, interval{enter, end})
		if err != nil {
			r.errs = append(r.errs, err)
		}
		return err
	})
}

// Inner wraps the handler inside the pacing middleware: it records the call
// and then runs h (nil: succeed at once). A task counts as done when h
// returns nil.
func (r *Recorder) Inner(h asynq.HandlerFunc) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		now := time.Now()
		if p, ok := ctx.Value(innerKey{}).(*time.Time); ok && p.IsZero() {
			*p = now
		}
		id, _ := asynq.GetTaskID(ctx)
		retried, _ := asynq.GetRetryCount(ctx)
		r.mu.Lock()
		r.calls = append(r.calls, Call{At: now, TaskID: id, Retried: retried})
		r.mu.Unlock()
		var err error
		if h != nil {
			err = h(ctx, t)
		}
		if err == nil {
			r.mu.Lock()
			r.done[id] = true
			r.mu.Unlock()
		}
		return err
	})
}

// Done returns how many distinct tasks completed.
func (r *Recorder) Done() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

// Calls returns the calls so far, in time order.
func (r *Recorder) Calls() []Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.calls)
	slices.SortFunc(out, func(a, b Call) int { return a.At.Compare(b.At) })
	return out
}

// Errors returns the errors handlers returned (reschedules included).
func (r *Recorder) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// Busiest returns the most calls in any window [t, t+w).
func Busiest(calls []Call, w time.Duration) int {
	best, i := 0, 0
	for j := range calls {
		for calls[j].At.Sub(calls[i].At) >= w {
			i++
		}
		best = max(best, j-i+1)
	}
	return best
}

// Asleep returns the most handlers asleep at once and the average number
// asleep between the first entry and the last wake-up.
func (r *Recorder) Asleep() (peak int, mean float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	type edge struct {
		at time.Time
		d  int
	}
	var edges []edge
	for _, iv := range r.asleep {
		edges = append(edges, edge{iv.from, +1}, edge{iv.to, -1})
	}
	if len(edges) == 0 {
		return 0, 0
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // wake-ups first at the same instant
	})
	n := 0
	var area float64
	for i, e := range edges {
		if i > 0 {
			area += float64(n) * e.at.Sub(edges[i-1].at).Seconds()
		}
		n += e.d
		peak = max(peak, n)
	}
	span := edges[len(edges)-1].at.Sub(edges[0].at).Seconds()
	if span > 0 {
		mean = area / span
	}
	return peak, mean
}
