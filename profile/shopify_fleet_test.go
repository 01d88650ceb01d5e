package profile_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/profile"
)

// TestShopifyFleet: the Shopify profile against a Shopify-like GraphQL
// API (internal/provider.Shopify: a bucket of 200 points restored at 100
// a second; a query's requested cost must be available, its actual cost
// is taken), queries requesting 10 to 80 points, a quarter of them
// costing 20% to 100% of it, the rest all of it: no query throttled,
// judged by the provider's log.
func TestShopifyFleet(t *testing.T) {
	shop := &provider.Shopify{Maximum: 200, RestoreRate: 100}
	api := httptest.NewServer(shop)
	defer api.Close()
	p, err := profile.Shopify(profile.ShopifyLimits{Shop: "pacer.myshopify.com", Maximum: 200, RestoreRate: 100}, profile.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	fleet(t, clients(t, p, 2), func(c *http.Client, rng *rand.Rand) error {
		requested := 10 + rng.IntN(71)
		actual := requested // Shopify's worst case: no refund
		if rng.IntN(4) == 0 {
			actual = max(1, requested*(20+rng.IntN(81))/100)
		}
		ctx := profile.WithCall(context.Background(), profile.Call{Input: float64(requested)})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/admin/api/2025-01/graphql.json", strings.NewReader(`{"query":"{ shop { name } }"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Query-Cost", fmt.Sprint(requested))
		req.Header.Set("X-Actual-Cost", fmt.Sprint(actual))
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("provider answered %s", resp.Status)
		}
		return nil
	})
	var ok, throttled int
	var requested, actual float64
	calls := shop.Calls()
	for _, c := range calls {
		if c.Throttled {
			throttled++
			continue
		}
		ok++
		requested += c.Requested
		actual += c.Actual
	}
	span := calls[len(calls)-1].At.Sub(calls[0].At).Seconds()
	t.Logf("%d queries, %d throttled; %.0f points requested, %.0f actual over %.2f s (the bucket allows %.0f)",
		ok, throttled, requested, actual, span, 200+100*span)
	if ok < 10 || throttled > 0 {
		t.Errorf("the provider ran %d queries and throttled %d, want some and none", ok, throttled)
	}
}
