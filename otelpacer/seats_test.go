package otelpacer_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeatMetrics: on an in-flight band of 1, a call that finds its seat
// free, a second that waits and is handed it when the first ends: the
// seats held and the waiters follow, the waits count under
// pacer.seats.got free and handoff, by the band and (KeyAttribute) the
// key; without KeyAttribute, no pacer.key.
func TestSeatMetrics(t *testing.T) {
	for _, keyed := range []bool{true, false} {
		t.Run(map[bool]string{true: "keyed", false: "unkeyed"}[keyed], func(t *testing.T) {
			s := redistest.New(t)
			var opts otelpacer.Options
			key := ""
			if keyed {
				opts.KeyAttribute, key = host, ",pacer.key=a.example"
			}
			g := newRig(t, opts)
			l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
			ctx := context.Background()
			req := reserve.Request{Key: "a.example/x", Policy: reserve.Policy{{Name: "open", Unit: "requests", InFlight: 1}},
				Cost: reserve.Cost{"requests": 1}}
			band := "pacer.band=open" + key

			r1, err := l.Acquire(ctx, req)
			require.NoError(t, err)
			assert.Equal(t, map[string]float64{band: 1}, g.values(t, "pacer.rate_limiting.seats.held"))
			got := make(chan *reserve.Reservation, 1)
			go func() {
				r, err := l.Acquire(ctx, req)
				assert.NoError(t, err)
				got <- r
			}()
			require.Eventually(t, func() bool {
				return g.values(t, "pacer.rate_limiting.seats.waiters")[band] == 1
			}, 10*time.Second, time.Millisecond)
			r1.Done()
			r2 := <-got
			require.NotNil(t, r2)
			assert.Equal(t, map[string]float64{band: 0}, g.values(t, "pacer.rate_limiting.seats.waiters"))
			assert.Equal(t, map[string]float64{band: 1}, g.values(t, "pacer.rate_limiting.seats.held"))
			assert.Equal(t, map[string]uint64{
				band + ",pacer.seats.got=free,pacer.source=redis":    1,
				band + ",pacer.seats.got=handoff,pacer.source=redis": 1,
			}, g.counts(t, "pacer.rate_limiting.seats.time_in_queue", otelpacer.WaitBuckets))
			r2.Done()
			assert.Equal(t, map[string]float64{band: 0}, g.values(t, "pacer.rate_limiting.seats.held"))
			assert.Equal(t, "{seat}", g.unit(t, "pacer.rate_limiting.seats.held"))
			assert.Equal(t, "{request}", g.unit(t, "pacer.rate_limiting.seats.waiters"))
			assert.Equal(t, "s", g.unit(t, "pacer.rate_limiting.seats.time_in_queue"))
		})
	}
}
