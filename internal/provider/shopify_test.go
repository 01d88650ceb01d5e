package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestShopify: a Shopify takes each query's actual cost from its bucket
// and reports it; a query whose requested cost is not available is
// THROTTLED, with status 200, and costs nothing.
func TestShopify(t *testing.T) {
	// Restored at a point a minute: the test's queries see no restore.
	p := &Shopify{Maximum: 100, RestoreRate: 1.0 / 60}
	srv := httptest.NewServer(p)
	defer srv.Close()
	type answer struct {
		Errors []struct {
			Extensions struct{ Code string }
		}
		Extensions struct {
			Cost struct {
				RequestedQueryCost float64
				ActualQueryCost    *float64
				ThrottleStatus     struct{ MaximumAvailable, CurrentlyAvailable, RestoreRate float64 }
			}
		}
	}
	call := func(requested, actual string) (int, answer) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("X-Query-Cost", requested)
		req.Header.Set("X-Actual-Cost", actual)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var a answer
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("%q: %v", b, err)
		}
		return resp.StatusCode, a
	}
	st, a := call("60", "30")
	if st != 200 || len(a.Errors) != 0 || a.Extensions.Cost.ActualQueryCost == nil || *a.Extensions.Cost.ActualQueryCost != 30 ||
		a.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 70 || a.Extensions.Cost.ThrottleStatus.MaximumAvailable != 100 {
		t.Fatalf("first query: %d %+v", st, a)
	}
	call("60", "30") // 40 left
	st, a = call("60", "30")
	if st != 200 || len(a.Errors) != 1 || a.Errors[0].Extensions.Code != "THROTTLED" || a.Extensions.Cost.ActualQueryCost != nil ||
		a.Extensions.Cost.RequestedQueryCost != 60 || a.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 40 {
		t.Fatalf("third query: %d %+v", st, a)
	}
	st, a = call("40", "40")
	if st != 200 || len(a.Errors) != 0 || a.Extensions.Cost.ThrottleStatus.CurrentlyAvailable != 0 {
		t.Fatalf("fourth query, the last 40 points: %d %+v", st, a)
	}
	calls := p.Calls()
	if len(calls) != 4 || !calls[2].Throttled || calls[0].Throttled || calls[3].Throttled {
		t.Fatalf("calls %+v", calls)
	}
}

// TestShopifyTakesQueriesInOrder: a query is judged when the provider
// takes it in, after the queries taken before it. Two queries, the first
// of which read the clock and then lost the CPU (its goroutine preempted,
// on a loaded machine) while the second was served: the first is judged
// at the second's moment or later, and costs what it asked. Before, the
// first was judged at its own, earlier, reading after the second had moved
// the bucket's clock on, so the bucket restored a negative time and lost
// the points of it (here 5 of 100): a query the bucket could pay was
// THROTTLED (pacehttp's TestShopifyFleet failed so in CI, once in a few
// hundred runs).
func TestShopifyTakesQueriesInOrder(t *testing.T) {
	base := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	served := make(chan struct{}) // the second query has its answer
	var reads atomic.Int32
	p := &Shopify{Maximum: 100, RestoreRate: 50}
	p.Now = func() time.Time {
		if reads.Add(1) == 1 {
			// The first query's reading: it lingers until the second
			// query is served, or for 100 ms if that query cannot be
			// served meanwhile (it waits for this one).
			select {
			case <-served:
			case <-time.After(100 * time.Millisecond):
			}
			return base
		}
		return base.Add(100 * time.Millisecond)
	}
	query := func(cost string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/", nil)
		req.Header.Set("X-Query-Cost", cost)
		w := httptest.NewRecorder()
		p.ServeHTTP(w, req)
		return w
	}
	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- query("100") }()
	for reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	query("0")
	close(served)
	<-first
	calls := p.Calls()
	if len(calls) != 2 {
		t.Fatalf("calls %+v", calls)
	}
	for i, c := range calls {
		if c.Throttled {
			t.Errorf("call %d (requested %v) throttled with the whole bucket available: %+v", i, c.Requested, calls)
		}
	}
	if calls[1].At.Before(calls[0].At) {
		t.Errorf("calls out of order: %+v", calls)
	}
}
