package admin_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSetBandsEnforced: a band set by name replaces the code's band of that
// name on the next reservation of every Limiter, exactly (the slots are
// spaced by it), and the code's other band stays in force; a second band
// set later keeps the first one stored; unset gives the code's policy back.
func TestSetBandsEnforced(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Clock: clk, ClientTime: true, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	// Each call takes one request and 50 tokens; both buckets hold one
	// call's worth, so calls are spaced by the slower band.
	code := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 10, Burst: 1}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 1000, Burst: 50}},
	}
	report(t, s, prefix, "api", code)
	ms := time.Millisecond
	spacing := func() []time.Duration {
		t.Helper()
		clk.Advance(time.Hour) // every bucket full again
		var out []time.Duration
		for range 3 {
			r, err := l.ReserveN(ctx, reserve.Request{Key: "api", Policy: code, Cost: reserve.Cost{"requests": 1, "tokens": 50}})
			require.NoError(t, err)
			out = append(out, r.Time().Sub(clk.Now()))
		}
		return out
	}
	assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, spacing(), "the code's: 10 requests/s")

	ch, err := a.SetBands(ctx, "api", reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 250, Burst: 50}}}, admin.SetOptions{}, "ops", "tokens lowered")
	require.NoError(t, err)
	assert.Equal(t, "", ch.Before)
	assert.Equal(t, "tokens: 250/s, burst 50", ch.After)
	assert.Equal(t, []time.Duration{0, 200 * ms, 400 * ms}, spacing(), "the stored 250 tokens/s, the code's requests")
	st, err := a.Status(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, "stored", st.Source)
	assert.Equal(t, "requests: 10/s, burst 1; tokens: 250/s, burst 50", st.Limit, "the stored band over the code's policy")

	ch, err = a.SetBands(ctx, "api", reserve.Policy{{Name: "requests", Limit: reserve.Limit{Rate: 20, Burst: 1}}}, admin.SetOptions{}, "ops", "requests raised")
	require.NoError(t, err)
	assert.Equal(t, "tokens: 250/s, burst 50", ch.Before)
	assert.Equal(t, "tokens: 250/s, burst 50; requests: 20/s, burst 1", ch.After, "the stored tokens kept")
	assert.Equal(t, []time.Duration{0, 200 * ms, 400 * ms}, spacing(), "tokens still at the stored 250/s, not the code's 1000/s")

	_, err = a.UnsetLimit(ctx, "api", "ops", "back")
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{0, 100 * ms, 200 * ms}, spacing(), "the code's again")
}

// TestSetBands: which bands SetBands takes, what it keeps and infers, and
// what it refuses without writing anything.
func TestSetBands(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	eight := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)
	code := reserve.Policy{
		{Name: "rpm", Unit: "requests", Window: reserve.Window{N: 500, Length: time.Minute}},
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 10000, Length: 24 * time.Hour, Origin: eight}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 500, Burst: 30000}},
	}
	report(t, s, prefix, "llm", code)
	stored := func() string {
		t.Helper()
		v, err := s.Client.Get(ctx, layout.Key(prefix, "llm")+":limit").Result()
		if err != nil {
			return ""
		}
		return v
	}
	set := func(pol reserve.Policy, opts admin.SetOptions) (admin.Change, error) {
		return a.SetBands(ctx, "llm", pol, opts, "ops", "test")
	}

	// A window band by name: its unit and origin are the code's band's.
	ch, err := set(reserve.Policy{{Name: "daily", Window: reserve.Window{N: 20000, Length: 24 * time.Hour}}}, admin.SetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "daily: 20000 per 24h0m0s from 1970-01-01T08:00:00Z (requests)", ch.After)
	assert.Equal(t, "enforce 1 daily requests w 20000 86400000000:28800000000", stored())

	// Unknown bands, units the code does not charge, invalid limits: refused,
	// nothing written.
	keys := snapshot(t, s, prefix)
	for _, tt := range []struct {
		name string
		pol  reserve.Policy
		opts admin.SetOptions
		want error
	}{
		{"unknown band", reserve.Policy{{Name: "tokenz", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{}, admin.ErrUnknownBand},
		{"added band on a unit not charged", reserve.Policy{{Name: "images", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{Add: true}, reserve.ErrInvalidPolicy},
		{"known band, unit not charged", reserve.Policy{{Name: "tokens", Unit: "points", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{}, reserve.ErrInvalidPolicy},
		{"rate 0", reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 0, Burst: 1}}}, admin.SetOptions{}, reserve.ErrInvalidRate},
		{"bad window", reserve.Policy{{Name: "rpm", Window: reserve.Window{N: 0.5, Length: time.Minute}}}, admin.SetOptions{}, reserve.ErrInvalidWindow},
		{"bucket and window", reserve.Policy{{Name: "rpm", Limit: reserve.Limit{Rate: 1, Burst: 1}, Window: reserve.Window{N: 1, Length: time.Minute}}}, admin.SetOptions{}, reserve.ErrInvalidPolicy},
		{"two bands of one name", reserve.Policy{{Name: "rpm", Limit: reserve.Limit{Rate: 1, Burst: 1}}, {Name: "rpm", Limit: reserve.Limit{Rate: 2, Burst: 1}}}, admin.SetOptions{}, reserve.ErrInvalidPolicy},
		{"no bands", nil, admin.SetOptions{}, reserve.ErrInvalidPolicy},
		{"shadow over enforced bands not named", reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{Shadow: true}, admin.ErrOtherMode},
	} {
		_, err := set(tt.pol, tt.opts)
		assert.ErrorIs(t, err, tt.want, tt.name)
		assert.Equal(t, keys, snapshot(t, s, prefix), "%s wrote something", tt.name)
	}
	_, err = a.SetBands(ctx, "", reserve.Limit{Rate: 1, Burst: 1}.Policy(), admin.SetOptions{}, "ops", "")
	assert.ErrorIs(t, err, reserve.ErrEmptyKey)

	// A new band with Add, on a unit the code charges: added after the
	// stored one.
	ch, err = set(reserve.Policy{{Name: "hourly", Unit: "requests", Window: reserve.Window{N: 2000, Length: time.Hour}}}, admin.SetOptions{Add: true})
	require.NoError(t, err)
	assert.Equal(t, "daily: 20000 per 24h0m0s from 1970-01-01T08:00:00Z (requests); hourly: 2000 per 1h0m0s (requests)", ch.After)
	st, err := a.Status(ctx, "llm")
	require.NoError(t, err)
	assert.Equal(t, "rpm: 500 per 1m0s (requests); daily: 20000 per 24h0m0s from 1970-01-01T08:00:00Z (requests); tokens: 500/s, burst 30000; hourly: 2000 per 1h0m0s (requests)", st.Limit)

	// An explicit epoch origin is kept; a bucket in place of a window too.
	ch, err = set(reserve.Policy{
		{Name: "daily", Window: reserve.Window{N: 20000, Length: 24 * time.Hour, Origin: time.Unix(0, 0)}},
		{Name: "rpm", Limit: reserve.Limit{Rate: 8, Burst: 8}},
	}, admin.SetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "daily: 20000 per 24h0m0s (requests); hourly: 2000 per 1h0m0s (requests); rpm: 8/s, burst 8 (requests)", ch.After)

	// Shadow mode over all the stored bands' names, or with Replace.
	_, err = set(reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{Shadow: true, Replace: true})
	require.NoError(t, err)
	assert.Equal(t, "shadow 1 tokens tokens b 1 1", stored(), "Replace: the stored limit is the one band")
	ch, err = set(reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 2, Burst: 1}}}, admin.SetOptions{})
	require.NoError(t, err, "the stored limit's only band, enforced now")
	assert.Equal(t, "tokens: 1/s, burst 1 (shadow)", ch.Before)
	assert.Equal(t, "tokens: 2/s, burst 1", ch.After)

	h, err := a.History(ctx, "llm")
	require.NoError(t, err)
	assert.Len(t, h, 5, "one entry per change made, none for the refused")
}

// TestSetBandsUnknownKey: a key no Limiter has used (no report, nothing
// stored, no state) takes any band; a key known only by its state takes
// the bands its state records, and others with Add.
func TestSetBandsUnknownKey(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	ch, err := a.SetBands(ctx, "new", reserve.Policy{{Name: "anything", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{}, "ops", "ahead of a deploy")
	require.NoError(t, err)
	assert.Equal(t, "anything: 1/s, burst 1", ch.After)

	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, FailClosed: true, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l)
	_, err = l.ReserveN(ctx, reserve.Request{Key: "used", Policy: reserve.Policy{{Name: "rps", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, Cost: reserve.Cost{"rps": 1}})
	require.NoError(t, err)
	require.NoError(t, s.Client.HDel(ctx, layout.Policies(prefix), "used").Err())
	_, err = a.SetBands(ctx, "used", reserve.Policy{{Name: "rpz", Limit: reserve.Limit{Rate: 1, Burst: 1}}}, admin.SetOptions{}, "ops", "typo")
	assert.ErrorIs(t, err, admin.ErrUnknownBand)
	_, err = a.SetBands(ctx, "used", reserve.Policy{{Name: "rps", Limit: reserve.Limit{Rate: 2, Burst: 1}}}, admin.SetOptions{}, "ops", "known by its state")
	require.NoError(t, err)
}

// report records pol as the policy the fleet's code passes for key, as a
// Limiter's heartbeat does.
func report(t *testing.T, s *redistest.Server, prefix, key string, pol reserve.Policy) {
	t.Helper()
	text, err := pol.MarshalText()
	require.NoError(t, err)
	ms := time.Now().UnixMilli()
	require.NoError(t, s.Client.HSet(context.Background(), layout.Policies(prefix), key, strconv.FormatInt(ms, 10)+" "+string(text)).Err())
}

// snapshot is every Redis key under prefix with its value (DUMP).
func snapshot(t *testing.T, s *redistest.Server, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	keys, err := s.Client.Keys(ctx, prefix+"*").Result()
	require.NoError(t, err)
	out := map[string]string{}
	for _, k := range keys {
		d, err := s.Client.Dump(ctx, k).Result()
		require.NoError(t, err)
		out[k] = d
	}
	return out
}
