package reserve_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestFarRedisChecksAhead: a sleeper on a Redis far away (300 ms a round
// trip) checks for a pause early enough that the check's reply is back
// before its slot, and wakes on time: no sleeper moves for lateness.
// Before, the check was made PreciseWake (2 ms) before the slot whatever
// the round trip, so its reply came about 300 ms after the slot, past
// MaxLateness (100 ms), and every sleeper but the first moved, up to
// MaxLateMoves times, spending a slot each time, then fired late.
// (The margins are wide: a sleeper moves only if its process is held
// over 100 ms beyond the round trip it learned.)
func TestFarRedisChecksAhead(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	l, c := farLimiter(t, 300*time.Millisecond, reserve.Options{CallTimeout: 10 * time.Second,
		MaxLateness: 100 * time.Millisecond, Metrics: rec})
	ctx := context.Background()
	// Connections opened (go-redis's handshake is round trips of its own),
	// as a process that has run a while has them.
	var warm sync.WaitGroup
	for range 4 {
		warm.Go(func() { assert.NoError(t, c.Ping(ctx).Err()) })
	}
	warm.Wait()

	// Slots 470 ms apart. The first Wait's call grants the first; the
	// next call, sent at its reply, grants the other three, the first of
	// them due about 170 ms after the script ran: within PreciseWake and a
	// round trip, so that the reply stands for its check (a read sent at
	// its arrival would come back about 130 ms after the slot); the later
	// ones are checked by a read.
	lim := reserve.Limit{Rate: 1 / 0.47, Burst: 1}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = l.Wait(ctx, "far", lim) })
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "Wait %d", i)
	}
	assert.Empty(t, rec.snapshot().moved, "sleepers moved: their pause check's reply came after their slot")
}

// farLimiter is a Limiter (o with a key prefix of tb's own and a quiet
// Logger) on a client of a Redis rtt away: a proxy adds half of it to each
// command and half to each reply. Both are closed when tb ends.
func farLimiter(tb testing.TB, rtt time.Duration, o reserve.Options) (*reserve.Limiter, *redis.Client) {
	tb.Helper()
	s := redistest.New(tb)
	p := redistest.NewProxy(tb, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	tb.Cleanup(func() { c.Close() })
	o.KeyPrefix, o.Logger = redistest.Prefix(tb), quiet
	l, err := reserve.New(c, o)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = l.Close() })
	p.AddCommandLatency(tb, rtt/2)
	p.AddLatency(tb, rtt/2)
	return l, c
}
