package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// pipeLimiter is a Limiter on a fresh server, on a client (set up as
// pacer needs it) that h watches, with the script loaded.
func pipeLimiter(t *testing.T, h *keyCommands, opts reserve.Options) (*reserve.Limiter, *redistest.Server, *redis.Client) {
	t.Helper()
	s := redistest.NewProcess(t)
	rdb := tunedClient(t, s)
	rdb.AddHook(h)
	opts.RequireRedis = true
	l, err := reserve.New(rdb, opts)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	_, err = l.Reserve(context.Background(), "warm", reserve.Limit{Rate: 1, Burst: 1})
	require.NoError(t, err)
	return l, s, rdb
}

// holdPipe makes l's script calls queue, starts n callers of call(i) on
// goroutines of their own, and waits until all n queue. Its result sends
// them and returns their errors once they all return.
func holdPipe(t *testing.T, l *reserve.Limiter, n int, call func(i int) error) (send func() []error) {
	t.Helper()
	release, ok := reserve.HoldPipe(l)
	require.True(t, ok, "the Limiter pipelines")
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = call(i) })
	}
	require.Eventually(t, func() bool { q, _ := reserve.PipeQueued(l); return q == n },
		30*time.Second, time.Millisecond, "the callers queue")
	return func() []error {
		release()
		wg.Wait()
		return errs
	}
}

// TestPipelinedCallsShareARoundTrip: script calls made while another is
// in flight wait for it, then go as one pipeline, each to its own key and
// with its own outcome; a call that queued alone goes alone.
func TestPipelinedCallsShareARoundTrip(t *testing.T) {
	h := newKeyCommands("{pipe")
	l, _, _ := pipeLimiter(t, h, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}

	const n = 20
	res := make([]*reserve.Reservation, n)
	_, sent0 := reserve.PipeQueued(l)
	send := holdPipe(t, l, n, func(i int) (err error) {
		res[i], err = l.Reserve(ctx, fmt.Sprintf("pipe%d", i), lim)
		return err
	})
	for i, err := range send() {
		require.NoError(t, err, "caller %d", i)
		require.False(t, res[i].Local(), "caller %d: granted by Redis", i)
	}
	_, sent := reserve.PipeQueued(l)
	require.Equal(t, sent0+1, sent, "one pipeline")

	// A second call on each key: its slot is the first one's plus 1/rate,
	// which only the first call's state can tell.
	for i := range n {
		r, err := l.Reserve(ctx, fmt.Sprintf("pipe%d", i), lim)
		require.NoError(t, err)
		first, ok1 := reserve.ServerSlot(res[i])
		second, ok2 := reserve.ServerSlot(r)
		require.True(t, ok1 && ok2)
		require.InDelta(t, float64(time.Second), float64(second-first), float64(time.Microsecond), "key %d's second slot", i)
	}

	// One call queued alone goes as itself, not as a pipeline of one.
	send = holdPipe(t, l, 1, func(int) error {
		_, err := l.Reserve(ctx, "pipe-lone", lim)
		return err
	})
	require.NoError(t, send()[0])
	_, sent = reserve.PipeQueued(l)
	require.Equal(t, sent0+2, sent)

	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, []int{n}, h.sizes, "the queued calls went in one pipeline")
	for i := range n {
		key := l.RedisKey(fmt.Sprintf("pipe%d", i))
		require.Equal(t, []string{"evalsha"}, h.piped[key], "key %d, in the pipeline", i)
		require.Equal(t, []string{"evalsha", "evalsha"}, h.cmds[key], "key %d, in the pipeline, then alone", i)
	}
	lone := l.RedisKey("pipe-lone")
	require.Equal(t, []string{"evalsha"}, h.cmds[lone])
	require.Empty(t, h.piped[lone])
}

// TestPipelinedCallTakenBack: a caller whose context ends while its call
// queues takes it back: it is told its context's error, and the call is
// never sent. The calls queued with it go as if it had not come.
func TestPipelinedCallTakenBack(t *testing.T) {
	h := newKeyCommands("{pipe")
	l, _, rdb := pipeLimiter(t, h, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	gone, cancel := context.WithCancel(ctx)

	send := holdPipe(t, l, 3, func(i int) error {
		if i == 1 {
			_, err := l.Reserve(gone, "pipe-gone", lim)
			return err
		}
		_, err := l.Reserve(ctx, fmt.Sprintf("pipe%d", i), lim)
		return err
	})
	cancel()
	require.Eventually(t, func() bool { q, _ := reserve.PipeQueued(l); return q == 2 },
		30*time.Second, time.Millisecond, "the caller that left takes its call back")
	errs := send()
	require.ErrorIs(t, errs[1], context.Canceled)
	require.NoError(t, errs[0])
	require.NoError(t, errs[2])
	require.False(t, l.Degraded(), "a caller who left is no outage")

	h.mu.Lock()
	require.Equal(t, []int{2}, h.sizes)
	require.Empty(t, h.cmds[l.RedisKey("pipe-gone")], "the call taken back was never sent")
	h.mu.Unlock()
	n, err := rdb.Exists(ctx, l.RedisKey("pipe-gone")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the call taken back changed nothing")
}

// TestPipelinedCancelsLeaveNoStall: callers that leave at any point (while
// their call queues, as its turn to go alone comes, in a pipeline, alone)
// never leave a queue stuck: once they have all returned, the queues
// empty and a call goes through. Each of 400 Reserves on 20 keys, from 100
// goroutines at once, has a context cancelled 0 to 2 ms after its start.
func TestPipelinedCancelsLeaveNoStall(t *testing.T) {
	h := newKeyCommands("{pipe")
	l, _, _ := pipeLimiter(t, h, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1000, Burst: 1000}
	var wg sync.WaitGroup
	for g := range 100 {
		wg.Go(func() {
			for i := range 4 {
				cctx, cancel := context.WithCancel(ctx)
				time.AfterFunc(time.Duration((g*4+i)%9)*250*time.Microsecond, cancel)
				_, _ = l.Reserve(cctx, fmt.Sprintf("pipe%d", (g+i)%20), lim)
				cancel()
			}
		})
	}
	wg.Wait()
	// (A grant whose caller left is given back by a call of its own, which
	// may queue a while after its caller returned.)
	require.Eventually(t, func() bool { q, _ := reserve.PipeQueued(l); return q == 0 },
		30*time.Second, time.Millisecond, "calls still queued")
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := l.Reserve(cctx, "pipe-after", lim)
	require.NoError(t, err)
	require.False(t, r.Local(), "granted by Redis")
}

// TestPipelinedLoneTurnCancelled: a call that queued alone is sent by its
// own caller when its turn comes. A caller that leaves just as its turn
// comes does not send it, and passes the turn on: the next call goes
// through. 300 times, a lone queued call's context is cancelled right as
// the queue is released.
func TestPipelinedLoneTurnCancelled(t *testing.T) {
	h := newKeyCommands("{pipe")
	l, _, _ := pipeLimiter(t, h, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1e6, Burst: 1000}
	for i := range 300 {
		cctx, cancel := context.WithCancel(ctx)
		release, ok := reserve.HoldPipe(l)
		require.True(t, ok)
		done := make(chan error, 1)
		go func() {
			_, err := l.Reserve(cctx, "pipe-lone", lim)
			done <- err
		}()
		require.Eventually(t, func() bool { q, _ := reserve.PipeQueued(l); return q == 1 },
			30*time.Second, 10*time.Microsecond, "the call queues")
		// Its context ends, and its turn comes (release hands it to its
		// caller), mostly before its caller wakes.
		cancel()
		release()
		if err := <-done; err != nil {
			require.ErrorIs(t, err, context.Canceled, "round %d", i)
		}
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := l.Reserve(wctx, "pipe-next", lim)
		wcancel()
		require.NoError(t, err, "round %d: the call after it", i)
	}
}

// TestPipelinedNoScript: calls of a pipeline that Redis has lost the
// script for (a restart, SCRIPT FLUSH) are each sent again as EVAL, as a
// call alone is.
func TestPipelinedNoScript(t *testing.T) {
	h := newKeyCommands("{pipe")
	l, _, rdb := pipeLimiter(t, h, reserve.Options{})
	ctx := context.Background()
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	const n = 5
	send := holdPipe(t, l, n, func(i int) error {
		r, err := l.Reserve(ctx, fmt.Sprintf("pipe%d", i), reserve.Limit{Rate: 1, Burst: 1})
		if err == nil && r.Local() {
			err = errors.New("granted locally")
		}
		return err
	})
	for i, err := range send() {
		require.NoError(t, err, "caller %d", i)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range n {
		key := l.RedisKey(fmt.Sprintf("pipe%d", i))
		require.Equal(t, []string{"evalsha"}, h.piped[key], "key %d", i)
		require.Equal(t, []string{"evalsha", "eval"}, h.cmds[key], "key %d: sent again alone, with the script", i)
	}
}

// TestPipelinedOutage: a pipeline to a Redis that is gone fails each of
// its calls as a call alone would fail: the Limiter finds Redis gone and
// paces locally, and every caller who can wait gets its slot, none an
// error.
func TestPipelinedOutage(t *testing.T) {
	h := newKeyCommands("{pipe")
	l, s, _ := pipeLimiter(t, h, reserve.Options{CallTimeout: 100 * time.Millisecond})
	ctx := context.Background()
	const n = 5
	send := holdPipe(t, l, n, func(i int) error {
		return l.Wait(ctx, fmt.Sprintf("pipe%d", i), reserve.Limit{Rate: 100, Burst: 1})
	})
	s.Stop(t)
	for i, err := range send() {
		require.NoError(t, err, "caller %d", i)
	}
	require.True(t, l.Degraded(), "the Limiter paces locally")
}

// TestPipeliningDisabled: with Options.DisablePipelining, or on a client
// other than one server's, each call is a round trip of its own.
func TestPipeliningDisabled(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(tunedClient(t, s), reserve.Options{DisablePipelining: true})
	require.NoError(t, err)
	defer l.Close()
	_, ok := reserve.HoldPipe(l)
	require.False(t, ok)
}

// TestPipelineFlusherStopsOnClose: a lane's pipelines are sent by a
// goroutine that stays (its flusher), and Close stops it. Calls that queued
// before Close and go after it are still sent, each caller told its own
// outcome, and nothing of the pipeliner outlives them.
func TestPipelineFlusherStopsOnClose(t *testing.T) {
	before := countGoroutines()
	h := newKeyCommands("{pipe")
	l, _, _ := pipeLimiter(t, h, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	reserveN := func(round int) func(i int) error {
		return func(i int) error {
			_, err := l.Reserve(ctx, fmt.Sprintf("pipe%d-%d", round, i), lim)
			return err
		}
	}
	for round := range 2 {
		for i, err := range holdPipe(t, l, 3, reserveN(round))() {
			require.NoError(t, err, "round %d, caller %d", round, i)
		}
	}
	require.Equal(t, 1, countStacks("(*pipeScripter).flusher"), "one flusher, kept from one pipeline to the next")

	send := holdPipe(t, l, 3, reserveN(2))
	require.NoError(t, l.Close())
	for i, err := range send() {
		require.NoError(t, err, "caller %d, queued before Close", i)
	}
	h.mu.Lock()
	require.Equal(t, []int{3, 3, 3}, h.sizes, "each round went as one pipeline")
	h.mu.Unlock()
	require.Eventually(t, func() bool { return countGoroutines() <= before }, 10*time.Second, 10*time.Millisecond,
		"goroutines: %d before New, %d after Close", before, countGoroutines())
}
