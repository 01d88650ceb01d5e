package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
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
