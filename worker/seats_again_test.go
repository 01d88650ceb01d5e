package worker_test

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// movesSeen is a reserve.Metrics (and SeatMetrics) that counts a Limiter's
// sleepers moved to a fresh slot, by reason, and signals each time the
// Limiter's calls take seats.
type movesSeen struct {
	mu    sync.Mutex
	moved map[string]int // by why (reserve.MovedLate, ...)
	taken chan struct{}  // a send per SeatsTaken (dropped when full)
}

func newMovesSeen() *movesSeen {
	return &movesSeen{moved: map[string]int{}, taken: make(chan struct{}, 8)}
}

func (m *movesSeen) Moved(key, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.moved[why]++
}

func (m *movesSeen) movedFor(why string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.moved[why]
}

func (m *movesSeen) SeatsTaken(key, band string, seats int, waited time.Duration, handedOff, local bool) {
	select {
	case m.taken <- struct{}{}:
	default:
	}
}

func (*movesSeen) Reserved(string, []string, []float64, time.Duration, bool) {}
func (*movesSeen) RedisCall(string, time.Duration, error)                    {}
func (*movesSeen) Fallback(bool)                                             {}
func (*movesSeen) Paused(string, time.Duration)                              {}
func (*movesSeen) Evictable(string)                                          {}
func (*movesSeen) SeatsHeld(string, string, int)                             {}
func (*movesSeen) SeatWaiters(string, string, int)                           {}

// TestSeatsAgainFreshSlot: a task whose seat the fleet handed on while its
// handler slept to its rate slot (its process's renews went unanswered)
// waits for a seat again at the seats' last check; that wait leaving it
// later than MaxLateness after its slot, the handler runs on a fresh slot,
// as a sleeper that wakes that late does (8ac87d7; pacehttp's
// TestSeatsAgainFreshSlot is the same case for a request). Without it, the
// handler ran on the slot it had slept to, however late.
//
// The task reaches its seats' last check with its slot not yet moved for
// lateness (a slot moves up to reserve.MaxLateMoves times for that)
// through a pause: its seat is taken in the pause, after the slot, and the
// slot moves after the pause (a move that does not count as one for
// lateness); while it sleeps there,
// its Limiter's renews are refused and the seat goes to b, which holds it
// past the slot.
func TestSeatsAgainFreshSlot(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond, Logger: quiet}
	refuse := &redistest.Refuser{Op: "renew"}
	ca := s.TunedClient(t)
	ca.AddHook(refuse)
	seen := newMovesSeen()
	aOpts := opts
	aOpts.MaxLateness = 250 * time.Millisecond
	aOpts.Metrics = seen
	a, err := reserve.New(ca, aOpts)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err := reserve.New(s.NewClient(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	ops, err := admin.New(s.Client, admin.Options{KeyPrefix: opts.KeyPrefix})
	require.NoError(t, err)

	const key = "api"
	p := reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 1},
		{Name: "rate", Unit: "calls", Limit: reserve.Limit{Rate: 10, Burst: 1}},
	}
	seats := reserve.Request{Key: key, Policy: p[:1], Cost: reserve.Cost{"requests": 1}}
	status := func() admin.SeatStatus {
		st, err := ops.Status(ctx, key)
		if err != nil || st.Seats == nil {
			return admin.SeatStatus{}
		}
		return *st.Seats
	}

	// b holds the seat: the task sleeps to its slot (now), then waits for
	// the seat.
	rb, err := b.Acquire(ctx, seats)
	require.NoError(t, err)
	pacer, err := worker.New(a, worker.Options{Pace: func(*asynq.Task) (reserve.Request, bool) {
		return reserve.Request{Key: key, Policy: p, Cost: reserve.Cost{"requests": 1, "calls": 1}}, true
	}})
	require.NoError(t, err)
	var ran atomic.Int64
	handler := pacer.Middleware(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran.Add(1)
		return nil
	}))
	done := make(chan error, 1)
	go func() { done <- handler.ProcessTask(t.Context(), asynq.NewTask("call", nil)) }()
	require.Eventually(t, func() bool { return status().Waiting == 1 }, 10*time.Second, 5*time.Millisecond,
		"the task never queued for the seat")

	// A pause covers the task's slot; b gives the seat back in it, so the
	// task takes it there, and its slot moves after the pause.
	const pauseFor = 3 * time.Second
	require.NoError(t, b.Pause(ctx, key, pauseFor))
	pauseEnd := time.Now().Add(pauseFor)
	rb.Done()
	select {
	case <-seen.taken:
	case <-time.After(10 * time.Second):
		t.Fatal("the task never took its seat")
	}

	// The task sleeps to the pause's end, holding its seat; its renews
	// refused, b takes the seat once a has been silent on the key for 3.5
	// heartbeats, and holds it past the task's slot, by more than a's
	// MaxLateness.
	refuse.On.Store(true)
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rb, err = b.Acquire(bctx, seats)
	require.NoError(t, err)
	t.Logf("b granted %v before the pause's end, %d renews refused", time.Until(pauseEnd), refuse.Refused.Load())
	require.True(t, time.Now().Before(pauseEnd), "b took the seat after the task's slot: the test proves nothing (a loaded machine?)")
	refuse.On.Store(false)
	// (The slot after the pause is 1/rate after its end, 100 ms: held
	// until a second after the end, the seat comes back 900 ms late, and
	// a's MaxLateness leaves its wake 250 ms to spare.)
	time.Sleep(time.Until(pauseEnd) + time.Second)
	require.Zero(t, ran.Load(), "the handler ran while b held the seat")
	require.Zero(t, seen.movedFor(reserve.MovedLate), "the task's slot moved for lateness before its seat came back: the test proves nothing")
	rb.Done()

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the task never got a seat back")
	}
	assert.EqualValues(t, 1, ran.Load(), "handler runs")
	t.Logf("a's sleepers moved: %v", seen.moved)
	assert.GreaterOrEqual(t, seen.movedFor(reserve.MovedPause), 1, "the task's slot moved after the pause")
	// At least one move for lateness (more when a loaded machine wakes it
	// late for the fresh slot too: up to reserve.MaxLateMoves).
	assert.GreaterOrEqual(t, seen.movedFor(reserve.MovedLate), 1,
		"the handler ran on the slot it slept to, 900 ms late, instead of a fresh slot")
	assert.Equal(t, 0, status().Used, "the task's seat went back")
}
