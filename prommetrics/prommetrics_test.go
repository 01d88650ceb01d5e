package prommetrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/prommetrics"
	"github.com/pacer-go/pacer/reserve"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestMetricsOnRedis drives a Limiter on a real Redis and reads the metrics
// back.
func TestMetricsOnRedis(t *testing.T) {
	s := redistest.New(t)
	reg := prometheus.NewPedanticRegistry()
	m := prommetrics.New(reg, prommetrics.Options{KeyLabel: func(k string) string { return strings.SplitN(k, "/", 2)[0] }})
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Metrics: m, Logger: quiet})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1000, Burst: 5}
	for range 3 {
		_, err := l.ReserveN(ctx, reserve.Single("a.example/x", lim, 2))
		require.NoError(t, err)
	}
	require.NoError(t, l.Pause(ctx, "a.example/y", time.Second))

	assert.Equal(t, 3.0, sum(t, reg, "pacer_reservations_total", map[string]string{"source": "redis", "key": "a.example"}), "over all bands")
	assert.Equal(t, 6.0, testutil.ToFloat64(m.UnitsFor("redis", "a.example", reserve.PermitsUnit)))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.PausesFor("a.example")))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
	n, err := testutil.GatherAndCount(reg, "pacer_redis_call_duration_seconds")
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, 2, "reserve and pause (and heartbeat) call series")
}

// TestKeyValuesBound (Options.MaxKeyValues): the first MaxKeyValues key
// label values have series of their own, every later one counts as
// OtherKeyValue, and every grant and pause counts. By default the bound is
// DefaultMaxKeyValues; -1 lifts it; below -1, New panics.
// boundCases are the bounds TestKeyValuesBound and TestTenantValuesBound
// try: max, the option's value; values, how many distinct values come; own,
// how many get series of their own.
var boundCases = []struct {
	name             string
	max, values, own int
}{
	{"bound 3", 3, 10, 3},
	{"the default", 0, prommetrics.DefaultMaxKeyValues + 50, prommetrics.DefaultMaxKeyValues},
	{"no bound", -1, prommetrics.DefaultMaxKeyValues + 50, prommetrics.DefaultMaxKeyValues + 50},
}

func TestKeyValuesBound(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m := prommetrics.New(reg, prommetrics.Options{KeyLabel: func(k string) string { return k }, MaxKeyValues: tc.max})
			grants := 0
			for i := range tc.values {
				k := fmt.Sprintf("k%d", i)
				for range i%3 + 1 {
					m.Granted(reserve.Grant{Key: k, Units: []string{"tokens"}, Amounts: []float64{2}, Source: reserve.SourceRedis, Wait: time.Millisecond})
					grants++
				}
				m.Paused(k, time.Second)
			}
			for i := range tc.values {
				k := fmt.Sprintf("k%d", i)
				want := float64(i%3 + 1)
				if i >= tc.own {
					continue
				}
				assert.Equal(t, want, sum(t, reg, "pacer_reservations_total", map[string]string{"key": k}), k)
			}
			other := 0.0
			for i := tc.own; i < tc.values; i++ {
				other += float64(i%3 + 1)
			}
			assert.Equal(t, other, sum(t, reg, "pacer_reservations_total", map[string]string{"key": prommetrics.OtherKeyValue}))
			assert.Equal(t, float64(grants), sum(t, reg, "pacer_reservations_total", nil))
			assert.Equal(t, float64(grants), sum(t, reg, "pacer_wait_seconds", nil))
			assert.Equal(t, float64(tc.values), sum(t, reg, "pacer_pauses_total", nil))
			n, err := testutil.GatherAndCount(reg, "pacer_pauses_total")
			require.NoError(t, err)
			assert.Equal(t, min(tc.own+1, tc.values), n, "pauses series")
		})
	}
	assert.PanicsWithValue(t, "prommetrics: Options.MaxKeyValues -2 (want -1 for no bound, 0 for the default, or more)", func() {
		prommetrics.New(prometheus.NewRegistry(), prommetrics.Options{MaxKeyValues: -2})
	})
}

// TestTenantValuesBound: the first MaxTenantValues tenant label values get
// series of their own, later ones are counted as OtherKeyValue, and every
// measurement still counts; below -1, New panics.
func TestTenantValuesBound(t *testing.T) {
	for _, tc := range boundCases {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewPedanticRegistry()
			m := prommetrics.New(reg, prommetrics.Options{TenantLabel: func(tn string) string { return tn }, MaxTenantValues: tc.max})
			for i := range tc.values {
				m.Deferred("k", fmt.Sprintf("t%d", i), reserve.Normal)
				m.Turn("k", fmt.Sprintf("t%d", i), reserve.Normal, time.Millisecond)
			}
			for i := range tc.own {
				assert.Equal(t, 1.0, sum(t, reg, "pacer_fair_deferred_total", map[string]string{"tenant": fmt.Sprintf("t%d", i)}))
			}
			assert.Equal(t, float64(tc.values-tc.own), sum(t, reg, "pacer_fair_deferred_total", map[string]string{"tenant": prommetrics.OtherKeyValue}))
			assert.Equal(t, float64(tc.values), sum(t, reg, "pacer_fair_deferred_total", nil))
			assert.Equal(t, float64(tc.values), sum(t, reg, "pacer_fair_turn_seconds", nil))
			n, err := testutil.GatherAndCount(reg, "pacer_fair_turn_seconds")
			require.NoError(t, err)
			assert.Equal(t, min(tc.own+1, tc.values), n, "turn series")
		})
	}
	assert.PanicsWithValue(t, "prommetrics: Options.MaxTenantValues -2 (want -1 for no bound, 0 for the default, or more)", func() {
		prommetrics.New(prometheus.NewRegistry(), prommetrics.Options{MaxTenantValues: -2})
	})
}

// TestMetricsFallback: a dead Redis shows as errors, one switch to local,
// the active gauge at 1, and local reservations.
func TestMetricsFallback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1})
	defer c.Close()

	reg := prometheus.NewPedanticRegistry()
	m := prommetrics.New(reg, prommetrics.Options{})
	l, err := reserve.New(c, reserve.Options{FleetSize: 1, Metrics: m, Logger: quiet, ProbeInterval: time.Hour})
	require.NoError(t, err)
	defer l.Close()
	for range 5 {
		// Reserve, not Wait: a sleeper that wakes late on a loaded machine
		// takes a second slot, and the count below is exact.
		_, err := l.Reserve(context.Background(), "k", reserve.Limit{Rate: 1e6, Burst: 1})
		require.NoError(t, err)
	}
	assert.Equal(t, 1.0, testutil.ToFloat64(m.FallbackActive()))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.SwitchesTo("local")))
	assert.Equal(t, 5.0, sum(t, reg, "pacer_reservations_total", map[string]string{"source": "local"}), "over all bands")
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// TestFairMetrics: fair requests' turns and deferrals, per lane, and per
// tenant for the tenants TenantLabel names. Exact counts: three requests of
// "acme" at 1/s, burst 1: the first booked at once, the second within its
// horizon (one slot interval, 1 s), the third deferred until then.
func TestFairMetrics(t *testing.T) {
	s := redistest.New(t)
	reg := prometheus.NewPedanticRegistry()
	m := prommetrics.New(reg, prommetrics.Options{TenantLabel: func(tn string) string {
		if tn == "acme" {
			return tn
		}
		return "other"
	}})
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Metrics: m, Logger: quiet})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	req := reserve.Single("fair", reserve.Limit{Rate: 1, Burst: 1}, 1)
	req.Tenant, req.Lane = "acme", reserve.Urgent
	for range 2 {
		_, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
	}
	// The third waits for its turn: give up on it once it was deferred.
	tctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l.ReserveN(tctx, req); done <- err }()
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.DeferredFor("urgent", "acme")) >= 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)

	n, err := testutil.GatherAndCount(reg, "pacer_fair_turn_seconds")
	require.NoError(t, err)
	assert.Equal(t, 1, n, "one series: urgent, acme")
	assert.Equal(t, uint64(2), m.TurnCount("urgent", "acme"))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// sum adds up the values of the counters and gauges (or the sample counts
// of the histograms) of family name whose labels include want.
func sum(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	require.NoError(t, err)
	total := 0.0
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue series
				}
			}
			if h := m.GetHistogram(); h != nil {
				total += float64(h.GetSampleCount())
			} else if g := m.GetGauge(); g != nil {
				total += g.GetValue()
			} else {
				total += m.GetCounter().GetValue()
			}
		}
	}
	return total
}

// TestGranted: each grant counts under its source and binding band, with
// its wait; a leased slot under source "lease", a pause's under band
// "(pause)"; Reserved, which knows no band, counts under "none".
func TestGranted(t *testing.T) {
	permits := []string{reserve.PermitsUnit}
	one := []float64{1}
	tests := []struct {
		name         string
		grant        reserve.Grant
		source, band string
	}{
		{"free at once", reserve.Grant{Key: "a/x", Source: reserve.SourceRedis}, "redis", "none"},
		{"bound by a band", reserve.Grant{Key: "a/x", Wait: 2 * time.Second, Source: reserve.SourceRedis, Band: "day"}, "redis", "day"},
		{"bound by a pause", reserve.Grant{Key: "a/x", Wait: time.Minute, Source: reserve.SourceRedis, Band: reserve.PauseBinding}, "redis", "(pause)"},
		{"local", reserve.Grant{Key: "a/x", Wait: time.Second, Source: reserve.SourceLocal, Band: "second"}, "local", "second"},
		{"leased", reserve.Grant{Key: "a/x", Wait: time.Millisecond, Source: reserve.SourceLease, Band: reserve.PermitsUnit}, "lease", reserve.PermitsUnit},
	}
	for _, keyed := range []bool{false, true} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("keyed=%v/%s", keyed, tt.name), func(t *testing.T) {
				reg := prometheus.NewPedanticRegistry()
				opts := prommetrics.Options{}
				want := map[string]string{"source": tt.source, "band": tt.band}
				if keyed {
					opts.KeyLabel = func(k string) string { return strings.SplitN(k, "/", 2)[0] }
					want["key"] = "a"
				}
				m := prommetrics.New(reg, opts)
				g := tt.grant
				g.Units, g.Amounts = permits, one
				m.Granted(g)

				assert.Equal(t, 1.0, testutil.ToFloat64(m.ReservationsFor(tt.source, tt.band, g.Key)), "Granted(%+v): reservations_total%v", g, want)
				n, s := m.WaitFor(tt.source, tt.band, g.Key)
				assert.Equal(t, uint64(1), n, "Granted(%+v): wait_seconds%v count", g, want)
				assert.InDelta(t, g.Wait.Seconds(), s, 1e-9, "Granted(%+v): wait_seconds%v sum", g, want)
				assert.Equal(t, 1.0, testutil.ToFloat64(m.UnitsFor(tt.source, g.Key, reserve.PermitsUnit)))
				// One series each: nothing was counted under another source or band.
				for _, name := range []string{"pacer_reservations_total", "pacer_wait_seconds"} {
					c, err := testutil.GatherAndCount(reg, name)
					require.NoError(t, err)
					assert.Equal(t, 1, c, "%s series", name)
					assert.Equal(t, 1.0, sum(t, reg, name, want), "%s%v", name, want)
				}
				problems, err := testutil.GatherAndLint(reg)
				require.NoError(t, err)
				assert.Empty(t, problems)
			})
		}
	}
}

// TestReservedNoBand: Reserved, for callers that call it directly, counts
// under band "none".
func TestReservedNoBand(t *testing.T) {
	m := prommetrics.New(nil, prommetrics.Options{})
	m.Reserved("k", []string{reserve.PermitsUnit}, []float64{3}, time.Second, false)
	m.Reserved("k", []string{reserve.PermitsUnit}, []float64{1}, 0, true)
	assert.Equal(t, 1.0, testutil.ToFloat64(m.ReservationsFor("redis", "none", "k")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.ReservationsFor("local", "none", "k")))
	assert.Equal(t, 3.0, testutil.ToFloat64(m.UnitsFor("redis", "k", reserve.PermitsUnit)))
	n, s := m.WaitFor("redis", "none", "k")
	assert.Equal(t, uint64(1), n)
	assert.Equal(t, 1.0, s)
}
