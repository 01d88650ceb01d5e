package prommetrics_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/prommetrics"
	"github.com/pacer-go/pacer/reserve"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBandOnRedis: a Limiter on a real Redis labels each reservation with
// the band that set its slot: none when free at once, the window band of a
// policy once its quota is spent, a single Limit's "permits" once its burst
// is, and "(pause)" behind a pause.
func TestBandOnRedis(t *testing.T) {
	s := redistest.New(t)
	reg := prometheus.NewPedanticRegistry()
	m := prommetrics.New(reg, prommetrics.Options{KeyLabel: func(k string) string { return k }})
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Metrics: m, Logger: quiet, LeaseSpan: -1})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	reserveAndCancel := func(req reserve.Request) {
		t.Helper()
		r, err := l.ReserveN(ctx, req)
		require.NoError(t, err, "ReserveN(%q)", req.Key)
		t.Cleanup(func() { _ = r.Cancel(context.Background()) })
	}

	// Two requests an hour, in a window that began a second ago, and a
	// bucket that never binds: the third waits for the next window.
	quota := reserve.Request{Key: "quota", Cost: reserve.Cost{"requests": 1}, Policy: reserve.Policy{
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 1000, Burst: 10}},
		{Name: "hourly", Unit: "requests", Window: reserve.Window{N: 2, Length: time.Hour, Origin: time.Now().Add(-time.Second)}},
	}}
	for range 3 {
		reserveAndCancel(quota)
	}
	// One permit a second, burst 1: the second waits for the bucket.
	for range 2 {
		reserveAndCancel(reserve.Single("bucket", reserve.Limit{Rate: 1, Burst: 1}, 1))
	}
	// A paused key: its first slot is the pause's end.
	require.NoError(t, l.Pause(ctx, "paused", time.Minute))
	reserveAndCancel(reserve.Single("paused", reserve.Limit{Rate: 1000, Burst: 10}, 1))

	for _, tt := range []struct {
		key, band string
		want      float64
	}{
		{"quota", "none", 2}, {"quota", "hourly", 1},
		{"bucket", "none", 1}, {"bucket", reserve.PermitsUnit, 1},
		{"paused", "(pause)", 1},
	} {
		assert.Equal(t, tt.want, testutil.ToFloat64(m.ReservationsFor("redis", tt.band, tt.key)),
			"reservations_total{source=redis,band=%q,key=%q}", tt.band, tt.key)
		n, secs := m.WaitFor("redis", tt.band, tt.key)
		assert.Equal(t, uint64(tt.want), n, "wait_seconds{source=redis,band=%q,key=%q} count", tt.band, tt.key)
		if tt.band == "none" {
			assert.Zero(t, secs, "wait_seconds{band=none,key=%q}: free at once", tt.key)
		} else {
			assert.Positive(t, secs, "wait_seconds{band=%q,key=%q}", tt.band, tt.key)
		}
	}
	assert.Equal(t, 6.0, sum(t, reg, "pacer_reservations_total", nil))
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
