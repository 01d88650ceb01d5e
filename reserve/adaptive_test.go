package reserve_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rateWithin asserts lo <= rate <= hi (with rounding).
func rateWithin(t *testing.T, rate, lo, hi float64, what string) {
	t.Helper()
	if rate < lo-1e-9 || rate > hi+1e-9 {
		t.Errorf("%s: rate %v, want within [%v, %v]", what, rate, lo, hi)
	}
}

// TestAdaptive: the learned rate starts at Start and doubles every Double
// until the first cut; refusals reported by several Limiters at once cut it
// exactly once per episode, by Decrease; it then climbs back on CUBIC's
// curve; it never leaves [Min, Max]. The rate grows with the
// time that passes, which the test measures rather than bounds.
func TestAdaptive(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	var ls []*reserve.Limiter
	for range 3 {
		l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
		require.NoError(t, err)
		closeLimiter(t, l)
		ls = append(ls, l)
	}
	a := reserve.Adaptive{Start: 100, Min: 10, Max: 1000, Double: time.Hour, Recover: time.Hour, Episode: time.Minute}
	slowStart := func(since time.Time) float64 { return math.Pow(2, time.Since(since).Hours()) }

	begin := time.Now()
	lim, err := ls[0].AdaptiveLimit(ctx, "api", a)
	require.NoError(t, err)
	assert.Equal(t, 1, lim.Burst, "default burst")
	rateWithin(t, lim.Rate, 100, 100*slowStart(begin), "first read")

	// 3 Limiters x 10 goroutines report 429s at once: one cut.
	var (
		mu   sync.Mutex
		cuts int
		wg   sync.WaitGroup
	)
	before, err := ls[1].AdaptiveLimit(ctx, "api", a)
	require.NoError(t, err)
	at := time.Now()
	for _, l := range ls {
		for range 10 {
			wg.Go(func() {
				_, cut, err := l.CutAdaptive(ctx, "api", a, 0)
				assert.NoError(t, err)
				if cut {
					mu.Lock()
					cuts++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	assert.Equal(t, 1, cuts, "30 reports within one episode cut the rate once")
	after, err := ls[2].AdaptiveLimit(ctx, "api", a)
	require.NoError(t, err)
	// The cut took the rate at its moment (before.Rate plus slow start's
	// growth since) times 0.8; CUBIC's curve then climbs from there, at
	// first by 3 x (what the cut took) per Recover.
	w := before.Rate * slowStart(at)
	rateWithin(t, after.Rate, before.Rate*0.8, w*0.8+3*0.2*w*time.Since(at).Hours(), "after the cut")

	// With short episodes, each report cuts, down to Min and no lower.
	a0 := a
	a0.Episode = -1
	_, _, err = ls[0].CutAdaptive(ctx, "floor", a0, 0)
	assert.ErrorIs(t, err, reserve.ErrInvalidOptions)
	a0.Episode = time.Millisecond
	rate := a0.Start
	for range 30 {
		time.Sleep(2 * time.Millisecond) // past the episode
		lim, cut, err := ls[0].CutAdaptive(ctx, "floor", a0, 0)
		require.NoError(t, err)
		require.True(t, cut)
		rate = lim.Rate
		require.GreaterOrEqual(t, rate, a0.Min)
	}
	assert.InDelta(t, a0.Min, rate, 1e-6, "30 cuts of 0.8 from 100 end at Min")

	// Slow start stops at Max.
	fast := reserve.Adaptive{Start: 100, Min: 10, Max: 1000, Double: time.Millisecond}
	_, err = ls[0].AdaptiveLimit(ctx, "ceiling", fast)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	lim, err = ls[0].AdaptiveLimit(ctx, "ceiling", fast)
	require.NoError(t, err)
	assert.Equal(t, 1000.0, lim.Rate)

	// After a cut at 100, CUBIC's probing beyond 100 (fast here: Recover is
	// 1 ms) is held to twice the calls of the last whole second: reads
	// count as calls.
	probe := reserve.Adaptive{Start: 100, Min: 10, Max: 1000, Recover: time.Millisecond, Episode: time.Hour}
	_, cut, err := ls[0].CutAdaptive(ctx, "probe", probe, 0)
	require.NoError(t, err)
	require.True(t, cut)
	demand := func(calls int) float64 {
		t.Helper()
		nextSecond()
		for range calls {
			_, err := ls[0].AdaptiveLimit(ctx, "probe", probe)
			require.NoError(t, err)
		}
		nextSecond()
		lim, err := ls[0].PeekAdaptive(ctx, "probe", probe)
		require.NoError(t, err)
		return lim.Rate
	}
	assert.Equal(t, 100.0, demand(0), "no demand: the rate cut from")
	assert.Equal(t, 100.0, demand(30), "30 calls: the rate cut from, above 2 x 30")
	assert.Equal(t, 600.0, demand(300), "300 calls: 2 x 300")
	assert.Equal(t, 1000.0, demand(800), "800 calls: Max")

	// A call refused after it waited was sent at the rate it was reserved
	// at: the cut starts from that rate when it is the lower.
	slow := reserve.Adaptive{Start: 100, Min: 10, Max: 1000, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Minute}
	lim, cut, err = ls[0].CutAdaptive(ctx, "paced", slow, 50)
	require.NoError(t, err)
	require.True(t, cut)
	assert.InDelta(t, 40, lim.Rate, 1e-3, "0.8 x the rate the call was paced at")
	lim, cut, err = ls[0].CutAdaptive(ctx, "paced-above", slow, 500)
	require.NoError(t, err)
	require.True(t, cut)
	assert.InDelta(t, 80, lim.Rate, 1e-3, "0.8 x the rate now, the lower")
}

// nextSecond sleeps to just after the next whole second (Redis counts the
// demand in whole seconds of its clock, the same machine's).
func nextSecond() {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now))
}

// TestAdaptiveBadInput: bad settings, an empty key and a key of another
// type are refused with a matchable error, and nothing is written (nor by
// PeekAdaptive).
func TestAdaptiveBadInput(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	good := reserve.Adaptive{Start: 10, Min: 1, Max: 100}
	for name, tt := range map[string]struct {
		a    reserve.Adaptive
		want error
	}{
		"min zero":       {reserve.Adaptive{Start: 10, Max: 100}, reserve.ErrInvalidRate},
		"start below":    {reserve.Adaptive{Start: 1, Min: 2, Max: 100}, reserve.ErrInvalidRate},
		"max below":      {reserve.Adaptive{Start: 10, Min: 1, Max: 5}, reserve.ErrInvalidRate},
		"NaN":            {reserve.Adaptive{Start: math.NaN(), Min: 1, Max: 100}, reserve.ErrInvalidRate},
		"infinite":       {reserve.Adaptive{Start: 10, Min: 1, Max: math.Inf(1)}, reserve.ErrInvalidRate},
		"decrease 1":     {reserve.Adaptive{Start: 10, Min: 1, Max: 100, Decrease: 1}, reserve.ErrInvalidRate},
		"recover 1 µs":   {reserve.Adaptive{Start: 10, Min: 1, Max: 100, Recover: time.Microsecond}, reserve.ErrInvalidOptions},
		"burst negative": {reserve.Adaptive{Start: 10, Min: 1, Max: 100, Burst: -1}, reserve.ErrInvalidBurst},
		"double 1 µs":    {reserve.Adaptive{Start: 10, Min: 1, Max: 100, Double: time.Microsecond}, reserve.ErrInvalidOptions},
	} {
		_, err := l.AdaptiveLimit(ctx, "k", tt.a)
		assert.ErrorIs(t, err, tt.want, name)
		_, _, err = l.CutAdaptive(ctx, "k", tt.a, 0)
		assert.ErrorIs(t, err, tt.want, name)
	}
	for _, paced := range []float64{-1, math.NaN(), math.Inf(1)} {
		_, _, err = l.CutAdaptive(ctx, "k", good, paced)
		assert.ErrorIs(t, err, reserve.ErrInvalidRate, "paced %v", paced)
	}
	_, err = l.AdaptiveLimit(ctx, "", good)
	assert.ErrorIs(t, err, reserve.ErrEmptyKey)
	peek, err := l.PeekAdaptive(ctx, "k", good)
	require.NoError(t, err)
	assert.Equal(t, reserve.Limit{Rate: 10, Burst: 1}, peek, "a key never read: Start")
	n, err := s.Client.Exists(ctx, l.RedisKey("k")+":rate").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "bad input (or a peek) wrote the record")

	require.NoError(t, s.Client.HSet(ctx, l.RedisKey("h")+":rate", "f", "v").Err())
	_, err = l.AdaptiveLimit(ctx, "h", good)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, _, err = l.CutAdaptive(ctx, "h", good, 0)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	typ, err := s.Client.Type(ctx, l.RedisKey("h")+":rate").Result()
	require.NoError(t, err)
	assert.Equal(t, "hash", typ, "the key of another type was changed")
}

// TestAdaptiveRedisDown: without Redis, AdaptiveLimit gives the last rate
// it read and CutAdaptive cuts nothing, without an error (the reservation
// made with the rate is paced locally).
func TestAdaptiveRedisDown(t *testing.T) {
	p := redistest.NewProcess(t)
	ctx := context.Background()
	l, err := reserve.New(redis.NewClient(&redis.Options{Addr: p.Addr}), reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet, FailAfter: 1})
	require.NoError(t, err)
	closeLimiter(t, l)
	a := reserve.Adaptive{Start: 40, Min: 1, Max: 100, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Minute}
	_, _, err = l.CutAdaptive(ctx, "k", a, 0)
	require.NoError(t, err)
	want, err := l.AdaptiveLimit(ctx, "k", a)
	require.NoError(t, err)
	assert.InDelta(t, 32, want.Rate, 1e-3)

	p.Stop(t)
	got, err := l.AdaptiveLimit(ctx, "k", a)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the last rate read")
	got, cut, err := l.CutAdaptive(ctx, "k", a, 0)
	require.NoError(t, err)
	assert.False(t, cut)
	assert.Equal(t, want, got)
}
