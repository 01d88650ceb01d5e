package provider

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Shopify is a Shopify-style GraphQL API (its Admin API's rate limits, as
// documented): each caller has a leaky bucket of Maximum points, restored
// at RestoreRate points per second. A query's requested cost (the request's
// X-Query-Cost header, standing for the cost Shopify computes from the
// query) must be available when it arrives; it then costs its actual cost
// (X-Actual-Cost, default the requested cost; Shopify refunds the
// difference), and the answer's extensions.cost reports both and the
// bucket (throttleStatus). A query whose requested cost is not available
// is refused with status 200 and an error THROTTLED, as Shopify does, and
// costs nothing. Jitter is how late a call may arrive after its turn: the
// bucket is judged Jitter later than the call's arrival (default 0).
// Set the fields before serving; Shopify is an http.Handler.
type Shopify struct {
	Maximum     float64 // points; Shopify's standard plan: 1000
	RestoreRate float64 // points per second; standard: 50
	Jitter      time.Duration
	// Now is the provider's clock (default time.Now): a test sets it.
	Now func() time.Time

	mu      sync.Mutex
	avail   float64
	at      time.Time // when avail was counted
	started bool
	calls   []ShopifyCall
}

// ShopifyCall is one call a Shopify received.
type ShopifyCall struct {
	At        time.Time
	Requested float64
	Actual    float64 // 0 when throttled
	Throttled bool
	Available float64 // the points available after it
}

// ShopifyThrottled is the errors member of a THROTTLED answer.
const shopifyThrottled = `[{"message":"Throttled","extensions":{"code":"THROTTLED","documentation":"https://shopify.dev/api/usage/rate-limits"}}]`

// ServeHTTP answers one query.
func (p *Shopify) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	requested, err := strconv.ParseFloat(r.Header.Get("X-Query-Cost"), 64)
	if err != nil || requested < 0 {
		http.Error(w, "X-Query-Cost: want a non-negative number", http.StatusBadRequest)
		return
	}
	actual := requested
	if v := r.Header.Get("X-Actual-Cost"); v != "" {
		if actual, err = strconv.ParseFloat(v, 64); err != nil || actual < 0 {
			http.Error(w, "X-Actual-Cost: want a non-negative number", http.StatusBadRequest)
			return
		}
	}
	// The query arrives when the provider takes it in, after the queries
	// taken before it: the clock is read under the lock. Read before it,
	// a query whose goroutine lost the CPU in between was judged at a
	// moment before the bucket's, which restored a negative time.
	p.mu.Lock()
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	if !p.started {
		p.started, p.avail, p.at = true, p.Maximum, now
	}
	if now.After(p.at) {
		p.avail = min(p.Maximum, p.avail+now.Sub(p.at).Seconds()*p.RestoreRate)
		p.at = now
	}
	throttled := requested > p.avail+p.Jitter.Seconds()*p.RestoreRate
	if !throttled {
		p.avail = max(0, p.avail-actual)
	}
	c := ShopifyCall{At: now, Requested: requested, Throttled: throttled, Available: p.avail}
	if !throttled {
		c.Actual = actual
	}
	p.calls = append(p.calls, c)
	p.mu.Unlock()

	cost := map[string]any{
		"requestedQueryCost": requested,
		"actualQueryCost":    nil,
		"throttleStatus": map[string]float64{
			"maximumAvailable":   p.Maximum,
			"currentlyAvailable": float64(int64(c.Available)), // Shopify reports whole points
			"restoreRate":        p.RestoreRate,
		},
	}
	body := map[string]any{"extensions": map[string]any{"cost": cost}}
	if throttled {
		body["errors"] = json.RawMessage(shopifyThrottled)
	} else {
		cost["actualQueryCost"] = actual
		body["data"] = map[string]any{"shop": map[string]string{"name": "pacer"}}
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	json.NewEncoder(w).Encode(body)
}

// Calls returns the calls received so far, in order (a copy).
func (p *Shopify) Calls() []ShopifyCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ShopifyCall(nil), p.calls...)
}
