package prommetrics_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/prommetrics"
	"github.com/pacer-go/pacer/reserve"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// A Limiter's measurements, on Prometheus's default registry (served by
// promhttp.Handler in a real program).
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	m := prommetrics.New(prometheus.DefaultRegisterer, prommetrics.Options{})
	limiter, err := reserve.New(rdb, reserve.Options{Metrics: m})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	ctx := context.Background()
	for range 3 {
		// Reserve, not Wait: a Wait that wakes late takes a fresh slot, a
		// reservation more, and this output must not depend on the
		// machine's load.
		r, err := limiter.Reserve(ctx, "api.example.com", reserve.Limit{Rate: 100, Burst: 3})
		if err != nil {
			log.Fatal(err)
		}
		_ = r.Delay()
	}
	families, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "pacer_reservations_total" {
			for _, c := range f.GetMetric() {
				// Labels come sorted by name: band, then source.
				l := c.GetLabel()
				fmt.Printf("%s{%s=%q,%s=%q} %g\n", f.GetName(), l[0].GetName(), l[0].GetValue(), l[1].GetName(), l[1].GetValue(), c.GetCounter().GetValue())
			}
		}
	}
	// The three slots were free at once: no band bound them ("none").

	// Output:
	// pacer_reservations_total{band="none",source="redis"} 3
}

// embeddedRedis starts an embedded Redis (miniredis, in a child process that
// internal/launcher runs) so the example runs anywhere. Use a real Redis in
// production.
func embeddedRedis() (*redis.Client, func()) {
	mr, err := launcher.Start(context.Background(), "miniredis")
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.First})
	return rdb, func() { rdb.Close(); mr.Close() }
}
