package worker_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
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

// TestPeak is the scenario: a peak of 300 tasks enqueued at once,
// limit 20/s with a burst of 5, asynq servers set up with worker.Config.
// Every run must: complete every task; keep the calls' busiest 1 s window at
// most limit + burst; archive nothing; count no retry on any task; finish
// within 10% of 300/20 = 15 s.
//
//	go test -race -count=1 -run TestPeak -v ./worker/
func TestPeak(t *testing.T) {
	api := reserve.Limit{Rate: 20, Burst: 5}
	tests := []struct {
		name        string
		concurrency int // per server, two servers
		maxSleep    time.Duration
		reschedule  bool
	}{
		// The default MaxSleep (2 s) is longer than any wait here: 20
		// workers keep the queue of slots 1 s long. Every handler sleeps.
		{"sleep", 10, 0, false},
		// MaxSleep below Lead (500 ms) acts as Lead: waits longer than
		// that, most of them, are rescheduled.
		{"reschedule", 10, time.Millisecond, true},
		// With 100 workers and sleeping alone (MaxSleep 1 min; the 2 s
		// default would reschedule waits past 2 s), every worker that holds
		// a task sleeps; rescheduled, the handlers asleep stay about
		// Rate * 1 s.
		{"sleep-concurrency50", 50, time.Minute, false},
		{"reschedule-concurrency50", 50, time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := runPeak(t, peak{
				tasks: 300, lim: api, servers: 2, concurrency: tt.concurrency,
				opts: worker.Options{MaxSleep: tt.maxSleep},
			})
			assert.LessOrEqual(t, res.busiest, int(api.Rate)+api.Burst, "busiest 1 s window")
			assert.Zero(t, res.info.Archived, "archived tasks")
			assert.Zero(t, res.info.Retry+res.info.Pending+res.info.Scheduled+res.info.Active, "tasks left in the queue")
			for _, c := range res.rec.Calls() {
				if !assert.Zero(t, c.Retried, "retry count of task %s", c.TaskID) {
					break
				}
			}
			// Never faster than the limit allows (the last slot is 295/20 s
			// after the first); how much slower is timing, logged above.
			fastest := time.Duration(float64(300-api.Burst) / api.Rate * float64(time.Second))
			assert.GreaterOrEqual(t, res.total, fastest, "total time")
			if tt.reschedule {
				assert.Greater(t, res.rescheduled, 300/2, "most tasks rescheduled")
				// A returning task sleeps at most Lead + 1 s (asynq's whole
				// seconds), a fresh slot at most Lead: on average at most
				// Rate * (Lead + 1 s) = 30 handlers asleep per key.
				bound := api.Rate * (worker.DefaultLead + time.Second).Seconds()
				assert.LessOrEqual(t, res.mean, bound, "mean handlers asleep")
			}
		})
	}
}

// peak is a peak of tasks enqueued at once on one paced type, handled by
// asynq servers on a fresh Redis.
type peak struct {
	tasks       int
	lim         reserve.Limit
	servers     int
	concurrency int
	opts        worker.Options // Pace is set by runPeak
}

type peakResult struct {
	rec         *asynqtest.Recorder
	total       time.Duration // first enqueue to last call
	busiest     int           // calls in the busiest 1 s window
	peak        int           // most handlers asleep at once
	mean        float64       // handlers asleep on average
	rescheduled int           // *RateLimitedError returned
	info        *asynq.QueueInfo
}

func runPeak(t *testing.T, pk peak) peakResult {
	env := asynqtest.New(t)
	l, err := reserve.New(env.Redis.Client, testOptions(t))
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	pk.opts.Pace = worker.PerType(map[string]reserve.Limit{"call": pk.lim})
	rec := asynqtest.NewRecorder()
	h := rec.Outer(middleware(t, l, pk.opts)(rec.Inner(nil)))
	var (
		mu       sync.Mutex
		reported []error
	)
	for range pk.servers {
		env.Start(t, worker.Config(asynq.Config{
			Concurrency: pk.concurrency,
			ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
				mu.Lock()
				defer mu.Unlock()
				reported = append(reported, err)
			}),
			ShutdownTimeout: time.Second,
		}), h)
	}
	client := env.Client(t)
	start := time.Now()
	for i := range pk.tasks {
		_, err := client.Enqueue(asynq.NewTask("call", []byte(strconv.Itoa(i))), asynq.Queue(env.Queue))
		require.NoError(t, err)
	}
	limit := 2*time.Duration(float64(pk.tasks)/pk.lim.Rate*float64(time.Second)) + 10*time.Second
	ok := asynqtest.WaitFor(context.Background(), limit, func() bool { return rec.Done() == pk.tasks })
	require.True(t, ok, "%d of %d tasks done after %v", rec.Done(), pk.tasks, limit)

	calls := rec.Calls()
	res := peakResult{rec: rec, total: calls[len(calls)-1].At.Sub(start), busiest: asynqtest.Busiest(calls, time.Second)}
	res.peak, res.mean = rec.Asleep()
	for _, err := range rec.Errors() {
		var rl *worker.RateLimitedError
		if errors.As(err, &rl) {
			res.rescheduled++
		}
	}
	res.info = env.QueueInfo(t, env.Inspector(t))
	mu.Lock()
	assert.Empty(t, reported, "errors that reached the ErrorHandler")
	mu.Unlock()
	t.Logf("%d tasks, limit %v/s burst %d, %d servers x %d workers: total %v (ideal %v); busiest 1 s window %d calls (limit+burst %d); handlers asleep: peak %d, mean %.1f; %d reschedules; %d calls",
		pk.tasks, pk.lim.Rate, pk.lim.Burst, pk.servers, pk.concurrency, res.total.Round(10*time.Millisecond),
		time.Duration(float64(pk.tasks)/pk.lim.Rate*float64(time.Second)), res.busiest, int(pk.lim.Rate)+pk.lim.Burst,
		res.peak, res.mean, res.rescheduled, len(calls))
	return res
}

// testOptions are the Limiter options of these tests: a generous CallTimeout,
// so that a slow call on a loaded test machine does not turn into local
// pacing in the middle of what a test measures (the fallback has its own
// tests in package reserve and integration/).
func testOptions(t *testing.T) reserve.Options {
	return reserve.Options{KeyPrefix: redistest.Prefix(t), CallTimeout: 5 * time.Second}
}
