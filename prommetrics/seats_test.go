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

// TestSeatMetrics: on an in-flight band of 1, a call that finds its seat
// free, a second that waits for it and is handed it when the first ends:
// seats held and waiters follow, the waits count under got "free" and
// "handoff", labelled by the band and the key (KeyLabel).
func TestSeatMetrics(t *testing.T) {
	s := redistest.New(t)
	reg := prometheus.NewPedanticRegistry()
	m := prommetrics.New(reg, prommetrics.Options{KeyLabel: func(k string) string { return "host" }})
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Metrics: m, Logger: quiet})
	require.NoError(t, err)
	defer l.Close()
	ctx := context.Background()
	req := reserve.Request{Key: "example.com", Policy: reserve.Policy{{Name: "open", Unit: "requests", InFlight: 1}},
		Cost: reserve.Cost{"requests": 1}}
	band := map[string]string{"band": "open", "key": "host"}

	r1, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, 1.0, sum(t, reg, "pacer_seats_held", band))
	got := make(chan *reserve.Reservation, 1)
	go func() {
		r, err := l.Acquire(ctx, req)
		assert.NoError(t, err)
		got <- r
	}()
	require.Eventually(t, func() bool { return sum(t, reg, "pacer_seats_waiters", band) == 1 }, 10*time.Second, time.Millisecond)
	r1.Done()
	r2 := <-got
	require.NotNil(t, r2)
	assert.Equal(t, 0.0, sum(t, reg, "pacer_seats_waiters", band))
	assert.Equal(t, 1.0, sum(t, reg, "pacer_seats_held", band), "the second holds the seat the first gave back")
	assert.Equal(t, 1.0, sum(t, reg, "pacer_seats_wait_seconds", map[string]string{"band": "open", "key": "host", "source": "redis", "got": "free"}))
	assert.Equal(t, 1.0, sum(t, reg, "pacer_seats_wait_seconds", map[string]string{"band": "open", "key": "host", "source": "redis", "got": "handoff"}))
	r2.Done()
	assert.Equal(t, 0.0, sum(t, reg, "pacer_seats_held", band))

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	assert.Empty(t, problems)
}
