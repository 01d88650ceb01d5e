package pacehttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// A host that wants a few connections: at most 2 requests open at once on
// each host, fleet-wide, beside 20 calls a second. A request holds its
// seat until its response's body is closed (or read to the end).
func ExampleOptions_inFlight() {
	rdb, stop := embeddedRedis()
	defer stop()
	var open, peak atomic.Int64
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := open.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(10 * time.Millisecond)
		open.Add(-1)
		fmt.Fprintln(w, "ok")
	}))
	defer provider.Close()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	transport, err := pacehttp.New(limiter, pacehttp.Options{
		Limit:    reserve.Limit{Rate: 20, Burst: 5},
		InFlight: 2, // at most 2 requests open per host, fleet-wide
	})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: transport}

	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, provider.URL, nil)
			if err != nil {
				log.Fatal(err)
			}
			resp, err := client.Do(req)
			if err != nil {
				log.Fatal(err)
			}
			defer resp.Body.Close() // gives the seat back
			io.Copy(io.Discard, resp.Body)
		})
	}
	wg.Wait()
	fmt.Println("at most 2 open:", peak.Load() <= 2)
	// Output:
	// at most 2 open: true
}
