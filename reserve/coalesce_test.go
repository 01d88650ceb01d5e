package reserve_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gate is a go-redis hook that holds the next script call on a bucket once
// armed, so a test can queue callers behind a call in flight. It also counts
// the script calls on buckets (not the Limiter's heartbeats).
type gate struct {
	passHook
	armed
	scripts atomic.Int64
}

type hold struct {
	entered chan struct{} // closed when the held call arrives
	release chan struct{} // closed to let it go
}

// armed holds the next call a hook chooses, once armed (gate's, and
// seats_test.go's renewGate).
type armed struct {
	mu   sync.Mutex
	held *hold // the next call to hold, if armed
}

// arm holds the next chosen call until release is called.
func (a *armed) arm() (entered <-chan struct{}, release func()) {
	h := &hold{make(chan struct{}), make(chan struct{})}
	a.mu.Lock()
	a.held = h
	a.mu.Unlock()
	return h.entered, sync.OnceFunc(func() { close(h.release) })
}

// stop holds the calling command, if armed, until it is released, and
// disarms.
func (a *armed) stop() {
	a.mu.Lock()
	h := a.held
	a.held = nil
	a.mu.Unlock()
	if h != nil {
		close(h.entered)
		<-h.release
	}
}

func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if onBucket(cmd) {
			if cmd.Name() == "evalsha" { // not the EVAL go-redis sends after NOSCRIPT
				g.stop()
			}
			err := next(ctx, cmd)
			if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
				g.scripts.Add(1) // not counted: an EVALSHA that go-redis retries as EVAL
			}
			return err
		}
		return next(ctx, cmd)
	}
}

// onBucket reports whether cmd runs a script on a bucket: EVAL or EVALSHA
// whose first key has a hash tag, other than the fleet's heartbeats.
func onBucket(cmd redis.Cmder) bool {
	key, ok := scriptKey(cmd)
	return ok && strings.Contains(key, "{") && !strings.Contains(key, "{limiters}")
}

// coalesceBackends are the Redis kinds the coalescing tests run on, each
// with a client of the test's own (the gate hook must not slow other tests),
// set up as pacer needs it so that the Limiter uses it and the hook sees
// its calls.
func coalesceBackends(t *testing.T) map[string]func(t *testing.T) redis.UniversalClient {
	return map[string]func(t *testing.T) redis.UniversalClient{
		"Redis": func(t *testing.T) redis.UniversalClient {
			return tunedClient(t, redistest.New(t))
		},
		"Miniredis": func(t *testing.T) redis.UniversalClient {
			mr, _ := redistest.NewMiniredis(t)
			c := redis.NewClient(&redis.Options{Addr: mr.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
}

func TestCoalesce(t *testing.T) {
	for name, newClient := range coalesceBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("Order", func(t *testing.T) { testCoalesceOrder(t, newClient(t)) })
			t.Run("Many", func(t *testing.T) { testCoalesceMany(t, newClient(t)) })
			t.Run("LeaveQueue", func(t *testing.T) { testCoalesceLeaveQueue(t, newClient(t)) })
			t.Run("LeaveInFlight", func(t *testing.T) { testCoalesceLeaveInFlight(t, newClient(t)) })
			t.Run("FreeRunning", func(t *testing.T) { testCoalesceFreeRunning(t, newClient(t)) })
		})
	}
}

// gated returns a Limiter on c with a fake clock and a gate on its client.
func gated(t *testing.T, c redis.UniversalClient) (*reserve.Limiter, *gate, *fakeclock.Clock) {
	g := &gate{}
	c.AddHook(g)
	clk := fakeclock.New(epoch)
	l, err := reserve.New(c, reserve.Options{Clock: clk, ClientTime: true, KeyPrefix: redistest.Prefix(t),
		FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	return l, g, clk
}

// waitQueued waits until n callers are queued on key.
func waitQueued(t *testing.T, l *reserve.Limiter, key string, lim reserve.Limit, n int) {
	t.Helper()
	require.Eventually(t, func() bool { return l.Queued(key, lim) == n },
		10*time.Second, time.Millisecond, "want %d callers queued on %q", n, key)
}

type outcome struct {
	r   *reserve.Reservation
	err error
}

// testCoalesceOrder: callers queued behind a call in flight are served by
// one call, first come first served, each with the slot (or refusal) it
// would have had from a call of its own.
func testCoalesceOrder(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	l, g, clk := gated(t, c)
	lim := reserve.Limit{Rate: 10, Burst: 3}
	entered, release := g.arm()
	defer release()

	type call struct {
		n       int
		maxWait time.Duration // < 0: Reserve
	}
	calls := []call{{1, -1}, {2, -1}, {3, -1}, {1, 0}, {1, -1}, {1, 450 * time.Millisecond}, {2, 600 * time.Millisecond}}
	out := make([]chan outcome, len(calls))
	for i, cl := range calls {
		out[i] = make(chan outcome, 1)
		go func() {
			var o outcome
			if cl.maxWait < 0 {
				o.r, o.err = l.ReserveN(ctx, reserve.Single("o", lim, cl.n))
			} else {
				o.r, o.err = l.TryReserveN(ctx, reserve.Single("o", lim, cl.n), cl.maxWait)
			}
			out[i] <- o
		}()
		if i == 0 {
			<-entered // the first call is in flight (held); the rest queue
		} else {
			waitQueued(t, l, "o", lim, i)
		}
	}
	release()

	// One call at a time, from a full bucket of 3 at 10/s: the delays
	// x/time/rate gives, refusals changing nothing.
	want := []time.Duration{0, 0, 300 * time.Millisecond, -400 * time.Millisecond, 400 * time.Millisecond, -500 * time.Millisecond, 600 * time.Millisecond}
	got := make([]outcome, len(want))
	for i, w := range want {
		o := <-out[i]
		got[i] = o
		if w < 0 {
			var tooLong *reserve.WaitTooLongError
			require.ErrorAs(t, o.err, &tooLong, "call %d", i)
			assert.Equal(t, -w, tooLong.Wait, "call %d: the wait it would have needed", i)
			continue
		}
		require.NoError(t, o.err, "call %d", i)
		assert.Equal(t, w, o.r.DelayFrom(clk.Now()), "call %d", i)
		assert.Equal(t, reserve.Permits(calls[i].n), o.r.Cost(), "call %d", i)
	}
	assert.EqualValues(t, 2, g.scripts.Load(), "script calls: one for the first caller, one for the six queued")
	assert.Equal(t, 0, l.Queued("o", lim))

	// 9 permits taken from 3; a reservation from a batch cancels like any
	// other: the last one gives its 2 permits back.
	st, err := l.Peek(ctx, reserve.Single("o", lim, 1))
	require.NoError(t, err)
	assert.InDelta(t, -6, st.Bands[0].Value, 1e-9)
	require.NoError(t, got[6].r.Cancel(ctx))
	st, err = l.Peek(ctx, reserve.Single("o", lim, 1))
	require.NoError(t, err)
	assert.InDelta(t, -4, st.Bands[0].Value, 1e-9)
}

// testCoalesceMany: 100 callers queued behind one call are served by one
// more, with exactly the slots of 100 calls one after the other.
func testCoalesceMany(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	l, g, clk := gated(t, c)
	lim := reserve.Limit{Rate: 100, Burst: 1}
	entered, release := g.arm()
	defer release()
	const n = 100
	res := make(chan outcome, n)
	for i := range n {
		go func() {
			r, err := l.Reserve(ctx, "m", lim)
			res <- outcome{r, err}
		}()
		if i == 0 {
			<-entered
		}
	}
	waitQueued(t, l, "m", lim, n-1)
	release()
	var delays []time.Duration
	for range n {
		o := <-res
		require.NoError(t, o.err)
		delays = append(delays, o.r.DelayFrom(clk.Now()))
	}
	slices.Sort(delays)
	for i, d := range delays {
		assert.Equal(t, time.Duration(i)*10*time.Millisecond, d, "slot %d", i)
	}
	assert.EqualValues(t, 2, g.scripts.Load(), "script calls")
}

// testCoalesceLeaveQueue: a caller whose context ends while it is queued
// leaves at once and reserves nothing.
func testCoalesceLeaveQueue(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	l, g, _ := gated(t, c)
	lim := reserve.Limit{Rate: 1, Burst: 5}
	entered, release := g.arm()
	defer release()
	first := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, "q", lim)
		first <- err
	}()
	<-entered
	cctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := l.ReserveN(cctx, reserve.Single("q", lim, 2))
		left <- err
	}()
	waitQueued(t, l, "q", lim, 1)
	cancel()
	err := <-left
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 0, l.Queued("q", lim))
	release()
	require.NoError(t, <-first)
	st, err := l.Peek(ctx, reserve.Single("q", lim, 1))
	require.NoError(t, err)
	assert.InDelta(t, 4, st.Bands[0].Value, 1e-9, "only the first caller's permit is taken")
	assert.EqualValues(t, 2, g.scripts.Load(), "script calls: the first reserve and the peek")
}

// testCoalesceLeaveInFlight: a caller whose context ends while the call
// serving it is in flight returns at once; the permits it was granted are
// given back.
func testCoalesceLeaveInFlight(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	l, g, _ := gated(t, c)
	lim := reserve.Limit{Rate: 1, Burst: 5}
	entered, release := g.arm()
	first := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, "f", lim)
		first <- err
	}()
	<-entered
	cctx, cancel := context.WithCancel(ctx)
	left := make(chan error, 1)
	go func() {
		_, err := l.ReserveN(cctx, reserve.Single("f", lim, 2))
		left <- err
	}()
	waitQueued(t, l, "f", lim, 1)
	entered2, release2 := g.arm() // hold the call that serves the queue
	defer release2()
	release()
	require.NoError(t, <-first)
	<-entered2
	cancel()
	require.ErrorIs(t, <-left, context.Canceled)
	release2()
	require.Eventually(t, func() bool {
		st, err := l.Peek(ctx, reserve.Single("f", lim, 1))
		return err == nil && st.Bands[0].Value > 3.999 && st.Bands[0].Value < 4.001
	}, 10*time.Second, time.Millisecond, "the abandoned grant of 2 permits was not given back")
}

// testCoalesceFreeRunning: many goroutines reserving at once, coalesced as
// it happens, get exactly the slots of one call after another: from a
// stopped clock, 1 to 400 permits of 2 ms each.
func testCoalesceFreeRunning(t *testing.T, c redis.UniversalClient) {
	l, g, clk := gated(t, c)
	lim := reserve.Limit{Rate: 500, Burst: 1}
	delays := reserveConcurrently(t, l, clk, "free", lim, 16, 25)
	for i, d := range delays {
		require.Equal(t, time.Duration(i)*2*time.Millisecond, d, "slot %d", i)
	}
	t.Logf("%d reservations in %d script calls", len(delays), g.scripts.Load())
}

// TestCoalesceDisabled: with DisableCoalescing every reservation is a call of
// its own, even behind a call in flight. (The call is held in the client,
// by a hook: pipelining would queue the others behind it, by design, so it
// is off here; TestPipelinedCallsShareARoundTrip.)
func TestCoalesceDisabled(t *testing.T) {
	c := coalesceBackends(t)["Redis"](t)
	g := &gate{}
	c.AddHook(g)
	l, err := reserve.New(c, reserve.Options{Clock: fakeclock.New(epoch), ClientTime: true, KeyPrefix: redistest.Prefix(t),
		FailClosed: true, CallTimeout: 10 * time.Second, DisableCoalescing: true, DisablePipelining: true, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 100, Burst: 1}
	entered, release := g.arm()
	defer release()
	var wg sync.WaitGroup
	wg.Go(func() {
		_, err := l.Reserve(context.Background(), "d", lim)
		assert.NoError(t, err)
	})
	<-entered
	for range 3 {
		wg.Go(func() {
			_, err := l.Reserve(context.Background(), "d", lim)
			assert.NoError(t, err)
		})
	}
	// The three others are not held back by the first.
	require.Eventually(t, func() bool { return g.scripts.Load() == 3 }, 10*time.Second, time.Millisecond)
	assert.Equal(t, 0, l.Queued("d", lim))
	release()
	wg.Wait()
	assert.EqualValues(t, 4, g.scripts.Load())
}
