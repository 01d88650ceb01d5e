package admin_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The provider lowered its limit: an operator stores the lower one for the
// key, and every Limiter of the fleet enforces it from its next
// reservation, in place of the one in its code.
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	if err := limiter.Wait(ctx, "api.example.com", reserve.Limit{Rate: 10, Burst: 5}); err != nil {
		log.Fatal(err)
	}

	ops, err := admin.New(rdb, admin.Options{})
	if err != nil {
		log.Fatal(err)
	}
	change, err := ops.SetLimit(ctx, "api.example.com", reserve.Limit{Rate: 5, Burst: 1}.Policy(), false, "ops", "provider ticket 123")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s by %s: %q\n", change.Op, change.Who, change.After)
	st, err := ops.Status(ctx, "api.example.com")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("in force: %s (%s)\n", st.Limit, st.Source)
	// Output:
	// set by ops: "permits: 5/s, burst 1"
	// in force: permits: 5/s, burst 1 (stored)
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
