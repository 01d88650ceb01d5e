package adaptive_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// A provider that publishes no limit: every process paces its calls at the
// fleet's learned rate, and the first 429 of an episode cuts it for all.
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	rate, err := adaptive.New(limiter, "api.example.com", adaptive.Config{Start: 50, Min: 1, Max: 1000, Double: time.Hour})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	lim, err := rate.Limit(ctx) // before each call: the rate to pace it at
	if err != nil {
		log.Fatal(err)
	}
	if err := limiter.Wait(ctx, rate.Key(), lim); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("paced at %.0f/s\n", lim.Rate)

	// The provider answered 429: the first report of the episode cuts.
	after, cut, err := rate.Cut(ctx, lim.Rate)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("cut %v: %.0f/s\n", cut, after.Rate)
	// Output:
	// paced at 50/s
	// cut true: 37/s
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
