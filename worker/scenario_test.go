package worker_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/asynqtest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fleet is asynq servers on a fresh Redis, all running one paced handler.
type fleet struct {
	env    *asynqtest.Env
	lim    *reserve.Limiter
	rec    *asynqtest.Recorder
	client *asynq.Client
	insp   *asynq.Inspector

	mu       sync.Mutex
	reported []error // errors that reached the ErrorHandler
}

// newFleet starts servers (each with concurrency workers) running handler
// h(server index) behind the middleware.
func newFleet(t *testing.T, servers, concurrency int, opts worker.Options, h func(server int) asynq.HandlerFunc) *fleet {
	return newFleetOn(t, nil, servers, concurrency, opts, h)
}

// newFleetOn is newFleet with the Limiter's buckets on rdb (nil: the asynq
// Redis), with default reserve.Options when rdb is given.
func newFleetOn(t *testing.T, rdb redis.UniversalClient, servers, concurrency int, opts worker.Options, h func(server int) asynq.HandlerFunc) *fleet {
	f := &fleet{env: asynqtest.New(t), rec: asynqtest.NewRecorder()}
	var err error
	if rdb == nil {
		f.lim, err = reserve.New(f.env.Redis.Client, testOptions(t))
	} else {
		// A fleet of one (FleetSize): the Limiter paces locally even if it
		// never reaches this Redis.
		f.lim, err = reserve.New(rdb, reserve.Options{FleetSize: 1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	require.NoError(t, err)
	t.Cleanup(func() { f.lim.Close() })
	for i := range servers {
		var inner asynq.HandlerFunc
		if h != nil {
			inner = h(i)
		}
		f.env.Start(t, worker.Config(asynq.Config{
			Concurrency: concurrency,
			ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
				f.mu.Lock()
				defer f.mu.Unlock()
				f.reported = append(f.reported, err)
			}),
			ShutdownTimeout: time.Second,
		}), f.rec.Outer(middleware(t, f.lim, opts)(f.rec.Inner(inner))))
	}
	f.client = f.env.Client(t)
	f.insp = f.env.Inspector(t)
	return f
}

func (f *fleet) enqueue(t *testing.T, n int, opts ...asynq.Option) {
	t.Helper()
	for i := range n {
		_, err := f.client.Enqueue(asynq.NewTask("call", []byte(strconv.Itoa(i))), append(opts, asynq.Queue(f.env.Queue))...)
		require.NoError(t, err)
	}
}

// waitDone waits until n tasks completed.
func (f *fleet) waitDone(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	ok := asynqtest.WaitFor(context.Background(), limit, func() bool { return f.rec.Done() == n })
	require.True(t, ok, "%d of %d tasks done after %v", f.rec.Done(), n, limit)
}

func (f *fleet) errorsReported() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reported
}

func (f *fleet) rescheduled() int {
	n := 0
	for _, err := range f.rec.Errors() {
		var rl *worker.RateLimitedError
		if errors.As(err, &rl) {
			n++
		}
	}
	return n
}

var api = reserve.Limit{Rate: 20, Burst: 1}

func pace() worker.Options {
	return worker.Options{Pace: worker.PerType(map[string]reserve.Limit{"call": api})}
}

// TestMaxRetryZero: asynq archives a MaxRetry(0) task on its first error,
// before it asks IsFailure, so such tasks must never be rescheduled: they
// sleep, even far beyond MaxSleep, and none is archived.
func TestMaxRetryZero(t *testing.T) {
	opts := pace()
	opts.MaxSleep = time.Millisecond // every other task would be rescheduled
	f := newFleet(t, 1, 40, opts, nil)
	f.enqueue(t, 40, asynq.MaxRetry(0))
	f.waitDone(t, 40, 10*time.Second)
	q := f.env.QueueInfo(t, f.insp)
	assert.Zero(t, q.Archived, "archived MaxRetry(0) tasks")
	assert.Zero(t, f.rescheduled(), "reschedules of MaxRetry(0) tasks")
	assert.Empty(t, f.errorsReported(), "errors reported")
	calls := f.rec.Calls()
	span := calls[len(calls)-1].At.Sub(calls[0].At)
	peak, _ := f.rec.Asleep()
	t.Logf("40 MaxRetry(0) tasks at %v/s: done in %v, %d asleep at most, busiest 1 s %d", api.Rate, span.Round(10*time.Millisecond), peak, asynqtest.Busiest(calls, time.Second))
	// 39 waits of 50 ms after the first call: 1.95 s (timing: logged, not
	// asserted); the provider's view is.
	assert.LessOrEqual(t, asynqtest.Busiest(calls, time.Second), int(api.Rate)+api.Burst)
}

// TestDeadline: a task sleeps at most half the time left before its
// deadline. With retries left, a longer wait is rescheduled; with none left
// it cannot be saved (asynq archives it whatever the handler returns), and
// nothing is reserved for it.
func TestDeadline(t *testing.T) {
	t.Run("retries left", func(t *testing.T) {
		f := newFleet(t, 1, 40, pace(), nil) // default MaxSleep, 2 s
		// Timeout 2 s: sleep at most 1 s. Slots reach 2 s: about half the
		// tasks must be rescheduled.
		f.enqueue(t, 40, asynq.Timeout(2*time.Second))
		f.waitDone(t, 40, 15*time.Second)
		q := f.env.QueueInfo(t, f.insp)
		assert.Zero(t, q.Archived, "archived")
		assert.Empty(t, f.errorsReported(), "errors reported")
		for _, c := range f.rec.Calls() {
			assert.Zero(t, c.Retried, "retry count of %s", c.TaskID)
		}
		t.Logf("40 tasks with Timeout(2s) at %v/s: %d rescheduled", api.Rate, f.rescheduled())
		assert.Greater(t, f.rescheduled(), 10, "tasks rescheduled because of their deadline")
	})
	t.Run("no retries left", func(t *testing.T) {
		f := newFleet(t, 1, 4, pace(), nil)
		ctx := context.Background()
		// Queue 3 s of slots: the task's 2 s timeout allows a 1 s sleep.
		for range 60 {
			_, err := f.lim.Reserve(ctx, "call", api)
			require.NoError(t, err)
		}
		before, err := f.env.Redis.Client.Get(ctx, f.lim.RedisKey("call")).Result()
		require.NoError(t, err)
		f.enqueue(t, 1, asynq.MaxRetry(0), asynq.Timeout(2*time.Second))
		ok := asynqtest.WaitFor(ctx, 5*time.Second, func() bool { return f.env.QueueInfo(t, f.insp).Archived == 1 })
		require.True(t, ok, "the task was not archived")
		after, err := f.env.Redis.Client.Get(ctx, f.lim.RedisKey("call")).Result()
		require.NoError(t, err)
		assert.Equal(t, before, after, "a slot was reserved for a task that could not use it")
		errs := f.errorsReported()
		require.Len(t, errs, 1)
		var tooLong *reserve.WaitTooLongError
		assert.ErrorAs(t, errs[0], &tooLong)
		assert.Empty(t, f.rec.Calls(), "the handler ran")
		t.Logf("reported: %v", errs[0])
	})
}

// TestTooManyRequests: the provider answers one call with 429 and
// Retry-After 2 mid-run. No server calls it during the pause, the refused
// task runs again after it, and nothing counts a retry or is archived, for
// tasks with retries left (rescheduled) and without (they sleep).
func TestTooManyRequests(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []asynq.Option
	}{
		{"retries left", nil},
		{"MaxRetry(0)", []asynq.Option{asynq.MaxRetry(0)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const tasks, refuse = 60, 20 // the 20th call gets a 429
			var (
				mu       sync.Mutex
				calls    []providerCall
				pausedAt time.Time
			)
			provider := func(server int) (status int, retryAfter string) {
				mu.Lock()
				defer mu.Unlock()
				now := time.Now()
				calls = append(calls, providerCall{now, server})
				if len(calls) == refuse {
					pausedAt = now
					return 429, "2"
				}
				return 200, ""
			}
			// 2 x 15 workers: returning tasks sleep up to Lead + 1 s, so at
			// 20/s up to 30 handlers sleep at once. With fewer, returning
			// tasks wait for a worker and come back late (see Options.Lead).
			f := newFleet(t, 2, 15, pace(), func(server int) asynq.HandlerFunc {
				return func(ctx context.Context, t *asynq.Task) error {
					status, retryAfter := provider(server)
					return worker.TooManyRequests(ctx, status, retryAfter)
				}
			})
			f.enqueue(t, tasks, tt.opts...)
			f.waitDone(t, tasks, 20*time.Second)

			mu.Lock()
			defer mu.Unlock()
			require.Len(t, calls, tasks+1, "provider calls: one per task and the refused one again")
			resume := pausedAt.Add(2 * time.Second)
			// The refused handler records the pause a round trip after its
			// 429; a handler that checked just before may still call in
			// those few ms.
			guard := pausedAt.Add(5 * time.Millisecond)
			servers := map[int]int{}
			for _, c := range calls {
				if c.at.After(guard) && c.at.Before(resume) {
					t.Errorf("server %d called the provider %v into the 2 s pause", c.server, c.at.Sub(pausedAt))
				}
				servers[c.server]++
			}
			assert.Len(t, servers, 2, "both servers made calls")
			var after []time.Time
			for _, c := range calls {
				if c.at.After(pausedAt) {
					after = append(after, c.at)
				}
			}
			require.NotEmpty(t, after)
			q := f.env.QueueInfo(t, f.insp)
			assert.Zero(t, q.Archived, "archived")
			for _, c := range f.rec.Calls() {
				assert.Zero(t, c.Retried, "retry count of %s", c.TaskID)
			}
			assert.Empty(t, f.errorsReported(), "errors reported")
			t.Logf("429 at call %d: first call after it %v later (pause 2 s); %d calls after the pause over %v; calls per server %v",
				refuse, after[0].Sub(pausedAt).Round(time.Millisecond), len(after), after[len(after)-1].Sub(after[0]).Round(10*time.Millisecond), servers)
			// The pause ends with an empty bucket: the rest drains at the rate.
			busiest := 0
			for i := range after {
				n := 0
				for j := i; j < len(after) && after[j].Sub(after[i]) < time.Second; j++ {
					n++
				}
				busiest = max(busiest, n)
			}
			if !assert.LessOrEqual(t, busiest, int(api.Rate)+api.Burst, "busiest 1 s after the pause") {
				for _, a := range after {
					t.Logf("%v", a.Sub(pausedAt).Round(time.Millisecond))
				}
			}
		})
	}
}

type providerCall struct {
	at     time.Time
	server int
}

// TestNotPaced: tasks Pace does not select run straight through, and Pause
// outside a paced task says so.
func TestNotPaced(t *testing.T) {
	env := asynqtest.New(t)
	l, err := reserve.New(env.Redis.Client, testOptions(t))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ran := make(chan error, 1)
	env.Start(t, worker.Config(asynq.Config{Concurrency: 1, ShutdownTimeout: time.Second}),
		middleware(t, l, pace())(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			ran <- worker.Pause(ctx, time.Second)
			return nil
		})))
	_, err = env.Client(t).Enqueue(asynq.NewTask("other", nil), asynq.Queue(env.Queue))
	require.NoError(t, err)
	select {
	case err := <-ran:
		assert.ErrorIs(t, err, worker.ErrNotPaced)
	case <-time.After(5 * time.Second):
		t.Fatal("the unpaced task did not run")
	}
	keys, err := env.Redis.Client.Keys(context.Background(), l.RedisKey("*")+"*").Result()
	require.NoError(t, err)
	for _, k := range keys {
		assert.Contains(t, k, "{limiters}", "an unpaced task touched a key")
	}
}

// TestBucketsRedisDown: asynq runs, but the Redis holding the buckets is
// gone. The middleware paces on the Limiter's local fallback: every task runs
// at the rate, none fails, none uses a retry, none is archived.
func TestBucketsRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	rdb := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()

	f := newFleetOn(t, rdb, 1, 30, pace(), nil)
	f.enqueue(t, 30)
	f.waitDone(t, 30, 15*time.Second)
	q := f.env.QueueInfo(t, f.insp)
	assert.Zero(t, q.Archived, "archived")
	assert.Zero(t, q.Retry, "tasks waiting for a retry")
	assert.Empty(t, f.errorsReported(), "errors reported")
	calls := f.rec.Calls()
	span := calls[len(calls)-1].At.Sub(calls[0].At)
	t.Logf("30 tasks at %v/s with the buckets' Redis down: done in %v, busiest 1 s %d",
		api.Rate, span.Round(10*time.Millisecond), asynqtest.Busiest(calls, time.Second))
	// Locally at 20/s (a fleet of one Limiter), burst 1: 29 waits of 50 ms.
	assert.GreaterOrEqual(t, span, 1400*time.Millisecond, "faster than the rate")
	assert.LessOrEqual(t, asynqtest.Busiest(calls, time.Second), int(api.Rate)+api.Burst)
}

// middleware returns the Middleware of a Pacer on l.
func middleware(t *testing.T, l *reserve.Limiter, opts worker.Options) asynq.MiddlewareFunc {
	t.Helper()
	p, err := worker.New(l, opts)
	require.NoError(t, err)
	return p.Middleware
}

// TestSettle: a paced handler's Settle replaces its reservation's estimated
// cost with the actual one, fleet-wide; an unpaced task's fails with
// ErrNotPaced.
func TestSettle(t *testing.T) {
	env := asynqtest.New(t)
	// No lateness bound: a loaded machine that wakes the task more than
	// MaxLateness after its slot takes a fresh one, and the slot it
	// passed stays spent (400 tokens left, not 900): that is the lateness
	// rule, not Settle's.
	o := testOptions(t)
	o.MaxLateness = -1
	l, err := reserve.New(env.Redis.Client, o)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	pol := reserve.Policy{
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 100, Burst: 10}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 1, Burst: 1000}},
	}
	req := reserve.Request{Key: "llm", Policy: pol, Cost: reserve.Cost{"requests": 1, "tokens": 500}}
	opts := worker.Options{Pace: func(t *asynq.Task) (reserve.Request, bool) { return req, t.Type() == "call" }}
	ran := make(chan error, 2)
	env.Start(t, worker.Config(asynq.Config{Concurrency: 1, ShutdownTimeout: time.Second}),
		middleware(t, l, opts)(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			ran <- worker.Settle(ctx, reserve.Cost{"tokens": 100})
			return nil
		})))
	for _, typ := range []string{"call", "other"} {
		_, err = env.Client(t).Enqueue(asynq.NewTask(typ, nil), asynq.Queue(env.Queue))
		require.NoError(t, err)
		select {
		case err := <-ran:
			if typ == "call" {
				require.NoError(t, err, "Settle in a paced task")
			} else {
				assert.ErrorIs(t, err, worker.ErrNotPaced, "Settle in an unpaced task")
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the %s task did not run", typ)
		}
	}
	snap, err := l.Peek(context.Background(), reserve.Request{Key: "llm", Policy: pol, Cost: reserve.Cost{"requests": 1, "tokens": 1}})
	require.NoError(t, err)
	// 1000 tokens less the 100 settled (the 500 reserved would leave 500),
	// plus what refilled since at 1/s.
	assert.InDelta(t, 900, snap.Bands[1].Value, 15, "the tokens band after Settle")
}
