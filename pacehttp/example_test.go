package pacehttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// Every process's http.Client paces its calls to each host on the fleet's
// shared schedule, and obeys what the provider answers.
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))
	defer provider.Close()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	host, err := reserve.Sliding(10, time.Second) // each host: at most 10 calls in any second
	if err != nil {
		log.Fatal(err)
	}
	transport, err := pacehttp.New(limiter, pacehttp.Options{Limit: host})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: transport}

	for range 3 {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, provider.URL, nil)
		if err != nil {
			log.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Status)
	}
	// Output:
	// 200 OK
	// 200 OK
	// 200 OK
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
