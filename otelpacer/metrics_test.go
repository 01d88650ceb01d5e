package otelpacer_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// host maps a key "host/path" to its host: the KeyAttribute of the tests.
func host(key string) string { return strings.SplitN(key, "/", 2)[0] }

// TestGrantMetrics: reservations on a real Redis show in requests,
// time_in_queue and units by source, binding band and key attribute; a
// pause in pauses; the calls in redis.call.duration by operation. A
// bucket of 5 permits refilling at one per 100 s: the first two
// reservations of 2 are free at once (band "none"), the third waits for
// the permits band, whatever the machine's speed.
func TestGrantMetrics(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{KeyAttribute: host})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 0.01, Burst: 5}
	for range 3 {
		_, err := l.ReserveN(ctx, reserve.Single("a.example/x", lim, 2))
		require.NoError(t, err)
	}
	require.NoError(t, l.Pause(ctx, "a.example/y", time.Second))

	free := "pacer.band=none,pacer.key=a.example,pacer.source=redis"
	bound := "pacer.band=permits,pacer.key=a.example,pacer.source=redis"
	assert.Equal(t, map[string]float64{free: 2, bound: 1}, g.values(t, "pacer.rate_limiting.requests"))
	assert.Equal(t, map[string]uint64{free: 2, bound: 1}, g.counts(t, "pacer.rate_limiting.request.time_in_queue", otelpacer.WaitBuckets))
	assert.Equal(t, map[string]float64{"pacer.key=a.example,pacer.source=redis,pacer.unit=permits": 6}, g.values(t, "pacer.rate_limiting.units"))
	assert.Equal(t, map[string]float64{"pacer.key=a.example": 1}, g.values(t, "pacer.rate_limiting.pauses"))
	calls := g.counts(t, "pacer.redis.call.duration", otelpacer.CallBuckets)
	assert.Equal(t, uint64(3), calls["pacer.redis.operation=reserve"], "calls: %v", calls)
	assert.Equal(t, uint64(1), calls["pacer.redis.operation=pause"], "calls: %v", calls)
	for a := range calls {
		assert.NotContains(t, a, "error.type", "no call failed")
	}
	for name, unit := range map[string]string{
		"pacer.rate_limiting.requests":              "{request}",
		"pacer.rate_limiting.request.time_in_queue": "s",
		"pacer.rate_limiting.units":                 "{unit}",
		"pacer.rate_limiting.pauses":                "{pause}",
		"pacer.redis.call.duration":                 "s",
		"pacer.redis.evictable":                     "",
	} {
		assert.Equal(t, unit, g.unit(t, name), "%s's unit", name)
	}
	assert.Equal(t, map[string]float64{"": 0}, g.values(t, "pacer.redis.evictable"), "a server that does not evict")
}

// TestNoKeyAttribute: without Options.KeyAttribute no metric carries a
// key.
func TestNoKeyAttribute(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	ctx := context.Background()
	for _, key := range []string{"a", "b", "c"} {
		require.NoError(t, l.Wait(ctx, key, reserve.Limit{Rate: 1, Burst: 1}))
		require.NoError(t, l.Pause(ctx, key, time.Millisecond))
	}
	assert.Equal(t, map[string]float64{"pacer.band=none,pacer.source=redis": 3 + g.moved(t)}, g.values(t, "pacer.rate_limiting.requests"))
	assert.Equal(t, map[string]float64{"pacer.source=redis,pacer.unit=permits": 3 + g.moved(t)}, g.values(t, "pacer.rate_limiting.units"))
	assert.Equal(t, map[string]float64{"": 3}, g.values(t, "pacer.rate_limiting.pauses"))
	assert.Equal(t, map[string]float64{"": 0}, g.values(t, "pacer.rate_limiting.queued_requests"))
}

// TestFallbackMetrics: Redis stopped, the Limiter paces locally: the
// active gauge at 1, one switch to local, local reservations, the failed
// calls' error.type; Redis back, a switch to redis and the gauge at 0.
func TestFallbackMetrics(t *testing.T) {
	s := redistest.NewProcess(t)
	g := newRig(t, otelpacer.Options{})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{ProbeInterval: 20 * time.Millisecond, CallTimeout: time.Second})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1e6, Burst: 1}
	_, err := l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	s.Stop(t)
	// Reserve, not Wait: a sleeper that wakes late on a loaded machine
	// takes a second slot. Every call is granted, by the fallback.
	local := 0
	for g.values(t, "pacer.rate_limiting.fallback.active")[""] != 1 {
		_, err := l.Reserve(ctx, "k", lim)
		require.NoError(t, err)
		local++
		require.Less(t, local, 1000, "no switch to local")
	}
	assert.Equal(t, map[string]float64{"pacer.fallback.to=local": 1}, g.values(t, "pacer.rate_limiting.fallback.switches"))
	sources := map[string]float64{}
	for a, n := range g.values(t, "pacer.rate_limiting.requests") {
		sources[a[strings.Index(a, "pacer.source="):]] += n
	}
	assert.Equal(t, map[string]float64{"pacer.source=redis": 1, "pacer.source=local": float64(local)}, sources)
	for a := range g.counts(t, "pacer.redis.call.duration", otelpacer.CallBuckets) {
		if strings.Contains(a, "error.type") {
			assert.Contains(t, a, "error.type=unavailable,", "a stopped server refuses connections")
		}
	}

	s.Restart(t)
	require.Eventually(t, func() bool { return g.values(t, "pacer.rate_limiting.fallback.active")[""] == 0 },
		30*time.Second, 10*time.Millisecond, "no switch back to redis")
	assert.Equal(t, map[string]float64{"pacer.fallback.to=local": 1, "pacer.fallback.to=redis": 1}, g.values(t, "pacer.rate_limiting.fallback.switches"))
	assert.Equal(t, "{limiter}", g.unit(t, "pacer.rate_limiting.fallback.active"))
	assert.Equal(t, "{switch}", g.unit(t, "pacer.rate_limiting.fallback.switches"))
}

// TestErrorType: error.type takes a few values, whatever the error's text.
func TestErrorType(t *testing.T) {
	reply := func(msg string) error { return fmt.Errorf("script: %w", &replyError{msg}) }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("call: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("call: %w", context.Canceled), "canceled"},
		{refused, "unavailable"},
		{redis.ErrClosed, "unavailable"}, // the client closed: no answer
		{reply("LOADING Redis is loading the dataset in memory"), "LOADING"},
		{reply("PACER_WRONGTYPE the key holds something else"), "PACER_WRONGTYPE"},
		{reply("weird lower-case reply"), "other"},
	} {
		if got := otelpacer.ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// replyError is a Redis error reply (go-redis's redis.Error).
type replyError struct{ msg string }

func (e *replyError) Error() string { return e.msg }
func (e *replyError) RedisError()   {}

// TestFairMetrics: fair requests' turns and deferrals, per lane, and per
// tenant for the tenants TenantAttribute names. Three requests of "acme"
// at 1/s, burst 1: the first booked at once, the second within its
// horizon (one slot interval, 1 s), the third deferred until then.
func TestFairMetrics(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{TenantAttribute: func(tn string) string {
		if tn == "acme" {
			return tn
		}
		return "other"
	}})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	ctx := context.Background()
	req := reserve.Single("fair", reserve.Limit{Rate: 1, Burst: 1}, 1)
	req.Tenant, req.Lane = "acme", reserve.Urgent
	for range 2 {
		_, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
	}
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l.ReserveN(tctx, req); done <- err }()
	acme := "pacer.lane=urgent,pacer.tenant=acme"
	require.Eventually(t, func() bool { return g.values(t, "pacer.rate_limiting.fair.deferred")[acme] >= 1 },
		10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	assert.Equal(t, []string{acme}, keys(g.values(t, "pacer.rate_limiting.fair.deferred")))
	assert.Equal(t, map[string]uint64{acme: 2}, g.counts(t, "pacer.rate_limiting.fair.turn", otelpacer.WaitBuckets))
}

// TestEvictable: a Limiter on a server that may evict pacer's keys sets
// the gauge to 1.
func TestEvictable(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	require.NoError(t, s.Client.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	g := newRig(t, otelpacer.Options{})
	assert.Equal(t, map[string]float64{"": 0}, g.values(t, "pacer.redis.evictable"))
	g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	require.Eventually(t, func() bool { return g.values(t, "pacer.redis.evictable")[""] == 1 }, 10*time.Second, time.Millisecond)
}

// TestAdaptiveRate: a Telemetry as adaptive.Config.Observer
// shows each learned rate read or cut, per key attribute. Start is Max:
// the rate read is exactly 100, the cut exactly 75.
func TestAdaptiveRate(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{KeyAttribute: host})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	ctx := context.Background()
	rate, err := adaptive.New(l, "api.example/v1", adaptive.Config{Start: 100, Min: 10, Max: 100, Observer: g.tel})
	require.NoError(t, err)
	_, err = rate.Limit(ctx)
	require.NoError(t, err)
	assert.Equal(t, map[string]float64{"pacer.key=api.example": 100}, g.values(t, "pacer.adaptive.rate"))
	_, cut, err := rate.Cut(ctx, 100)
	require.NoError(t, err)
	require.True(t, cut)
	assert.Equal(t, map[string]float64{"pacer.key=api.example": 75}, g.values(t, "pacer.adaptive.rate"))
	assert.Equal(t, "{request}/s", g.unit(t, "pacer.adaptive.rate"))
}
