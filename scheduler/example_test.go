package scheduler_test

import (
	"context"
	"fmt"
	"log"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/scheduler"
	"github.com/redis/go-redis/v9"
)

// A producer enqueues a thousand tasks at once, each to run at its own slot
// at 20 per second. The workers (package worker, with the same Pace) redeem
// these slots instead of reserving again.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "localhost:6379"})
	defer client.Close()

	// The same function as the workers' worker.Options.Pace.
	pace := func(t *asynq.Task) (reserve.Request, bool) {
		if t.Type() != "crawl" {
			return reserve.Request{}, false
		}
		return reserve.Single("crawl", reserve.Limit{Rate: 20, Burst: 5}, 1), true
	}
	enq, err := scheduler.NewEnqueuer(client, limiter, scheduler.Options{Pace: pace})
	if err != nil {
		log.Fatal(err)
	}
	var tasks []*asynq.Task
	for i := range 1000 {
		tasks = append(tasks, asynq.NewTask("crawl", fmt.Appendf(nil, "https://example.com/page/%d", i)))
	}
	// One round trip reserves all thousand slots; asynq then enqueues them.
	infos, err := enq.Enqueue(context.Background(), tasks)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("the last task runs at", infos[len(infos)-1].NextProcessAt)
}
