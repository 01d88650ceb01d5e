package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// pipeHook records the script calls a client sends, by key: alone
// (ProcessHook) or in a pipeline (ProcessPipelineHook, with the size of
// each pipeline that carried one).
type pipeHook struct {
	passHook
	mark  string
	mu    sync.Mutex
	alone map[string][]string // by key: the commands sent alone
	piped map[string][]string // by key: the commands sent in pipelines
	sizes []int               // each pipeline's script calls naming mark
}

func newPipeHook(mark string) *pipeHook {
	return &pipeHook{mark: mark, alone: map[string][]string{}, piped: map[string][]string{}}
}

func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key, ok := scriptKey(cmd); ok && strings.Contains(key, h.mark) {
			h.mu.Lock()
			h.alone[key] = append(h.alone[key], strings.ToLower(cmd.Name()))
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		n := 0
		h.mu.Lock()
		for _, cmd := range cmds {
			if key, ok := scriptKey(cmd); ok && strings.Contains(key, h.mark) {
				h.piped[key] = append(h.piped[key], strings.ToLower(cmd.Name()))
				n++
			}
		}
		if n > 0 {
			h.sizes = append(h.sizes, n)
		}
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// pipeLimiter is a Limiter on a fresh server, on a client (set up as
// pacer needs it) that h watches, with the script loaded.
func pipeLimiter(t *testing.T, h *pipeHook, opts reserve.Options) (*reserve.Limiter, *redistest.Server, *redis.Client) {
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
	h := newPipeHook("{pipe")
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
		require.Equal(t, []string{"evalsha"}, h.alone[key], "key %d, alone", i)
	}
	require.Equal(t, []string{"evalsha"}, h.alone[l.RedisKey("pipe-lone")])
}

// TestPipelinedCallTakenBack: a caller whose context ends while its call
// queues takes it back: it is told its context's error, and the call is
// never sent. The calls queued with it go as if it had not come.
func TestPipelinedCallTakenBack(t *testing.T) {
	h := newPipeHook("{pipe")
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

	n, err := rdb.Exists(ctx, l.RedisKey("pipe-gone")).Result()
	require.NoError(t, err)
	require.Zero(t, n, "the call taken back changed nothing")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, []int{2}, h.sizes)
	require.Empty(t, h.piped[l.RedisKey("pipe-gone")])
	require.Empty(t, h.alone[l.RedisKey("pipe-gone")])
}

// TestPipelinedNoScript: calls of a pipeline that Redis has lost the
// script for (a restart, SCRIPT FLUSH) are each sent again as EVAL, as a
// call alone is.
func TestPipelinedNoScript(t *testing.T) {
	h := newPipeHook("{pipe")
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
		require.Equal(t, []string{"eval"}, h.alone[key], "key %d: sent again, with the script", i)
	}
}

// TestPipelinedOutage: a pipeline to a Redis that is gone fails each of
// its calls as a call alone would fail: the Limiter finds Redis gone and
// paces locally, and every caller who can wait gets its slot, none an
// error.
func TestPipelinedOutage(t *testing.T) {
	h := newPipeHook("{pipe")
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
