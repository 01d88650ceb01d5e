package pacehttp_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// setRate writes key's learned rate as rate, the level after a cut from
// it (adaptive.lua's record: r0 = wmax = rate, one cut, now): the curve
// stays at rate.
func setRate(t *testing.T, rdb redis.UniversalClient, l *reserve.Limiter, key string, rate float64) {
	t.Helper()
	now := time.Now().UnixMilli()
	rec := fmt.Sprintf("%g %g %d %d 1 %d 0 0", rate, rate, now, now, now/1000)
	require.NoError(t, rdb.Set(context.Background(), l.RedisKey(key)+":rate", rec, time.Hour).Err())
}

// queued returns how far the key's queue in Redis reaches beyond now: the
// time at which its bucket's balance is zero, less now (the balance at
// rate is -queued*rate while reservations are queued).
func queued(t *testing.T, l *reserve.Limiter, key string, rate float64) time.Duration {
	t.Helper()
	snap, err := l.Peek(context.Background(), reserve.Single(key, reserve.Limit{Rate: rate, Burst: 1}, 1))
	require.NoError(t, err)
	return time.Duration(max(0, -snap.Bands[0].Value/rate) * float64(time.Second))
}

// getAll has each Limiter's Transport, adaptive by a, GET url n times at
// once, and returns the function that waits for them all and returns their
// errors (those left are cancelled, and waited for, when the test ends).
func getAll(t *testing.T, ls []*reserve.Limiter, a adaptive.Config, url string, n int) (wait func() []error) {
	ctx, cancel := context.WithCancel(context.Background())
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, l := range ls {
		c := &http.Client{Transport: transport(t, l, pacehttp.Options{Adaptive: &a})}
		for range n {
			wg.Go(func() {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := c.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
	}
	return func() []error {
		wg.Wait()
		return errs
	}
}

// TestAdaptiveQueueFollowsRate (issue 24, item 1): the requests waiting on
// an adaptive key reserve their slots only when they come within the
// horizon, so the fleet's queue in Redis never reaches further (at 0.1/s,
// six requests of two processes would otherwise hold slots 50 s ahead),
// and when the learned rate rises they go at the new rate, not at the
// old one's spacing.
func TestAdaptiveQueueFollowsRate(t *testing.T) {
	ls, rdb := fleetOn(t, 2)
	srv := newServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	a := adaptive.Config{Start: 0.1, Min: 0.1, Max: 100, Double: 1000 * time.Hour, Steps: -1}
	wait := getAll(t, ls, a, srv.URL, 3)
	require.Eventually(t, func() bool { a, _ := srv.requests(); return len(a) >= 1 }, 10*time.Second, 5*time.Millisecond)
	horizon := 200 * time.Millisecond
	for range 20 {
		q := queued(t, ls[0], host, 0.1)
		require.LessOrEqual(t, q, horizon, "the key's queue reaches beyond the horizon")
		time.Sleep(25 * time.Millisecond)
	}
	arrived, _ := srv.requests()
	require.Len(t, arrived, 1, "one request at 0.1/s: the next slot is 10 s away")

	setRate(t, rdb, ls[0], host, 50)
	for _, err := range wait() {
		assert.NoError(t, err)
	}
	arrived, _ = srv.requests()
	assert.Len(t, arrived, 6)
	assert.LessOrEqual(t, queued(t, ls[0], host, 50), horizon)
}

// TestAdaptiveDeadline: on an adaptive key a request whose slot cannot
// come before its deadline fails at once with a *reserve.WaitTooLongError
// for the deadline, and reserves nothing: when the fleet's next slot lies
// beyond it, and when the requests waiting ahead of it in the process
// would take longer at the rate now.
func TestAdaptiveDeadline(t *testing.T) {
	ls := fleet(t, 1)
	srv := newServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	a := adaptive.Config{Start: 0.5, Min: 0.5, Max: 100, Double: 1000 * time.Hour, Steps: -1} // a slot every 2 s
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Adaptive: &a})}
	get := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	require.NoError(t, get(context.Background())) // takes the burst
	before := queued(t, ls[0], host, 0.5)

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := get(ctx)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "the next slot 2 s away, the deadline 1 s")
	assert.True(t, tooLong.Deadline)
	assert.LessOrEqual(t, queued(t, ls[0], host, 0.5), before, "a refusal reserved nothing")

	// Two requests wait (one in its turn, one behind it): a request due
	// within 3 s cannot have its slot before 2 s x 2.
	bg, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	for range 2 {
		wg.Go(func() { _ = get(bg) })
	}
	for pacehttp.Waiting(c.Transport.(*pacehttp.Transport), host) < 1 {
		time.Sleep(time.Millisecond) // the first holds the turn, the second waits behind it
	}
	ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err = get(ctx)
	require.ErrorAs(t, err, &tooLong, "two requests ahead at one per 2 s, the deadline 3 s")
	assert.True(t, tooLong.Deadline)
	assert.ErrorIs(t, ctx.Err(), nil, "it failed at once, not at its deadline")
}

// TestAdaptiveQueueFollowsCut (issue 24, item 1): when the learned rate is
// cut, the requests not yet sent go at the new rate's spacing: none holds
// a slot at the old spacing, and none that slept through the cut takes its
// new slot behind a queue reserved at the old rate. The key's queue in
// Redis then reaches at most the horizon plus one slot at the new rate
// (before, the 40 requests held slots reserved at 20/s, and each that woke
// after the cut took a fresh one 2 s behind them all: 80 s of queue).
func TestAdaptiveQueueFollowsCut(t *testing.T) {
	ls, rdb := fleetOn(t, 2)
	srv := newServer(t)
	host := strings.TrimPrefix(srv.URL, "http://")
	a := adaptive.Config{Start: 20, Min: 0.1, Max: 100, Double: 1000 * time.Hour, Steps: -1}
	wait := getAll(t, ls, a, srv.URL, 20)
	require.Eventually(t, func() bool { a, _ := srv.requests(); return len(a) >= 2 }, 10*time.Second, time.Millisecond)
	setRate(t, rdb, ls[0], host, 0.5)
	bound := 200*time.Millisecond + 2*time.Second // the horizon, and one slot at 0.5/s
	for range 40 {
		require.LessOrEqual(t, queued(t, ls[0], host, 0.5), bound, "the key's queue after the cut")
		time.Sleep(25 * time.Millisecond)
	}

	setRate(t, rdb, ls[0], host, 50)
	for _, err := range wait() {
		assert.NoError(t, err)
	}
	arrived, _ := srv.requests()
	assert.Len(t, arrived, 40)
}
