package hold_test

import (
	"context"
	"fmt"
	"log"

	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// A job queue's worker claims each job's slot when the job runs: a slot
// that is now is handed over, a later one is kept for the job, which is
// rescheduled to it and redeems it when it runs again (what package worker
// does for asynq).
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	book, err := hold.New(limiter, hold.Options{})
	if err != nil {
		log.Fatal(err)
	}
	api := reserve.Single("api.example.com", reserve.Limit{Rate: 1, Burst: 1}, 1)

	ctx := context.Background()
	for _, job := range []string{"job-1", "job-2", "job-2"} {
		g, err := book.Claim(ctx, job, api, 0) // maxWait 0: hand over only a slot that is now
		if err != nil {
			log.Fatal(err)
		}
		if g.Kept {
			fmt.Printf("%s: rescheduled to its slot (%s)\n", job, g.Source)
		} else {
			fmt.Printf("%s: runs now (%s)\n", job, g.Source)
		}
	}
	// Output:
	// job-1: runs now (fresh)
	// job-2: rescheduled to its slot (fresh)
	// job-2: rescheduled to its slot (redeemed)
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
