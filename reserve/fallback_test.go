package reserve_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a reserve.Metrics that remembers what it was told.
type recorder struct {
	mu sync.Mutex
	c  counts
}

type counts struct {
	calls    map[string]int // Redis calls by op
	errors   int
	local    int // reservations granted locally
	remote   int
	switches []bool
	pauses   int
}

func newRecorder() *recorder { return &recorder{c: counts{calls: map[string]int{}}} }

func (r *recorder) Reserved(_ string, _ int, _ time.Duration, local bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if local {
		r.c.local++
	} else {
		r.c.remote++
	}
}

func (r *recorder) RedisCall(op string, _ time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.calls[op]++
	if err != nil {
		r.c.errors++
	}
}

func (r *recorder) Fallback(active bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.switches = append(r.c.switches, active)
}

func (r *recorder) Paused(string, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.c.pauses++
}

func (r *recorder) snapshot() counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.c
	c.calls = map[string]int{}
	for k, v := range r.c.calls {
		c.calls[k] = v
	}
	c.switches = append([]bool(nil), r.c.switches...)
	return c
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// blackHole returns the address of a server that accepts connections and
// never answers: a hung Redis.
func blackHole(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func closeLimiter(t *testing.T, l *reserve.Limiter) {
	t.Cleanup(func() { _ = l.Close() })
}

// TestFallbackRedisDown: with Redis refusing connections, Wait keeps pacing
// locally with no error, after FailAfter failures the Limiter stops calling
// Redis, and the switch is reported once.
func TestFallbackRedisDown(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	defer c.Close()
	rec := newRecorder()
	l, err := reserve.New(c, reserve.Options{Metrics: rec, Logger: quiet, HeartbeatInterval: time.Hour, ProbeInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 40, Burst: 1}

	start := time.Now()
	for range 6 {
		require.NoError(t, l.Wait(ctx, "down", lim))
	}
	// Six permits at 40/s, burst 1, on the local fallback (fleet of 1):
	// the sixth is 125 ms after the first. Never early.
	assert.GreaterOrEqual(t, time.Since(start), 125*time.Millisecond)
	assert.True(t, l.Degraded())
	s := rec.snapshot()
	assert.Equal(t, 6, s.local)
	assert.Equal(t, []bool{true}, s.switches)
	// The heartbeat at New and the first calls failed; once degraded, no
	// call reaches for Redis.
	assert.LessOrEqual(t, s.calls["reserve"], reserve.DefaultFailAfter)

	_, err = l.Peek(ctx, "down", lim, 1)
	assert.NoError(t, err)
	assert.NoError(t, l.Pause(ctx, "down", lim, time.Second))
	st, err := l.Peek(ctx, "down", lim, 1)
	require.NoError(t, err)
	assert.Greater(t, st.Wait, 900*time.Millisecond, "a local pause holds the key")
}

// TestFailClosed: with FailClosed, calls fail with an error matching
// ErrUnavailable that wraps the cause, and nothing is paced locally.
func TestFailClosed(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	defer c.Close()
	rec := newRecorder()
	l, err := reserve.New(c, reserve.Options{FailClosed: true, Metrics: rec, Logger: quiet, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 40, Burst: 1}
	for range 5 {
		err := l.Wait(ctx, "fc", lim)
		require.ErrorIs(t, err, reserve.ErrUnavailable)
	}
	_, err = l.Reserve(ctx, "fc", lim, 1)
	require.ErrorIs(t, err, reserve.ErrUnavailable)
	_, err = l.Peek(ctx, "fc", lim, 1)
	require.ErrorIs(t, err, reserve.ErrUnavailable)
	require.ErrorIs(t, l.Pause(ctx, "fc", lim, time.Second), reserve.ErrUnavailable)
	assert.Equal(t, 0, rec.snapshot().local, "fail-closed paced locally")

	// Before the switch, the error wraps the cause. (A client that fails
	// at once: by default go-redis retries a refused dial for longer than
	// CallTimeout, and the cause is then the timeout.)
	fast := redis.NewClient(&redis.Options{Addr: deadAddr(t), MaxRetries: -1, DialerRetries: 1})
	defer fast.Close()
	l2, err := reserve.New(fast, reserve.Options{FailClosed: true, Logger: quiet, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l2)
	_, err = l2.Reserve(ctx, "fc", lim, 1)
	require.ErrorIs(t, err, reserve.ErrUnavailable)
	var opErr *net.OpError
	assert.ErrorAs(t, err, &opErr, "the cause: %v", err)
}

// TestCallTimeout: a Redis that accepts connections and never answers holds
// no call longer than CallTimeout, and Wait goes on locally.
func TestCallTimeout(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: blackHole(t)}) // ReadTimeout 3 s by default
	defer c.Close()
	l, err := reserve.New(c, reserve.Options{CallTimeout: 100 * time.Millisecond, Logger: quiet, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l)
	start := time.Now()
	require.NoError(t, l.Wait(context.Background(), "hung", reserve.Limit{Rate: 100, Burst: 1}))
	// Bounded by CallTimeout (100 ms), far below the client's 3 s.
	assert.Less(t, time.Since(start), 2*time.Second)

	// The caller's own context still wins over the fallback.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	l2, err := reserve.New(c, reserve.Options{CallTimeout: time.Second, Logger: quiet, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l2)
	_, err = l2.Reserve(ctx, "hung", reserve.Limit{Rate: 100, Burst: 1}, 1)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestFleetSize: Limiters sharing a KeyPrefix learn how many are live from
// their heartbeats, and the local fallback divides each key's rate by it.
func TestFleetSize(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	opts := reserve.Options{KeyPrefix: prefix, HeartbeatInterval: 50 * time.Millisecond, Logger: quiet}
	var ls []*reserve.Limiter
	for range 3 {
		l, err := reserve.New(s.Client, opts)
		require.NoError(t, err)
		closeLimiter(t, l)
		ls = append(ls, l)
	}
	require.Eventually(t, func() bool {
		for _, l := range ls {
			if l.FleetSize() != 3 {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "fleet size never reached 3")

	// One leaves: the others learn it at their next heartbeat.
	require.NoError(t, ls[2].Close())
	require.Eventually(t, func() bool { return ls[0].FleetSize() == 2 && ls[1].FleetSize() == 2 },
		5*time.Second, 10*time.Millisecond, "fleet size never went down to 2")
	assert.ErrorIs(t, ls[2].Wait(context.Background(), "k", reserve.Limit{Rate: 1, Burst: 1}), reserve.ErrClosed)
}

// TestCloseStopsGoroutines: New starts one background goroutine; Close stops
// it, even while probing a dead Redis.
func TestCloseStopsGoroutines(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	defer c.Close()
	before := countGoroutines()
	var ls []*reserve.Limiter
	for range 10 {
		l, err := reserve.New(c, reserve.Options{ProbeInterval: 10 * time.Millisecond, Logger: quiet})
		require.NoError(t, err)
		ls = append(ls, l)
	}
	for _, l := range ls {
		require.NoError(t, l.Wait(context.Background(), "g", reserve.Limit{Rate: 1000, Burst: 10}))
	}
	for _, l := range ls {
		_ = l.Close()
		_ = l.Close() // a second Close does nothing
	}
	require.Eventually(t, func() bool { return countGoroutines() <= before }, 5*time.Second, 10*time.Millisecond,
		"goroutines: %d before New, %d after Close", before, countGoroutines())
}

// TestCloseAfterWaits: Limiters whose Waits slept and were coalesced leave
// no goroutine after Close.
func TestCloseAfterWaits(t *testing.T) {
	s := redistest.New(t)
	before := countGoroutines()
	for range 3 {
		l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 5 {
					assert.NoError(t, l.Wait(context.Background(), "w", reserve.Limit{Rate: 400, Burst: 1}))
				}
			})
		}
		wg.Wait()
		require.NoError(t, l.Close())
	}
	require.Eventually(t, func() bool { return countGoroutines() <= before }, 5*time.Second, 10*time.Millisecond,
		"goroutines: %d before New, %d after Close", before, countGoroutines())
}

// TestWaitDeadlineRoundTrip: with server time, the slot counts from the
// reply. When the reply's trip pushes the slot past the context deadline,
// WaitN gives the slot back at once and says so, instead of sleeping until
// the deadline and wasting the slot.
func TestWaitDeadlineRoundTrip(t *testing.T) {
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 5 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 2, Burst: 1}
	_, err = l.Reserve(ctx, "rt", lim, 1) // the next slot is 500 ms away
	require.NoError(t, err)
	p.AddLatency(t, 100*time.Millisecond) // every reply now arrives 100 ms late

	dctx, cancel := context.WithTimeout(ctx, 550*time.Millisecond) // the script sees ~499 ms: fits; with the reply, ~600 ms: does not
	defer cancel()
	start := time.Now()
	err = l.Wait(dctx, "rt", lim)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Less(t, time.Since(start), 400*time.Millisecond, "Wait slept towards the deadline instead of giving up")
	p.Clear(t)
	st, err := l.Peek(ctx, "rt", lim, 1)
	require.NoError(t, err)
	assert.Greater(t, st.Tokens, -0.9, "the slot was not given back")
}
