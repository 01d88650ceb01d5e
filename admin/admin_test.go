package admin_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStoredLimit: a limit an operator stores replaces the code's on the
// very next reservation of every Limiter, exactly (the slots are spaced by
// it), and unset gives the code's back; each change is in the history with
// who, why, before and after; the status shows where the limit in force
// comes from.
func TestStoredLimit(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Clock: clk, ClientTime: true, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix, History: 2})
	require.NoError(t, err)

	code := reserve.Limit{Rate: 10, Burst: 1}
	slots := func(n int) []time.Duration {
		t.Helper()
		var out []time.Duration
		for range n {
			r, err := l.Reserve(ctx, "api", code)
			require.NoError(t, err)
			out = append(out, r.Time().Sub(clk.Now()))
		}
		return out
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, slots(3), "the code's 10/s")

	ch, err := a.SetLimit(ctx, "api", reserve.Limit{Rate: 100, Burst: 1}.Policy(), false, "ops", "provider raised us")
	require.NoError(t, err)
	assert.Equal(t, "set", ch.Op)
	assert.Equal(t, "", ch.Before)
	assert.Equal(t, "permits: 100/s, burst 1", ch.After)
	// The queue of the code's limit stays; new slots come 10 ms apart.
	assert.Equal(t, []time.Duration{210 * ms, 220 * ms}, slots(2), "the stored 100/s from the next reservation")
	st, err := a.Status(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, "stored", st.Source)
	assert.Equal(t, "permits: 100/s, burst 1", st.Limit)
	assert.Equal(t, "permits: 100/s, burst 1", st.StoredLimit)
	assert.True(t, st.HasState)
	assert.EqualValues(t, 5, st.Reservations)

	_, err = a.UnsetLimit(ctx, "api", "ops", "back to normal")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{320 * ms}, slots(1), "the code's 10/s again")
	_, err = a.UnsetLimit(ctx, "api", "ops", "twice")
	assert.ErrorIs(t, err, admin.ErrNotStored)

	h, err := a.History(ctx, "api")
	require.NoError(t, err)
	require.Len(t, h, 2, "History: 2 keeps the last two")
	assert.Equal(t, "unset", h[0].Op)
	assert.Equal(t, "back to normal", h[0].Reason)
	assert.Equal(t, "permits: 100/s, burst 1", h[0].Before)
	assert.Equal(t, "", h[0].After)
	assert.Equal(t, "set", h[1].Op)
	assert.Equal(t, "ops", h[1].Who)
	assert.False(t, h[0].At.Before(h[1].At))
}

// TestShadowLimit: a stored limit in shadow mode delays nobody; the
// figures count what it would have done, exactly.
func TestShadowLimit(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Clock: clk, ClientTime: true, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	code := reserve.Limit{Rate: 1000, Burst: 10}
	_, err = a.SetLimit(ctx, "api", reserve.Limit{Rate: 1, Burst: 1}.Policy(), true, "ops", "try 1/s")
	require.NoError(t, err)
	for range 5 {
		r, err := l.Reserve(ctx, "api", code)
		require.NoError(t, err)
		assert.Zero(t, r.Delay(), "shadow mode delays nobody")
	}
	st, err := a.Status(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, "unknown", st.Source, "no Limiter has reported the code's limit yet (heartbeat)")
	assert.True(t, st.Shadow)
	require.NotNil(t, st.ShadowFigures)
	f := *st.ShadowFigures
	assert.EqualValues(t, 5, f.Calls)
	assert.EqualValues(t, 4, f.Delayed, "1/s, burst 1: all but the first would have waited")
	assert.Equal(t, 4*time.Second, f.MaxWait, "the fifth, 4 s")
	assert.Equal(t, 2*time.Second, f.MeanWait, "(0+1+2+3+4)/5 s")

	// A shadow key of another type refuses the reservation, and nothing is
	// reserved.
	before, err := s.Client.Get(ctx, l.RedisKey("api")).Result()
	require.NoError(t, err)
	require.NoError(t, s.Client.Del(ctx, l.RedisKey("api")+":shadow").Err())
	require.NoError(t, s.Client.HSet(ctx, l.RedisKey("api")+":shadow", "f", "v").Err())
	_, err = l.Reserve(ctx, "api", code)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, err = a.Status(ctx, "api")
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	after, err := s.Client.Get(ctx, l.RedisKey("api")).Result()
	require.NoError(t, err)
	assert.Equal(t, before, after, "a refused call reserved nothing")
	require.NoError(t, s.Client.Del(ctx, l.RedisKey("api")+":shadow").Err())

	// A new limit starts its figures from zero.
	_, err = a.SetLimit(ctx, "api", reserve.Limit{Rate: 2, Burst: 1}.Policy(), true, "ops", "try 2/s")
	require.NoError(t, err)
	st, err = a.Status(ctx, "api")
	require.NoError(t, err)
	assert.EqualValues(t, 0, st.ShadowFigures.Calls)
}

// TestAdminStatus: the code's policy as a Limiter reports it, the queue,
// a pause and a resume, the fleet, keys by pattern, JSON.
func TestAdminStatus(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	_, err = a.Status(ctx, "nobody")
	assert.ErrorIs(t, err, admin.ErrUnknownKey)
	assert.ErrorIs(t, a.Pause(ctx, "nobody", time.Second, "ops", ""), admin.ErrUnknownKey)

	code := reserve.Limit{Rate: 10, Burst: 1}
	for range 11 { // the last slot 1 s away, 10 queued behind the first
		_, err := l.Reserve(ctx, "api{1}", code)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx, "api{1}")
		return err == nil && st.Source == "code"
	}, 10*time.Second, 10*time.Millisecond, "the heartbeat reports the code's policy")
	st, err := a.Status(ctx, "api{1}")
	require.NoError(t, err)
	assert.Equal(t, "permits: 10/s, burst 1", st.Limit)
	require.Len(t, st.Bands, 1)
	b := st.Bands[0]
	assert.True(t, b.Bucket)
	assert.InDelta(t, 1.0, b.LastSlot.Seconds(), 0.2+time.Since(st.Now).Seconds(), "the last slot, 1 s after the first")
	assert.InDelta(t, 10, b.Queued, 2, "10 permits queued")

	require.NoError(t, a.Pause(ctx, "api{1}", time.Hour, "ops", "incident"))
	st, err = a.Status(ctx, "api{1}")
	require.NoError(t, err)
	assert.Greater(t, st.Paused, 59*time.Minute)
	assert.LessOrEqual(t, st.Bands[0].Queued, 11.0, "the pause's hour is not a queue of 36,000 permits")
	require.NoError(t, a.Resume(ctx, "api{1}", "ops", "over"))
	assert.ErrorIs(t, a.Resume(ctx, "api{1}", "ops", "twice"), admin.ErrNotPaused)
	st, err = a.Status(ctx, "api{1}")
	require.NoError(t, err)
	assert.Zero(t, st.Paused)
	// Resumed: the bucket is empty at the last slot granted, not after the hour.
	r, err := l.Reserve(ctx, "api{1}", code)
	require.NoError(t, err)
	assert.Less(t, r.Delay(), 2*time.Second)
	h, err := a.History(ctx, "api{1}")
	require.NoError(t, err)
	require.Len(t, h, 2)
	assert.Equal(t, "resume", h[0].Op)
	assert.Equal(t, "pause 1h0m0s", h[1].Op)
	assert.Equal(t, "incident", h[1].Reason)

	_, err = l.Reserve(ctx, "other", code)
	require.NoError(t, err)
	keys, err := a.Keys(ctx, "api*")
	require.NoError(t, err)
	assert.Equal(t, []string{"api{1}"}, keys)
	keys, err = a.Keys(ctx, "api{*")
	require.NoError(t, err)
	assert.Equal(t, []string{"api{1}"}, keys, "a brace in the pattern matches the key's")
	keys, err = a.Keys(ctx, "")
	require.NoError(t, err)
	assert.Equal(t, []string{"api{1}", "other"}, keys)

	// A limit on units the fleet's code does not charge would limit nothing.
	_, err = a.SetLimit(ctx, "api{1}", reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, false, "ops", "")
	assert.ErrorIs(t, err, reserve.ErrInvalidPolicy)

	fleet, err := a.Fleet(ctx)
	require.NoError(t, err)
	require.Len(t, fleet, 1)
	assert.Equal(t, "redis", fleet[0].Mode)

	js, err := json.Marshal(st)
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(js), `"source":"code"`), string(js))
}

// TestAdminBadInput: bad policies, empty keys and keys of another type are
// refused with matchable errors, and change nothing.
func TestAdminBadInput(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	_, err = admin.New(s.Client, admin.Options{KeyPrefix: "x{"})
	assert.ErrorIs(t, err, reserve.ErrInvalidOptions)

	_, err = a.SetLimit(ctx, "k", reserve.Limit{Rate: 0, Burst: 1}.Policy(), false, "", "")
	assert.ErrorIs(t, err, reserve.ErrInvalidRate)
	_, err = a.SetLimit(ctx, "k", reserve.Limit{Rate: 1, Burst: 0}.Policy(), false, "", "")
	assert.ErrorIs(t, err, reserve.ErrInvalidBurst)
	_, err = a.SetLimit(ctx, "k", nil, false, "", "")
	assert.ErrorIs(t, err, reserve.ErrInvalidPolicy)
	_, err = a.SetLimit(ctx, "", reserve.Limit{Rate: 1, Burst: 1}.Policy(), false, "", "")
	assert.ErrorIs(t, err, reserve.ErrEmptyKey)
	assert.ErrorIs(t, a.Pause(ctx, "k", -time.Second, "", ""), reserve.ErrInvalidDuration)

	require.NoError(t, s.Client.HSet(ctx, prefix+"{h}", "f", "v").Err())
	_, err = a.SetLimit(ctx, "h", reserve.Limit{Rate: 1, Burst: 1}.Policy(), false, "", "")
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, err = a.Status(ctx, "h")
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	n, err := s.Client.Exists(ctx, prefix+"{k}:limit", prefix+"{k}:history", prefix+"{h}:limit", prefix+"{h}:history").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "bad input wrote something")
}

func TestPolicyString(t *testing.T) {
	pol := reserve.Policy{
		{Name: "requests", Window: reserve.Window{N: 500, Length: time.Minute}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 500, Burst: 30000}},
		{Name: "huge", Unit: "points", Limit: reserve.Limit{Rate: 1e300, Burst: 1}},
	}
	assert.Equal(t, "requests: 500 per 1m0s; tokens: 500/s, burst 30000; huge: 1e+300/s, burst 1 (points)", pol.String())
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func closeLimiter(t *testing.T, l *reserve.Limiter) {
	t.Cleanup(func() { _ = l.Close() })
}

// TestAdminBinding: Status names what makes a call wait now and when it
// frees: nothing, then the day's quota (full, its window ending in a
// day), then a pause longer than that; a key with only a queue names its
// bucket.
func TestAdminBinding(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	pol := reserve.Policy{
		{Name: "rps", Unit: reserve.PermitsUnit, Limit: reserve.Limit{Rate: 1, Burst: 2}},
		{Name: "daily", Unit: reserve.PermitsUnit, Window: reserve.Window{N: 3, Length: 24 * time.Hour, Origin: time.Now()}},
	}
	req := reserve.Request{Key: "api", Policy: pol, Cost: reserve.Permits(1)}
	status := func() admin.KeyStatus {
		t.Helper()
		st, err := a.Status(ctx, "api")
		require.NoError(t, err)
		return st
	}
	_, err = l.ReserveN(ctx, req)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return status().Source == "code" }, 10*time.Second, 10*time.Millisecond,
		"the heartbeat reports the code's policy")
	st := status()
	assert.Equal(t, "", st.Binding, "one of a burst of 2 used")
	assert.Zero(t, st.Frees)

	for range 2 {
		_, err = l.ReserveN(ctx, req)
		require.NoError(t, err)
	}
	st = status()
	assert.Equal(t, "daily", st.Binding, "the day's 3 are used")
	assert.InDelta(t, (24 * time.Hour).Seconds(), st.Frees.Seconds(), 60, "the window ends a day after its origin")
	require.Len(t, st.Bands, 2)
	assert.Greater(t, st.Bands[0].Wait, time.Duration(0), "the bucket has a queue too")
	assert.Less(t, st.Bands[0].Wait, st.Frees)

	require.NoError(t, a.Pause(ctx, "api", 48*time.Hour, "ops", "provider down"))
	st = status()
	assert.Equal(t, reserve.PauseBinding, st.Binding)
	assert.Equal(t, st.Paused, st.Frees)

	// Only a bucket: its queue binds.
	for range 4 {
		_, err := l.Reserve(ctx, "queue", reserve.Limit{Rate: 1, Burst: 1})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx, "queue")
		return err == nil && st.Source == "code"
	}, 10*time.Second, 10*time.Millisecond)
	st, err = a.Status(ctx, "queue")
	require.NoError(t, err)
	assert.Equal(t, reserve.PermitsUnit, st.Binding)
	assert.Equal(t, st.Bands[0].Wait, st.Frees)
	assert.Greater(t, st.Frees, time.Duration(0), "3 queued behind the first at 1/s")

	js, err := json.Marshal(st)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"binding":"permits"`)
}
