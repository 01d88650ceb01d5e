package profile

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/reserve"
)

// TestShopifyProfile: Shopify's policy is its bucket less ShopifyLate of
// its rate (a late query's margin); a call
// costs its requested points, settles its actual cost without the
// credit; the options read THROTTLED and retry POSTs; bad limits are an
// error.
func TestShopifyProfile(t *testing.T) {
	std, err := Shopify(ShopifyLimits{Shop: "pacer.myshopify.com"}, Settings{})
	check(t, std, err, "pacer.myshopify.com/admin/api/graphql", reserve.Policy{
		{Name: "points", Limit: reserve.Limit{Rate: 100, Burst: 2000 - 25}}})
	plus, err := Shopify(ShopifyLimits{Shop: "p.myshopify.com", Maximum: 10_000, RestoreRate: 500}, Settings{})
	check(t, plus, err, "p.myshopify.com/admin/api/graphql", reserve.Policy{
		{Name: "points", Limit: reserve.Limit{Rate: 500, Burst: 10_000 - 125}}})

	for name, l := range map[string]ShopifyLimits{
		"no shop":                        {},
		"shop with a path":               {Shop: "p.myshopify.com/admin"},
		"rate negative":                  {Shop: "p", RestoreRate: -1},
		"maximum negative":               {Shop: "p", Maximum: -1},
		"maximum within the late margin": {Shop: "p", Maximum: 25, RestoreRate: 100},
		"rate tiny":                      {Shop: "p", RestoreRate: 0.01}, // a default Maximum of 0 points
	} {
		if p, err := Shopify(l, Settings{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, %v; want an error matching ErrInvalid", name, p, err)
		}
	}

	r, err := std.Request(Call{Input: 251.5, Output: 7})
	if err != nil || !equalCost(r.Cost, reserve.Cost{"points": 252}) {
		t.Errorf("a query of 251.5 points: %+v, %v; want 252 points", r, err)
	}
	if _, err := std.Request(Call{Input: 2001}); !errors.Is(err, reserve.ErrExceedsBurst) {
		t.Errorf("a query above the bucket: %v, want ErrExceedsBurst", err)
	}
	if _, err := std.Request(Call{Input: -1}); err == nil {
		t.Error("a negative cost: no error")
	}

	// Settled at the actual cost, and no credit kept: the next call
	// reserves its whole requested cost.
	req, _ := http.NewRequestWithContext(WithCall(t.Context(), Call{Input: 252}), http.MethodPost, "http://x/", nil)
	if _, err := std.route(req); err != nil {
		t.Fatal(err)
	}
	body := `{"data":{},"extensions":{"cost":{"requestedQueryCost":252,"actualQueryCost":12,"throttleStatus":{"maximumAvailable":2000,"currentlyAvailable":1988,"restoreRate":100}}}}`
	resp := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body)), Request: req}
	o := std.Options()
	got, err := o.Settle(resp)
	if err != nil || !equalCost(got, reserve.Cost{"points": 12}) {
		t.Errorf("settles %v, %v; want 12 points", got, err)
	}
	if rest, _ := io.ReadAll(resp.Body); string(rest) != body {
		t.Errorf("the body left for the caller is %q", rest)
	}
	if r, _ := std.Request(Call{Input: 252}); r.Cost["points"] != 252 || len(std.credit) != 0 {
		t.Errorf("after a settle: reserves %v, credit %v; want 252 and none", r.Cost, std.credit)
	}
	throttled := `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":252,"actualQueryCost":null}}}`
	resp = &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(throttled)), Request: req}
	if got, err := o.Settle(resp); err == nil {
		t.Errorf("a body without actualQueryCost settles %v", got)
	}
	if !o.ShopifyThrottle || !o.RetryUnsafe || !o.IgnoreCounts || o.Route == nil {
		t.Errorf("options %+v: want ShopifyThrottle, RetryUnsafe, IgnoreCounts and a Route", o)
	}
	if o := must(OpenAI(OpenAILimits{Model: "m", RPM: 60, TPM: 60_000}, Settings{})).Options(); o.ShopifyThrottle || o.RetryUnsafe {
		t.Errorf("openai's options %+v: want neither ShopifyThrottle nor RetryUnsafe", o)
	}
}
