package worker_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/asynqtest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTenants: tasks name their tenant (Pace returns a fair Request). A
// tenant floods the key with 60 tasks, 6 s of work at 10/s; a light
// tenant's one task, enqueued once the flood runs, is called among the
// first 30 (in its turn, about two slots after it arrives; the bound leaves
// 3 s for a loaded machine), every task is done, none archived, and no
// second of calls holds more than the limit allows. The same tasks paced
// first come, first served (no tenant) put the light task after the flood:
// it holds the 60 slots before it.
func TestTenants(t *testing.T) {
	lim := reserve.Limit{Rate: 10, Burst: 1}
	for _, fair := range []bool{true, false} {
		name := map[bool]string{true: "fair", false: "fifo"}[fair]
		t.Run(name, func(t *testing.T) {
			opts := worker.Options{Pace: func(tk *asynq.Task) (reserve.Request, bool) {
				req := reserve.Single("api", lim, 1)
				if fair {
					req.Tenant, _, _ = strings.Cut(string(tk.Payload()), ":")
				}
				return req, true
			}}
			f := newFleet(t, 1, 80, opts, nil)
			for i := range 60 {
				_, err := f.client.Enqueue(asynq.NewTask("call", []byte("flood:"+string(rune('a'+i%26)))), asynq.Queue(f.env.Queue))
				require.NoError(t, err)
			}
			require.True(t, asynqtest.WaitFor(context.Background(), 10*time.Second, func() bool { return len(f.rec.Calls()) > 0 }))
			_, err := f.client.Enqueue(asynq.NewTask("call", []byte("light")), asynq.Queue(f.env.Queue), asynq.TaskID("light"))
			require.NoError(t, err)
			f.waitDone(t, 61, 30*time.Second)

			q := f.env.QueueInfo(t, f.insp)
			assert.Zero(t, q.Archived, "archived")
			assert.Empty(t, f.errorsReported(), "errors reported")
			calls := f.rec.Calls()
			assert.LessOrEqual(t, asynqtest.Busiest(calls, time.Second), int(lim.Rate)+lim.Burst)
			at := slices.IndexFunc(calls, func(c asynqtest.Call) bool { return c.TaskID == "light" })
			require.GreaterOrEqual(t, at, 0)
			t.Logf("%s: the light tenant's task was call %d of %d (%d reschedules)", name, at+1, len(calls), f.rescheduled())
			if fair {
				assert.Less(t, at, 30, "the light tenant's task waited behind the flood")
			} else {
				// Its slot is after the flood's 60; calls are recorded
				// when the handlers run, so neighbours may swap by a
				// late wake-up, never by 15 slots (1.5 s).
				assert.GreaterOrEqual(t, at, 45, "first come, first served: the light task comes after the flood")
			}
		})
	}
}
