package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// refused is the recipe of ExampleLimiter_Pause_refused (docs/http.md,
// "Without pacehttp") after a 429 with the provider's wait: the refused
// call's cost goes back, the key pauses for the wait.
func refused(ctx context.Context, l *reserve.Limiter, r *reserve.Reservation, wait time.Duration) error {
	_ = r.Cancel(ctx)
	return l.Pause(ctx, r.Key(), wait)
}

// refusedPolicy: a window of 3 requests an hour and a bucket of 1/s.
var refusedPolicy = reserve.Policy{
	{Name: "requests", Window: reserve.Window{N: 3, Length: time.Hour, Origin: time.Unix(0, 0)}},
	{Name: "rps", Limit: reserve.Limit{Rate: 1, Burst: 1}},
}

// TestRefusedFleet: the 429 recipe on a fleet of two Limiters, on one
// clock: after one gets a 429, the other's next slot lies behind the pause
// exactly (its end, then a spacing of the bucket it emptied), then the
// bucket's spacing; the refused call's request went
// back to the hourly window (the window holds the calls made, not the
// refused one: without the Cancel it would hold 3 of 3 and the third call
// would wait for the next hour).
func TestRefusedFleet(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk := fakeclock.New(time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC))
	opts := reserve.Options{KeyPrefix: prefix, Clock: clk, ClientTime: true, Logger: quiet, FailClosed: true}
	l1, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, l1)
	l2, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, l2)
	req := reserve.Request{Key: "api", Policy: refusedPolicy, Cost: reserve.Cost{"requests": 1, "rps": 1}}

	r, err := l1.ReserveN(ctx, req)
	require.NoError(t, err)
	require.Zero(t, r.Delay())
	// The provider answers 429, wait 30 s.
	require.NoError(t, refused(ctx, l1, r, 30*time.Second))

	start := clk.Now()
	r2, err := l2.ReserveN(ctx, req)
	require.NoError(t, err)
	// The pause empties the bucket: the first slot comes one spacing (1 s)
	// after its end, set by the pause.
	assert.Equal(t, 31*time.Second, r2.Time().Sub(start), "the other process's next slot: behind the pause")
	assert.Equal(t, reserve.PauseBinding, r2.Band())
	r3, err := l1.ReserveN(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, 32*time.Second, r3.Time().Sub(start), "then the bucket's spacing, 1 s")
	r4, err := l2.ReserveN(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, 33*time.Second, r4.Time().Sub(start), "the third call this hour: the refused one gave its request back")

	snap, err := l2.Peek(ctx, req)
	require.NoError(t, err)
	require.Equal(t, "requests", snap.Bands[0].Name)
	assert.Equal(t, 3.0, snap.Bands[0].Value, "the window holds the 3 calls granted since, not the refused one")
}

// TestRefusedOutage: the 429 recipe while Redis is unavailable to the
// Limiter that got it: the pause holds its own calls at once (the local
// fallback), and reaches Redis when Redis answers, so another process's
// next slot lies after it too. The bounds are the pause less the time
// the test took, measured.
func TestRefusedOutage(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr()})
	defer c.Close()
	l1, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, FailAfter: 1, ProbeInterval: 20 * time.Millisecond,
		CallTimeout: 200 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l1)
	l2, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l2)
	req := reserve.Request{Key: "api", Policy: refusedPolicy, Cost: reserve.Cost{"requests": 1, "rps": 1}}

	r, err := l1.ReserveN(ctx, req)
	require.NoError(t, err)
	require.False(t, r.Local())

	p.Disable(t)
	const wait = time.Hour // well past the test's own time
	paused := time.Now()
	require.NoError(t, refused(ctx, l1, r, wait)) // the 429 came as Redis went away
	r1, err := l1.ReserveN(ctx, req)
	require.NoError(t, err)
	require.True(t, r1.Local(), "Redis is cut off from l1")
	assert.GreaterOrEqual(t, r1.Delay(), wait-time.Since(paused), "l1's own next call, paced locally, waits for the pause")
	require.NoError(t, r1.Cancel(ctx))

	p.Enable(t)
	backOnRedis(t, l1)
	snap, err := l2.Peek(ctx, req)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, snap.Paused, wait-time.Since(paused), "the pause reached Redis: the other process sees it")
	assert.LessOrEqual(t, snap.Paused, wait)
	r2, err := l2.ReserveN(ctx, req)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, r2.Delay(), wait-time.Since(paused), "the other process's next slot lies after the pause")
}
