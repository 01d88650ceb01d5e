package pacehttp

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestQuotaRefusalCountsNothing: a refusal whose headers count nothing (a
// 429 with only Google's RetryInfo in its body, or a proxy's 429 in front
// of a provider that counts) says nothing of whether the provider counts:
// the fleet's count stands, and the next call after the window's end still
// goes alone as its probe. (Found by the combination runner's google body
// variant, seed 4: the probe of a new window refused in a pause with no
// count headers stopped the count, and the fleet sent its calls unpaced
// by it, 3 over the window of 24.)
func TestQuotaRefusalCountsNothing(t *testing.T) {
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			// A window of 5 with nothing left, ending in 50 ms.
			w.Header().Set("x-ratelimit-limit-requests", "5")
			w.Header().Set("x-ratelimit-remaining-requests", "0")
			w.Header().Set("x-ratelimit-reset-requests", "50ms")
			return
		}
		// The probe of the next window, refused with no count.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"0.010s"}]}}`)
	}))
	t.Cleanup(srv.Close)
	tr, err := New(l, Options{
		Route: func(*http.Request) (Route, error) {
			return Route{Key: "k", Policy: reserve.Policy{{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 1000, Burst: 1}}}, Cost: reserve.Cost{"requests": 1}}, nil
		},
		MaxRetries: -1,
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	get := func(want int) {
		t.Helper()
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	get(http.StatusOK)
	time.Sleep(100 * time.Millisecond) // past the window's end
	get(http.StatusTooManyRequests)    // its probe: refused, no count
	time.Sleep(20 * time.Millisecond)  // past RetryInfo's pause
	if !tr.counted.has("k") {
		t.Error("the Transport stopped taking from the count after a refusal that counted nothing")
	}
	if _, id, known := takeOnce(t, tr, "k"); id == 0 || !known {
		t.Fatalf("the take after a refusal that counted nothing: number %d, known %v; want the count kept and this take its new probe", id, known)
	}
	if _, id, _ := takeOnce(t, tr, "k"); id != 0 {
		t.Fatalf("a second take got number %d while the new probe is out", id)
	}
}
