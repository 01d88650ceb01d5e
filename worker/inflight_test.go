package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/asynqtest"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// opened counts the handlers running at once (from the handler's start to
// its return, inside the middleware) and keeps the most it saw.
type opened struct{ open, peak atomic.Int64 }

func (o *opened) enter() {
	n := o.open.Add(1)
	for p := o.peak.Load(); n > p && !o.peak.CompareAndSwap(p, n); p = o.peak.Load() {
	}
}

func (o *opened) leave() { o.open.Add(-1) }

// paceSeats paces the "call" tasks on key "call" with policy, one request
// each.
func paceSeats(policy reserve.Policy) worker.Options {
	return worker.Options{Pace: func(t *asynq.Task) (reserve.Request, bool) {
		if t.Type() != "call" {
			return reserve.Request{}, false
		}
		return reserve.Request{Key: "call", Policy: policy, Cost: reserve.Cost{"requests": 1}}, true
	}}
}

// TestInFlightPerType: with an in-flight band of 3 beside a rate, two
// servers of 10 workers never run more than 3 handlers of the task type at
// once; every task completes, none counts a retry, none is archived, and
// the tasks that found no seat within MaxSleep were rescheduled without
// an error reported.
func TestInFlightPerType(t *testing.T) {
	const n, tasks = 3, 60
	var o opened
	opts := paceSeats(reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: n},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 200, Burst: 10}},
	})
	f := newFleet(t, 2, 10, opts, func(int) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			o.enter()
			defer o.leave()
			time.Sleep(10 * time.Millisecond)
			return nil
		}
	})
	f.enqueue(t, tasks)
	f.waitDone(t, tasks, 60*time.Second)
	assert.LessOrEqual(t, o.peak.Load(), int64(n), "handlers running at once")
	q := f.env.QueueInfo(t, f.insp)
	assert.Zero(t, q.Archived, "archived")
	for _, c := range f.rec.Calls() {
		assert.Zero(t, c.Retried, "retry count of %s", c.TaskID)
	}
	assert.Empty(t, f.errorsReported(), "errors reported")
	t.Logf("peak %d of %d handlers at once; %d rescheduled", o.peak.Load(), n, f.rescheduled())
}

// TestInFlightSeatsBack: with one seat (a policy of seats alone), a handler
// that fails, and one that panics, give their seat back: the failed task's
// retry runs, and so do the tasks after them (with the seat kept, they
// would wait, rescheduled, for ever).
func TestInFlightSeatsBack(t *testing.T) {
	env := asynqtest.New(t)
	lim, err := reserve.New(env.Redis.Client, testOptions(t))
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	p, err := worker.New(lim, paceSeats(reserve.Policy{{Name: "open", Unit: "requests", InFlight: 1}}))
	require.NoError(t, err)

	var (
		o    opened
		mu   sync.Mutex
		runs = map[string]int{}
	)
	rec := asynqtest.NewRecorder()
	handler := rec.Outer(p.Middleware(rec.Inner(func(ctx context.Context, t *asynq.Task) error {
		o.enter()
		defer o.leave()
		mu.Lock()
		runs[string(t.Payload())]++
		run := runs[string(t.Payload())]
		mu.Unlock()
		switch string(t.Payload()) {
		case "panic":
			panic("handler panics")
		case "fail":
			if run == 1 {
				return errors.New("the provider failed")
			}
		}
		return nil
	})))
	env.Start(t, worker.Config(asynq.Config{
		Concurrency: 4,
		// Retry a failed task at once (a rate-limit reschedule still goes
		// to its slot).
		RetryDelayFunc:  func(int, error, *asynq.Task) time.Duration { return 0 },
		ShutdownTimeout: time.Second,
	}), handler)
	client := env.Client(t)
	enqueue := func(payload string, opts ...asynq.Option) {
		_, err := client.Enqueue(asynq.NewTask("call", []byte(payload)), append(opts, asynq.Queue(env.Queue))...)
		require.NoError(t, err)
	}
	enqueue("panic", asynq.MaxRetry(0))
	enqueue("fail", asynq.MaxRetry(1))
	for i := range 4 {
		enqueue(fmt.Sprint("ok", i))
	}
	ok := asynqtest.WaitFor(context.Background(), 30*time.Second, func() bool { return rec.Done() == 5 })
	require.True(t, ok, "%d of 5 tasks done", rec.Done())
	mu.Lock()
	assert.Equal(t, 2, runs["fail"], "the failed task ran again")
	assert.Equal(t, 1, runs["panic"])
	mu.Unlock()
	assert.LessOrEqual(t, o.peak.Load(), int64(1), "handlers running at once")
	q := env.QueueInfo(t, env.Inspector(t))
	assert.EqualValues(t, 1, q.Archived, "the panicking task, archived")
}

// TestInFlightReschedule: a task that cannot get its seat within MaxSleep
// is rescheduled without holding one (a *RateLimitedError with InFlight,
// no retry counted), and runs once the seat is free.
func TestInFlightReschedule(t *testing.T) {
	var (
		o       opened
		release = make(chan struct{})
		holding = make(chan struct{})
		first   atomic.Bool
	)
	opts := paceSeats(reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 1},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 100, Burst: 5}},
	})
	opts.MaxSleep = time.Millisecond // waits up to Lead (500 ms) for a seat
	f := newFleet(t, 1, 4, opts, func(int) asynq.HandlerFunc {
		return func(ctx context.Context, t *asynq.Task) error {
			o.enter()
			defer o.leave()
			if first.CompareAndSwap(false, true) {
				close(holding)
				<-release // holds the seat until the test saw a reschedule
			}
			return nil
		}
	})
	f.enqueue(t, 1)
	<-holding
	f.enqueue(t, 3)
	seatless := func() bool {
		for _, err := range f.rec.Errors() {
			var rl *worker.RateLimitedError
			if errors.As(err, &rl) && rl.InFlight {
				return true
			}
		}
		return false
	}
	rescheduled := asynqtest.WaitFor(context.Background(), 30*time.Second, seatless)
	close(release)
	require.True(t, rescheduled, "no task was rescheduled for want of a seat")
	f.waitDone(t, 4, 30*time.Second)
	assert.LessOrEqual(t, o.peak.Load(), int64(1), "handlers running at once")
	for _, c := range f.rec.Calls() {
		assert.Zero(t, c.Retried, "retry count of %s", c.TaskID)
	}
	assert.Empty(t, f.errorsReported(), "errors reported")
	assert.Zero(t, f.env.QueueInfo(t, f.insp).Archived, "archived")
}

// TestInFlightBadPolicy: a Pace whose policy has two in-flight bands fails
// the task with ErrInvalidPolicy, and its handler does not run.
func TestInFlightBadPolicy(t *testing.T) {
	lim, err := reserve.New(redistest.New(t).Client, testOptions(t))
	require.NoError(t, err)
	t.Cleanup(func() { lim.Close() })
	p, err := worker.New(lim, paceSeats(reserve.Policy{
		{Name: "a", Unit: "requests", InFlight: 1},
		{Name: "b", Unit: "requests", InFlight: 2},
	}))
	require.NoError(t, err)
	ran := false
	err = p.Middleware(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran = true
		return nil
	})).ProcessTask(context.Background(), asynq.NewTask("call", nil))
	assert.ErrorIs(t, err, reserve.ErrInvalidPolicy)
	assert.False(t, ran)
}

// TestInFlightPause: a handler that pauses its key (a 429) gives its seat
// back when it returns: with one seat, a task rescheduled by the pause and
// one that cannot be (MaxRetry(0): the middleware waits the pause and runs
// the handler again) both run again, not within the pause, and complete,
// for a policy with a rate beside the seats and for seats alone.
func TestInFlightPause(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy reserve.Policy
	}{
		{"seats and rate", reserve.Policy{
			{Name: "open", Unit: "requests", InFlight: 1},
			{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 100, Burst: 5}},
		}},
		{"seats alone", reserve.Policy{{Name: "open", Unit: "requests", InFlight: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				o    opened
				mu   sync.Mutex
				runs = map[string]int{}
				at   = map[string][]time.Time{}
			)
			f := newFleet(t, 1, 4, paceSeats(tc.policy), func(int) asynq.HandlerFunc {
				return func(ctx context.Context, t *asynq.Task) error {
					o.enter()
					defer o.leave()
					id, _ := asynq.GetTaskID(ctx)
					mu.Lock()
					runs[id]++
					run := runs[id]
					at[id] = append(at[id], time.Now())
					mu.Unlock()
					if run == 1 {
						return worker.Pause(ctx, 300*time.Millisecond)
					}
					return nil
				}
			})
			f.enqueue(t, 1)
			f.enqueue(t, 1, asynq.MaxRetry(0))
			f.waitDone(t, 2, 30*time.Second)
			mu.Lock()
			for id, n := range runs {
				if assert.Equal(t, 2, n, "runs of task %s", id) {
					// The pause began after the first run started (less
					// a few ms of clock between Redis and here).
					assert.GreaterOrEqual(t, at[id][1].Sub(at[id][0]), 250*time.Millisecond, "task %s ran again within the pause", id)
				}
			}
			mu.Unlock()
			assert.LessOrEqual(t, o.peak.Load(), int64(1), "handlers running at once")
			assert.Zero(t, f.env.QueueInfo(t, f.insp).Archived, "archived")
			assert.Empty(t, f.errorsReported(), "errors reported")
		})
	}
}
