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

// rateWithin asserts rate is between lo and lo + increase x elapsed: the rate
// grows with the time that passed, which the test measures rather than
// bounds.
func rateWithin(t *testing.T, rate, lo, increase float64, since time.Time, what string) {
	t.Helper()
	hi := lo + increase*time.Since(since).Seconds() + 1e-9
	if rate < lo-1e-9 || rate > hi {
		t.Errorf("%s: rate %v, want within [%v, %v]", what, rate, lo, hi)
	}
}

// TestAdaptive: the learned rate starts at Start and grows by Increase per
// second; refusals reported by several Limiters at once cut it exactly once
// per episode, by Decrease; it never leaves [Min, Max].
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
	a := reserve.Adaptive{Start: 100, Min: 10, Max: 1000, Increase: 5, Episode: time.Minute}

	begin := time.Now()
	lim, err := ls[0].AdaptiveLimit(ctx, "api", a)
	require.NoError(t, err)
	assert.Equal(t, 1, lim.Burst, "default burst")
	rateWithin(t, lim.Rate, 100, 5, begin, "first read")

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
				_, cut, err := l.CutAdaptive(ctx, "api", a)
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
	// The cut took the rate at its moment (before.Rate plus growth since)
	// times 0.8; growth then resumes from the cut.
	rateWithin(t, after.Rate, before.Rate*0.8, 5*0.8+5, at, "after the cut")
	assert.Less(t, after.Rate, before.Rate, "a cut lowers the rate")

	// With episodes of 0, each report cuts, down to Min and no lower.
	a0 := a
	a0.Episode, a0.Increase = -1, 0 // -1: validate rejects it
	_, _, err = ls[0].CutAdaptive(ctx, "floor", a0)
	assert.ErrorIs(t, err, reserve.ErrInvalidOptions)
	a0.Episode = time.Millisecond
	a0.Increase = 1e-9
	rate := a0.Start
	for range 30 {
		time.Sleep(2 * time.Millisecond) // past the episode
		lim, cut, err := ls[0].CutAdaptive(ctx, "floor", a0)
		require.NoError(t, err)
		require.True(t, cut)
		rate = lim.Rate
		require.GreaterOrEqual(t, rate, a0.Min)
	}
	assert.InDelta(t, a0.Min, rate, 1e-6, "30 cuts of 0.8 from 100 end at Min")

	// Growth stops at Max.
	fast := reserve.Adaptive{Start: 100, Min: 10, Max: 150, Increase: 1e9}
	_, err = ls[0].AdaptiveLimit(ctx, "ceiling", fast)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	lim, err = ls[0].AdaptiveLimit(ctx, "ceiling", fast)
	require.NoError(t, err)
	assert.Equal(t, 150.0, lim.Rate)
}

// TestAdaptiveBadInput: bad settings, an empty key and a key of another
// type are refused with a matchable error, and nothing is written.
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
		"increase < 0":   {reserve.Adaptive{Start: 10, Min: 1, Max: 100, Increase: -1}, reserve.ErrInvalidRate},
		"burst negative": {reserve.Adaptive{Start: 10, Min: 1, Max: 100, Burst: -1}, reserve.ErrInvalidBurst},
	} {
		_, err := l.AdaptiveLimit(ctx, "k", tt.a)
		assert.ErrorIs(t, err, tt.want, name)
		_, _, err = l.CutAdaptive(ctx, "k", tt.a)
		assert.ErrorIs(t, err, tt.want, name)
	}
	_, err = l.AdaptiveLimit(ctx, "", good)
	assert.ErrorIs(t, err, reserve.ErrEmptyKey)
	n, err := s.Client.Exists(ctx, l.RedisKey("k")+":rate").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "bad input wrote the record")

	require.NoError(t, s.Client.HSet(ctx, l.RedisKey("h")+":rate", "f", "v").Err())
	_, err = l.AdaptiveLimit(ctx, "h", good)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, _, err = l.CutAdaptive(ctx, "h", good)
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
	a := reserve.Adaptive{Start: 40, Min: 1, Max: 100, Increase: 1e-9, Episode: time.Minute}
	_, _, err = l.CutAdaptive(ctx, "k", a)
	require.NoError(t, err)
	want, err := l.AdaptiveLimit(ctx, "k", a)
	require.NoError(t, err)
	assert.InDelta(t, 32, want.Rate, 1e-3)

	p.Stop(t)
	got, err := l.AdaptiveLimit(ctx, "k", a)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the last rate read")
	got, cut, err := l.CutAdaptive(ctx, "k", a)
	require.NoError(t, err)
	assert.False(t, cut)
	assert.Equal(t, want, got)
}
