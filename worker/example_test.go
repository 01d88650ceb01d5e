package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
	"github.com/redis/go-redis/v9"
)

// Every asynq server of the fleet runs this: together they call the
// provider at most 20 times per second (bursts of 5), however many servers
// and workers there are. README's asynq section is this example.
func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	// README:begin
	// worker.Config: rate-limit reschedules are not failures, not errors.
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"},
		worker.Config(asynq.Config{Concurrency: 50}))
	pacer, err := worker.New(limiter, worker.Options{
		Pace: worker.PerType(map[string]reserve.Limit{"crawl": {Rate: 20, Burst: 5}}),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := asynq.NewServeMux()
	mux.Use(pacer.Middleware)
	// README:end
	mux.HandleFunc("crawl", func(ctx context.Context, t *asynq.Task) error {
		// The middleware has slept until this task's slot, or rescheduled it.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, string(t.Payload()), nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		// A 429 pauses "crawl" on every server and reschedules this task.
		if err := worker.TooManyRequests(ctx, resp.StatusCode, resp.Header.Get("Retry-After")); err != nil {
			return err
		}
		fmt.Println(resp.Status) // handle the response here
		return nil
	})
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

// Pace can map a task to any key and policy: here each tenant named in the
// payload has its own quota at the provider, requests per second and tokens
// per minute, and the task's payload says how many tokens it will use.
func ExampleOptions_perTenant() {
	policy := reserve.Policy{
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 2, Burst: 5}},
		{Name: "tpm", Unit: "tokens", Limit: reserve.Limit{Rate: 20000.0 / 60, Burst: 20000}},
	}
	pace := func(t *asynq.Task) (reserve.Request, bool) {
		if t.Type() != "report" {
			return reserve.Request{}, false // not paced
		}
		var p struct {
			Tenant string `json:"tenant"`
			Tokens int    `json:"tokens"`
		}
		if err := json.Unmarshal(t.Payload(), &p); err != nil || p.Tenant == "" {
			return reserve.Request{}, false
		}
		return reserve.Request{
			Key:    "reports:" + p.Tenant,
			Policy: policy,
			Cost:   reserve.Cost{"requests": 1, "tokens": float64(p.Tokens)},
		}, true
	}
	r, ok := pace(asynq.NewTask("report", []byte(`{"tenant":"acme","tokens":1200}`)))
	fmt.Println(r.Key, r.Cost["tokens"], ok)
	// Output:
	// reports:acme 1200 true
}

// An LLM provider allows 8 streams open at once and 20,000 tokens a
// minute: the "complete" tasks of every server run their handlers at most 8
// at a time, fleet-wide, each holding its seat until its handler returns.
func ExampleOptions_inFlight() {
	policy := reserve.Policy{
		{Name: "streams", Unit: "requests", InFlight: 8}, // at most 8 open at once
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 5, Burst: 5}},
		{Name: "tpm", Unit: "tokens", Limit: reserve.Limit{Rate: 20000.0 / 60, Burst: 20000}},
	}
	pace := func(t *asynq.Task) (reserve.Request, bool) {
		if t.Type() != "complete" {
			return reserve.Request{}, false // not paced
		}
		return reserve.Request{Key: "llm", Policy: policy, Cost: reserve.Cost{"requests": 1, "tokens": 1500}}, true
	}
	opts := worker.Options{Pace: pace}
	r, ok := opts.Pace(asynq.NewTask("complete", nil))
	fmt.Println(r.Key, r.Policy[0].InFlight, ok)
	// Output:
	// llm 8 true
}
