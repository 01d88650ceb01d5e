package scheduler_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/asynqtest"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/scheduler"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var api = reserve.Limit{Rate: 10, Burst: 2}

func pace(t *asynq.Task) (reserve.Request, bool) {
	if t.Type() != "call" {
		return reserve.Request{}, false
	}
	return reserve.Single("call", api, 1), true
}

func TestNewEnqueuer(t *testing.T) {
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: "127.0.0.1:1"})
	defer c.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	l, err := reserve.New(rdb, reserve.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	tests := []struct {
		name string
		c    *asynq.Client
		l    *reserve.Limiter
		opts scheduler.Options
		ok   bool
	}{
		{"ok", c, l, scheduler.Options{Pace: pace}, true},
		{"negative lead means none", c, l, scheduler.Options{Pace: pace, Lead: -1}, true},
		{"nil client", nil, l, scheduler.Options{Pace: pace}, false},
		{"nil limiter", c, nil, scheduler.Options{Pace: pace}, false},
		{"nil pace", c, l, scheduler.Options{}, false},
	}
	for _, tt := range tests {
		_, err := scheduler.NewEnqueuer(tt.c, tt.l, tt.opts)
		if tt.ok {
			assert.NoError(t, err, tt.name)
		} else {
			assert.ErrorIs(t, err, scheduler.ErrInvalidOptions, tt.name)
		}
	}
	e, err := scheduler.NewEnqueuer(c, l, scheduler.Options{Pace: pace})
	require.NoError(t, err)
	for _, o := range []asynq.Option{asynq.TaskID("x"), asynq.ProcessAt(time.Now()), asynq.ProcessIn(time.Second)} {
		_, err := e.Enqueue(context.Background(), []*asynq.Task{asynq.NewTask("call", nil)}, o)
		assert.ErrorIs(t, err, scheduler.ErrInvalidOptions, "Enqueue(%v)", o)
	}
}

// TestEnqueue: paced tasks are scheduled Lead before slots spaced at the
// rate, each slot held under the task's ID; others are enqueued as they are;
// the slots cost one round trip.
func TestEnqueue(t *testing.T) {
	env := asynqtest.New(t)
	// A client set up as pacer needs (no retries, context deadlines), so
	// that the Limiter uses it and the hook counts its round trips.
	ropts, err := redis.ParseURL(env.Redis.URL)
	require.NoError(t, err)
	ropts.MaxRetries, ropts.ContextTimeoutEnabled, ropts.DialerRetries = -1, true, 1
	rdb := redis.NewClient(ropts)
	t.Cleanup(func() { rdb.Close() })
	var trips atomic.Int64
	rdb.AddHook(redistest.RoundTrips{N: &trips})
	// A generous CallTimeout: a slow call on a loaded test machine must not
	// turn into local pacing in the middle of what the test measures.
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: redistest.Prefix(t), CallTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	e, err := scheduler.NewEnqueuer(env.Client(t), l, scheduler.Options{Pace: pace})
	require.NoError(t, err)
	ctx := context.Background()
	// Load the script, so the counted batch is the steady state.
	_, err = e.Enqueue(ctx, []*asynq.Task{asynq.NewTask("call", nil)}, asynq.Queue(env.Queue))
	require.NoError(t, err)

	var tasks []*asynq.Task
	for i := range 60 {
		typ := "call"
		if i%10 == 9 {
			typ = "free"
		}
		tasks = append(tasks, asynq.NewTask(typ, fmt.Append(nil, i)))
	}
	trips.Store(0)
	start := time.Now()
	infos, err := e.Enqueue(ctx, tasks, asynq.Queue(env.Queue))
	require.NoError(t, err)
	assert.Equal(t, int64(1), trips.Load(), "round trips on the limiter's client for 54 slots")

	// Each task is due Lead before its slot. The first slot is no earlier
	// than Lead from now, so no task is due before the batch was enqueued;
	// the slots are 100 ms apart, but for what is left of the burst of 2
	// at the start (the warm-up task took one).
	var prevAt time.Time
	paced := 0
	for i, info := range infos {
		require.NotNil(t, info, "task %d", i)
		hold := l.RedisKey("call") + ":h:" + info.ID
		n, err := env.Redis.Client.Exists(ctx, hold).Result()
		require.NoError(t, err)
		if tasks[i].Type() == "free" {
			assert.Equal(t, asynq.TaskStatePending, info.State, "unpaced task %d", i)
			assert.Zero(t, n, "unpaced task %d has a hold", i)
			continue
		}
		assert.Equal(t, int64(1), n, "task %d has no hold", i)
		assert.False(t, info.NextProcessAt.Before(start), "task %d due at %v, before the batch (%v)", i, info.NextProcessAt, start)
		if !prevAt.IsZero() {
			gap := info.NextProcessAt.Sub(prevAt)
			if paced > api.Burst {
				assert.Equal(t, 100*time.Millisecond, gap, "task %d: spacing from the previous paced task", i)
			} else {
				assert.True(t, gap >= 0 && gap <= 100*time.Millisecond, "task %d: gap %v at the start", i, gap)
			}
		}
		prevAt = info.NextProcessAt
		paced++
	}
	// IDs sort in slot order (asynq moves a second's tasks in ID order).
	prev := ""
	for i, info := range infos {
		if tasks[i].Type() == "call" {
			assert.Less(t, prev, info.ID, "task %d's ID sorts before the previous slot's", i)
			prev = info.ID
		}
	}
	last := infos[len(infos)-2].NextProcessAt // the last one is unpaced
	t.Logf("54 paced tasks due over %v", last.Sub(infos[0].NextProcessAt).Round(10*time.Millisecond))
}

// TestEnqueueFair: a fair task (its Request names a tenant) is booked only
// in its tenant's turn, when it runs: Enqueue holds no slot for it and
// enqueues it due at once, beside a plain task that holds its slot.
func TestEnqueueFair(t *testing.T) {
	env := asynqtest.New(t)
	l, err := reserve.New(env.Redis.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), CallTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	fair := func(t *asynq.Task) (reserve.Request, bool) {
		req, ok := pace(t)
		if ok && string(t.Payload()) == "acme" {
			req.Tenant = "acme"
		}
		return req, ok
	}
	e, err := scheduler.NewEnqueuer(env.Client(t), l, scheduler.Options{Pace: fair})
	require.NoError(t, err)
	ctx := context.Background()
	tasks := []*asynq.Task{asynq.NewTask("call", []byte("acme")), asynq.NewTask("call", nil), asynq.NewTask("call", []byte("acme"))}
	infos, err := e.Enqueue(ctx, tasks, asynq.Queue(env.Queue))
	require.NoError(t, err)
	for i, info := range infos {
		require.NotNil(t, info, "task %d", i)
		n, err := env.Redis.Client.Exists(ctx, l.RedisKey("call")+":h:"+info.ID).Result()
		require.NoError(t, err)
		if i == 1 {
			assert.Equal(t, int64(1), n, "the plain task has no hold")
			continue
		}
		assert.Zero(t, n, "fair task %d has a hold", i)
		assert.Equal(t, asynq.TaskStatePending, info.State, "fair task %d", i)
	}
}
