package pacertest_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/pacer-go/pacer/pacertest"
	"github.com/pacer-go/pacer/reserve"
)

// A test of code that paces its calls on a Limiter. The Limiter is
// reserve's own, on a Store instead of Redis, and the Recorder sees every
// slot it grants. In a test, run this inside synctest.Test(t, func(t
// *testing.T) { ... }): time is then the bubble's, and the Waits return at
// once, however long the schedule.
func Example() {
	rec := new(pacertest.Recorder)
	lim, err := pacertest.NewStore().NewLimiter(reserve.Options{Tracer: rec, MaxLateness: -1})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()

	// The code under test: five calls at 10/s.
	every := reserve.Every(100 * time.Millisecond)
	for range 5 {
		if err := lim.Wait(context.Background(), "api", every); err != nil {
			log.Fatal(err)
		}
	}

	slots := rec.Slots("api")
	fmt.Println(len(slots), pacertest.CheckWindow(slots, 1, 100*time.Millisecond))
	ms := time.Millisecond
	fmt.Println(pacertest.CheckSchedule(slots, pacertest.Schedule(slots[0], 0, 100*ms, 200*ms, 300*ms, 400*ms)))
	// Output:
	// 5 <nil>
	// <nil>
}

// A fake provider that accepts 2 requests a minute and answers the third
// 429, with the wait in Retry-After; its Client serves it in-process.
func ExampleProvider() {
	p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 2, Window: time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	client := p.Client()
	for range 3 {
		resp, err := client.Get("http://api.example/v1/items")
		if err != nil {
			log.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			fmt.Println(resp.Status, "Retry-After:", ra)
		} else {
			fmt.Println(resp.Status)
		}
	}
	fmt.Println(len(p.Accepted()), "accepted,", len(p.Rejected()), "refused")
	// Output:
	// 200 OK
	// 200 OK
	// 429 Too Many Requests Retry-After: 60
	// 2 accepted, 1 refused
}
