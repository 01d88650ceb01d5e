package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// Every worker process runs this: all of them together never make more than
// 10 calls in any second, in a smooth stream. README's quick start is this
// example.
func Example() {
	// go-redis logs every failed dial (dozens of lines in a short outage);
	// this sends them to slog at Debug, below pacer's own lines.
	redis.SetLogger(reserve.RedisLogger(slog.Default()))
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	// RequireRedis: a wrong address fails here, naming it.
	limiter, err := reserve.New(rdb, reserve.Options{RequireRedis: true})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	// The provider allows 10 calls in any second: a burst of 1 and 9/s
	// keep every second at 10 or fewer (Burst + Rate*T).
	api, err := reserve.Sliding(10, time.Second)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	for _, url := range []string{"https://api.example.com/a", "https://api.example.com/b"} {
		// Sleeps until this process's slot in the fleet-wide queue.
		if err := limiter.Wait(ctx, "api.example.com", api); err != nil {
			log.Fatal(err)
		}
		fmt.Println("GET", url) // call the provider here
	}
}

// A process whose goroutines call Wait on one key at very high rates
// has go-redis keep a few connections open (docs/sizing.md, "One key at
// very high rates").
func ExampleNew_hotKey() {
	rdb := redis.NewClient(&redis.Options{
		Addr:         "localhost:6379",
		MinIdleConns: 20, // opened at once and kept open, within PoolSize
	})
	limiter, err := reserve.New(rdb, reserve.Options{RequireRedis: true})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	hot := reserve.Limit{Rate: 200_000, Burst: 1}
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 1000 {
				if err := limiter.Wait(context.Background(), "hot", hot); err != nil {
					log.Fatal(err)
				}
			}
		})
	}
	wg.Wait()
}

// embeddedRedis starts an embedded Redis (miniredis, in a child process that
// internal/launcher runs) so the examples run anywhere. Use a real Redis in
// production.
func embeddedRedis() (*redis.Client, func()) {
	mr, err := launcher.Start(context.Background(), "miniredis")
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.First})
	return rdb, func() { rdb.Close(); mr.Close() }
}

// Reserve returns the slot without sleeping: a job queue can reschedule the
// job to it instead of holding a worker.
func ExampleLimiter_Reserve() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	api := reserve.Limit{Rate: 2, Burst: 2}
	ctx := context.Background()
	for i := range 4 {
		r, err := limiter.Reserve(ctx, "api.example.com", api)
		if err != nil {
			log.Fatal(err)
		}
		// Round to hide the few microseconds the call itself took.
		fmt.Printf("job %d runs in %v\n", i, r.Delay().Round(100*time.Millisecond))
	}
	// Output:
	// job 0 runs in 0s
	// job 1 runs in 0s
	// job 2 runs in 500ms
	// job 3 runs in 1s
}

// TryReserveN takes permits only when they come soon enough.
func ExampleLimiter_TryReserveN() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	api := reserve.Limit{Rate: 1, Burst: 1}
	ctx := context.Background()
	for range 2 {
		_, err := limiter.TryReserveN(ctx, reserve.Single("api.example.com", api, 1), 100*time.Millisecond)
		var tooLong *reserve.WaitTooLongError
		switch {
		case errors.As(err, &tooLong):
			fmt.Println("busy, retry in about", tooLong.Wait.Round(time.Second))
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Println("reserved")
		}
	}
	// Output:
	// reserved
	// busy, retry in about 1s
}

// Allow takes a permit only if it is free now: a caller that drops or
// defers the call instead of waiting.
func ExampleLimiter_Allow() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	api := reserve.Limit{Rate: 1, Burst: 2}
	ctx := context.Background()
	for i := range 3 {
		ok, err := limiter.Allow(ctx, "api.example.com", api)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("call %d allowed: %v\n", i, ok)
	}
	// Output:
	// call 0 allowed: true
	// call 1 allowed: true
	// call 2 allowed: false
}

// When the provider answers 429 Too Many Requests with Retry-After, one
// worker pauses the key and every worker of the fleet waits.
func ExampleLimiter_Pause() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	api := reserve.Limit{Rate: 10, Burst: 5}
	ctx := context.Background()
	if err := limiter.Pause(ctx, "api.example.com", 30*time.Second); err != nil {
		log.Fatal(err)
	}
	st, err := limiter.Peek(ctx, reserve.Single("api.example.com", api, 1))
	if err != nil {
		log.Fatal(err)
	}
	// The pause ends with an empty bucket: the next call waits its 100 ms
	// after it. (The pause is rounded to whole seconds: some time passed
	// since the Pause.)
	fmt.Printf("paused for %v, the next call %v after it\n", st.Paused.Round(time.Second), st.Wait-st.Paused)
	// Output:
	// paused for 30s, the next call 100ms after it
}

// Without pacehttp, a call the provider refuses (429 with its wait) takes
// three calls of the library: give its cost back (the provider did not
// count it: a window band gets its units back while the window lasts),
// pause the key for the provider's wait (every process of the fleet waits
// behind it, its sleepers included; while Redis is unavailable the pause
// holds locally and reaches Redis when it answers), and reserve again: the
// slot comes after the pause.
func ExampleLimiter_Pause_refused() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	llm := reserve.Policy{ // 5,000 requests and 450,000 tokens a minute, replenished continuously
		{Name: "requests", Limit: reserve.Limit{Rate: 5_000.0 / 60, Burst: 25}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 7_500, Burst: 2_250}},
	}
	req := reserve.Request{Key: "api.openai.com", Policy: llm, Cost: reserve.Cost{"requests": 1, "tokens": 2_000}}
	ctx := context.Background()
	for attempt := 1; ; attempt++ {
		r, err := limiter.ReserveN(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		if err := r.Sleep(ctx); err != nil {
			log.Fatal(err)
		}
		status, wait := callProvider(attempt) // 429 and its retry-after-ms the first time
		if status == http.StatusTooManyRequests {
			_ = r.Cancel(ctx) // not counted by the provider: its cost goes back
			if err := limiter.Pause(ctx, req.Key, wait); err != nil {
				log.Fatal(err)
			}
			continue // the next slot comes after the pause, fleet-wide
		}
		fmt.Printf("attempt %d: %d\n", attempt, status)
		break
	}
	// Output:
	// attempt 1: 429, retry after 200ms
	// attempt 2: 200
}

// callProvider stands for the call: the provider refuses the first with
// 429 and a wait of 200 ms.
func callProvider(attempt int) (status int, wait time.Duration) {
	if attempt == 1 {
		fmt.Println("attempt 1: 429, retry after 200ms")
		return http.StatusTooManyRequests, 200 * time.Millisecond
	}
	return http.StatusOK, 0
}

// An API allows 5,000 requests an hour and 2 million tokens a day. Each
// call reserves a request and its estimated tokens in one slot, on both
// quotas at once, and settles the tokens the response reports.
func ExampleLimiter_ReserveN() {
	rdb, stop := embeddedRedis()
	defer stop()
	// README:begin
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	// Quotas that reset at instants the caller knows: 5,000 requests each
	// hour on the hour, 2 million tokens each UTC day. (A quota per minute
	// replenished continuously is a bucket band: see package profile.)
	quota := reserve.Policy{
		{Name: "requests", Window: reserve.Window{N: 5_000, Length: time.Hour}},
		{Name: "tokens", Window: reserve.Window{N: 2_000_000, Calendar: reserve.Day}},
	}

	ctx := context.Background()
	r, err := limiter.ReserveN(ctx, reserve.Request{Key: "api.example.com", Policy: quota, Cost: reserve.Cost{"requests": 1, "tokens": 2_000}})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Sleep(ctx); err != nil {
		log.Fatal(err)
	}
	used := 1_200.0 // call the provider here; the response says what it used
	if err := r.Settle(ctx, reserve.Cost{"tokens": used}); err != nil {
		log.Fatal(err)
	}
	snap, err := limiter.Peek(ctx, reserve.Request{Key: "api.example.com", Policy: quota, Cost: reserve.Cost{"requests": 1, "tokens": 1}})
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range snap.Bands {
		fmt.Printf("%s: %g used in this window\n", b.Name, b.Value)
	}
	// Output:
	// requests: 1 used in this window
	// tokens: 1200 used in this window
}

// Fair share: one provider quota for many customers. A request names its
// tenant (and weight) and its lane; a backlog of one tenant, or of the Batch
// lane, no longer holds the others' calls behind it.
func ExampleRequest_fair() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	ctx := context.Background()
	// README:begin
	api := reserve.Limit{Rate: 50, Burst: 1}
	// A customer's backfill: the Batch lane, weight 1.
	backfill := reserve.Request{Key: "api.example.com", Policy: api.Policy(), Cost: reserve.Permits(1),
		Tenant: "acme", Lane: reserve.Batch}
	for range 100 {
		go func() {
			if err := limiter.WaitN(ctx, backfill); err == nil {
				// call the API for the backfill
			}
		}()
	}
	// A live user's call: the Urgent lane, booked before the backfill's.
	live := reserve.Request{Key: "api.example.com", Policy: api.Policy(), Cost: reserve.Permits(1),
		Tenant: "globex", Lane: reserve.Urgent, Weight: 2}
	r, err := limiter.ReserveN(ctx, live)
	if err != nil {
		log.Fatal(err)
	}
	// README:end
	// A fair request is booked at most one slot interval (20 ms) ahead.
	fmt.Println(r.Delay() <= 20*time.Millisecond)
	// Output: true
}

// A calendar window: a quota per day that resets at midnight in the
// provider's time zone (Gemini's requests per day, at midnight Pacific
// time), exact on the days of 23 and 25 hours. Week and Month work alike.
func ExampleWindow_calendar() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	pacific, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		log.Fatal(err)
	}
	gemini := reserve.Policy{
		{Name: "rpm", Unit: "requests", Limit: reserve.Limit{Rate: 1, Burst: 60}},
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 1500, Calendar: reserve.Day, Location: pacific}},
	}
	fmt.Println(gemini)

	ctx := context.Background()
	call := reserve.Request{Key: "gemini", Policy: gemini, Cost: reserve.Cost{"requests": 1}}
	if _, err := limiter.TryReserveN(ctx, call, 0); err != nil {
		log.Fatal(err)
	}
	snap, err := limiter.Peek(ctx, call)
	if err != nil {
		log.Fatal(err)
	}
	for _, b := range snap.Bands {
		if b.Name == "daily" {
			fmt.Printf("daily: %g used today, Pacific time\n", b.Value)
		}
	}
	// Output:
	// rpm: 1/s, burst 60 (requests); daily: 1500/day America/Los_Angeles (requests)
	// daily: 1 used today, Pacific time
}

// Acquire takes a call's seats on an in-flight band (here at most 2 calls
// open at once to the provider, fleet-wide, beside 20 calls a second),
// waiting in the key's queue for a seat when none is free, and Done gives
// them back when the call ends: the next caller waiting, in any process,
// gets them at once.
func ExampleLimiter_Acquire() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	policy := reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 2},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: 20, Burst: 1}},
	}
	req := reserve.Request{Key: "api.example.com", Policy: policy, Cost: reserve.Cost{"requests": 1}}
	ctx := context.Background()
	var open []*reserve.Reservation
	for range 2 {
		r, err := limiter.Acquire(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		open = append(open, r) // the call is made here; it ends with Done
	}
	// Both seats are taken: a third call waits for one, or with no wait
	// allowed is refused, naming the band.
	_, err = limiter.TryReserveN(ctx, req, 0)
	var tooLong *reserve.WaitTooLongError
	if errors.As(err, &tooLong) {
		fmt.Println("no seat free on band", tooLong.Band)
	}
	open[0].Done() // a call ended
	r, err := limiter.Acquire(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a seat after a call ended:", r.Cost())
	r.Done()
	open[1].Done()
	// Output:
	// no seat free on band open
	// a seat after a call ended: map[requests:1]
}
