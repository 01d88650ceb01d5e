package integration_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/asynqtest"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/scheduler"
	"github.com/pacer-go/pacer/worker"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestScheduledThenRedeemed: 1,000 tasks enqueued through scheduler land
// spread over time at the rate, and the workers redeem their slots without
// reserving a second time: every reservation is counted from the scripts'
// replies, and the bucket does not change once the batch is enqueued.
//
//	go test -race -count=1 -run TestScheduledThenRedeemed -v ./integration/
func TestScheduledThenRedeemed(t *testing.T) {
	const tasks = 1000
	api := reserve.Limit{Rate: 100, Burst: 10}
	r := newRun(t, api)
	r.start(t, 2, 80) // Rate * (Lead + 1 s) = 150 handlers may sleep at once
	// Load the scripts (a fresh Redis has none), so the batch below shows
	// the steady state.
	holds, err := hold.New(r.lim, hold.Options{})
	require.NoError(t, err)
	_, err = holds.Hold(context.Background(), []hold.Request{{ID: "warm-up", Request: reserve.Single("warm-up", api, 1)}})
	require.NoError(t, err)
	r.count.reset()

	start := time.Now()
	infos, err := r.enq.Enqueue(context.Background(), r.tasks(tasks), asynq.Queue(r.env.Queue))
	require.NoError(t, err)
	enqueued := time.Since(start)
	bucket := r.bucket(t)
	held := r.count.snapshot()
	require.Equal(t, tasks, held.holds, "slots reserved by Enqueue")

	due := make([]asynqtest.Call, len(infos))
	for i, info := range infos {
		due[i] = asynqtest.Call{At: info.NextProcessAt}
	}
	spread := due[len(due)-1].At.Sub(due[0].At)
	dueBusiest := asynqtest.Busiest(due, time.Second)
	// Each task is due Lead before its slot. The first slot is no sooner
	// than Lead from now (scheduler.Options.Lead), so no task is due at
	// once, and the slots span (tasks-burst)/rate = 9.9 s: computed by Redis
	// from the schedule, not measured.
	assert.InDelta(t, float64(tasks-api.Burst)/api.Rate, spread.Seconds(), 0.1, "tasks due over")
	assert.LessOrEqual(t, dueBusiest, int(api.Rate*(1+scheduler.DefaultLead.Seconds()))+api.Burst, "tasks due in the busiest 1 s")

	r.waitDone(t, tasks, 40*time.Second)
	// Every slot the workers used was the one Enqueue kept, but for tasks
	// that reached a worker more than StaleAfter (half a slot, 5 ms here)
	// after their slot: those take a fresh slot (a loaded machine makes a
	// few), as do workers that wake too late for their slot (Sleep moves
	// them). So the key's reservation count grew by those and no more (by
	// exactly those, unless a stall of over a second let the key's state
	// expire and its count start again), and every task ran once.
	c := r.count.snapshot()
	assert.LessOrEqual(t, seqOf(t, r.bucket(t)), seqOf(t, bucket)+c.fresh+c.moved, "reservations on the key after Enqueue: only the fresh and moved slots")
	assert.Equal(t, tasks, r.rec.Done(), "tasks run")
	assert.GreaterOrEqual(t, c.redeemed, tasks-c.fresh, "slots redeemed")
	calls := r.rec.Calls()
	total := calls[len(calls)-1].At.Sub(start)
	busiest := asynqtest.Busiest(calls, time.Second)
	t.Logf("%d tasks enqueued in %v (%d round trips for the slots), due over %v (busiest 1 s: %d); run in %v, busiest 1 s of calls %d (limit+burst %d); reservations: %d by Enqueue, %d redeemed by workers, %d fresh by workers, %d moved by late workers, %d reschedules",
		tasks, enqueued.Round(time.Millisecond), held.holdTrips, spread.Round(10*time.Millisecond), dueBusiest,
		total.Round(10*time.Millisecond), busiest, int(api.Rate)+api.Burst, held.holds, c.redeemed, c.fresh, c.moved, c.held)
	assert.Equal(t, 1, held.holdTrips, "round trips to reserve the batch's slots")
	// Tolerance: the first tasks are due at once, and an idle server picks
	// pending tasks up only every TaskCheckInterval (up to 1.5 x 100 ms), so
	// those whose slots fall in that delay run late, together: up to
	// Rate * 150 ms = 15 calls over limit + burst. Later tasks come back
	// before their slots and keep the spacing.
	pickup := time.Duration(1.5 * float64(worker.TaskCheckInterval))
	assert.LessOrEqual(t, busiest, int(api.Rate)+api.Burst+int(api.Rate*pickup.Seconds()), "busiest 1 s of calls")
	r.checkClean(t)
}

// TestBacklogPacedAgain: the workers start after every slot the scheduler
// kept is stale (they were down). The tasks take fresh slots and drain at
// the rate instead of running at once.
func TestBacklogPacedAgain(t *testing.T) {
	const tasks = 100
	api := reserve.Limit{Rate: 50, Burst: 5}
	r := newRun(t, api)
	infos, err := r.enq.Enqueue(context.Background(), r.tasks(tasks), asynq.Queue(r.env.Queue))
	require.NoError(t, err)
	lastDue := infos[len(infos)-1].NextProcessAt
	// The last slot is Lead after lastDue; wait until it is stale too
	// (StaleAfter's default: half a slot, 10 ms at 50/s).
	time.Sleep(time.Until(lastDue.Add(scheduler.DefaultLead + 500*time.Millisecond)))
	restart := time.Now()
	r.start(t, 2, 40)
	r.waitDone(t, tasks, 20*time.Second)
	c := r.count.snapshot()
	calls := r.rec.Calls()
	busiest := asynqtest.Busiest(calls, time.Second)
	span := calls[len(calls)-1].At.Sub(calls[0].At)
	t.Logf("%d stale tasks: first call %v after the workers started, drained over %v, busiest 1 s %d (limit+burst %d); %d fresh slots, %d redeemed",
		tasks, calls[0].At.Sub(restart).Round(time.Millisecond), span.Round(10*time.Millisecond), busiest, int(api.Rate)+api.Burst, c.fresh, c.redeemed)
	assert.Equal(t, tasks, c.fresh, "fresh slots for stale tasks")
	assert.Zero(t, c.redeemed, "stale slots redeemed")
	assert.LessOrEqual(t, busiest, int(api.Rate)+api.Burst, "busiest 1 s")
	r.checkClean(t)
}

// run is a Redis, a Limiter whose script replies are counted, an Enqueuer
// and (once started) asynq servers with the worker middleware.
type run struct {
	env   *asynqtest.Env
	lim   *reserve.Limiter
	enq   *scheduler.Enqueuer
	rec   *asynqtest.Recorder
	pacer *worker.Pacer
	count *counter

	mu       sync.Mutex
	reported []error
}

func newRun(t *testing.T, api reserve.Limit) *run {
	r := &run{env: asynqtest.New(t), rec: asynqtest.NewRecorder(), count: &counter{}}
	// A client set up as pacer needs it, so that the Limiter uses it as it
	// is (rather than a clone) and the hook sees its calls.
	opts := *r.env.Redis.NewClient(t).Options()
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { rdb.Close() })
	rdb.AddHook(r.count)
	var err error
	// A generous CallTimeout: a slow call on a loaded test machine must not
	// turn into local pacing in the middle of what the test measures.
	r.lim, err = reserve.New(rdb, reserve.Options{KeyPrefix: redistest.Prefix(t), CallTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { r.lim.Close() })
	pace := worker.PerType(map[string]reserve.Limit{"call": api})
	r.enq, err = scheduler.NewEnqueuer(r.env.Client(t), r.lim, scheduler.Options{Pace: pace})
	require.NoError(t, err)
	r.pacer, err = worker.New(r.lim, worker.Options{Pace: pace})
	require.NoError(t, err)
	return r
}

func (r *run) tasks(n int) []*asynq.Task {
	out := make([]*asynq.Task, n)
	for i := range out {
		out[i] = asynq.NewTask("call", fmt.Append(nil, i))
	}
	return out
}

func (r *run) start(t *testing.T, servers, concurrency int) {
	h := r.rec.Outer(r.pacer.Middleware(r.rec.Inner(nil)))
	for range servers {
		r.env.Start(t, worker.Config(asynq.Config{
			Concurrency: concurrency,
			ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, t *asynq.Task, err error) {
				r.mu.Lock()
				defer r.mu.Unlock()
				r.reported = append(r.reported, err)
			}),
			ShutdownTimeout: time.Second,
		}), h)
	}
}

func (r *run) waitDone(t *testing.T, n int, limit time.Duration) {
	ok := asynqtest.WaitFor(context.Background(), limit, func() bool { return r.rec.Done() == n })
	require.True(t, ok, "%d of %d tasks done after %v", r.rec.Done(), n, limit)
}

// seqOf returns the number of reservations a key's state records (format
// 2, "t x s p ...", or format 1, "1 t x s p c ...": see lua/core.lua).
func seqOf(t *testing.T, state string) int {
	f := strings.Fields(state)
	require.GreaterOrEqual(t, len(f), 4, "state %q", state)
	i := 2
	if f[0] == "1" {
		i = 3
	}
	n, err := strconv.Atoi(f[i])
	require.NoError(t, err, "state %q", state)
	return n
}

// bucket returns the bucket's state.
func (r *run) bucket(t *testing.T) string {
	v, err := r.env.Redis.Client.Get(context.Background(), r.lim.RedisKey("call")).Result()
	require.NoError(t, err)
	return v
}

// checkClean: nothing archived, no retry counted, no error reported.
func (r *run) checkClean(t *testing.T) {
	q := r.env.QueueInfo(t, r.env.Inspector(t))
	assert.Zero(t, q.Archived, "archived")
	for _, c := range r.rec.Calls() {
		if !assert.Zero(t, c.Retried, "retry count of %s", c.TaskID) {
			break
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	assert.Empty(t, r.reported, "errors reported")
}

// counter reads the replies of the claim and hold scripts as they come
// back from Redis, to count the reservations made.
type counter struct {
	mu     sync.Mutex
	counts counts
}

type counts struct {
	holds     int // slots reserved by hold.lua (scheduler)
	holdTrips int // pipelines that ran hold.lua
	fresh     int // slots claim.lua reserved (worker, no live hold)
	redeemed  int // held slots claim.lua handed back
	held      int // claim.lua replies that kept a slot (reschedules)
	moved     int // slots reserve.lua granted: a worker that woke too late for its slot moves to a fresh one (Sleep)
}

func (c *counter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.counts = counts{}
}

func (c *counter) snapshot() counts {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts
}

var (
	claimSHA   = sha(lua.Claim)
	holdSHA    = sha(lua.Hold)
	reserveSHA = sha(lua.Reserve)
)

func sha(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// script returns the SHA of the script cmd runs, if it is EVAL or EVALSHA.
func script(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 2 {
		return ""
	}
	src, _ := args[1].(string)
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "evalsha":
		return src
	case "eval":
		return sha(src)
	}
	return ""
}

func (c *counter) read(cmd redis.Cmder) {
	rc, ok := cmd.(*redis.Cmd)
	if !ok || rc.Err() != nil {
		return
	}
	if b, ok := rc.Val().(string); ok && script(cmd) == reserveSHA {
		// reserve.lua's reply, one string of bytes (docs/protocol.md,
		// Reserve): "<I7HI4" (now_us, now_ns, m), then "<i8i8" (wait_ns,
		// seq) per request.
		le := func(s string) uint64 {
			var v uint64
			for i := len(s) - 1; i >= 0; i-- {
				v = v<<8 | uint64(s[i])
			}
			return v
		}
		if len(b) < 13 {
			return
		}
		m := int(le(b[9:13]))
		c.mu.Lock()
		defer c.mu.Unlock()
		for i := 0; i < m && 13+16*i+16 <= len(b); i++ {
			if seq := int64(le(b[13+16*i+8 : 13+16*i+16])); seq > 0 {
				c.counts.moved++
			}
		}
		return
	}
	v, ok := rc.Val().([]any)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch script(cmd) {
	case claimSHA:
		// now_us, now_ns, wait_ns, seq, state, origin, costs (lua/claim.lua)
		if len(v) < 6 {
			return
		}
		if status, _ := v[4].(int64); status != 0 {
			if from, _ := v[5].(int64); from == 1 {
				c.counts.redeemed++
			} else {
				c.counts.fresh++
			}
			if status == 2 {
				c.counts.held++
			}
		}
	case holdSHA:
		// now_us, now_ns, (wait_ns, seq) per holder, then (origin, one cost)
		// per holder: one unit here (lua/hold.lua).
		m := (len(v) - 2) / 4
		for i := range m {
			if from, _ := v[2+2*m+2*i].(int64); from != 1 {
				c.counts.holds++
			}
		}
	}
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.read(cmd)
		return err
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if script(cmd) == holdSHA {
				c.mu.Lock()
				c.counts.holdTrips++
				c.mu.Unlock()
				break
			}
		}
		for _, cmd := range cmds {
			c.read(cmd)
		}
		return err
	}
}
