package profile_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/profile"
	"github.com/pacer-go/pacer/reserve"
)

// A Gemini model's quota on a project, 1,000 requests and 1,000,000 input
// tokens per minute and 10,000 requests per day: the day is a calendar day
// in Los Angeles, whose midnight the quota resets at, and a 429 that
// names the day's quota exhausted pauses the fleet until then.
func ExampleGemini() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"candidates":[],"usageMetadata":{"promptTokenCount":1180,"candidatesTokenCount":412,"totalTokenCount":1592}}`)
	}))
	defer api.Close()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	gemini, err := profile.Gemini(profile.GeminiLimits{Project: "my-project", Model: "gemini-2.5-flash", RPM: 1_000, TPM: 1_000_000, RPD: 10_000}, profile.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	transport, err := pacehttp.New(limiter, gemini.Options())
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: transport}

	ctx := profile.WithCall(context.Background(), profile.Call{Input: 1_200}) // the prompt's tokens
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1beta/models/gemini-2.5-flash:generateContent", strings.NewReader(`{"contents":[]}`))
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, gemini.Key)
	fmt.Println(gemini.Policy)
	// Output:
	// 200 OK generativelanguage.googleapis.com/my-project/gemini-2.5-flash
	// requests: 16.583333333333332/s, burst 5; tokens: 16583.333333333332/s, burst 5000; daily: 10000/day America/Los_Angeles (requests)
}

// An app's GraphQL Admin API quota on a Shopify store on the Standard
// plan: a bucket of 2,000 points restored at 100 a second. Each query
// reserves its requested cost, and the answer's actualQueryCost settles
// it; a THROTTLED answer pauses the fleet and is retried.
func ExampleShopify() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"data":{"products":{"nodes":[]}},"extensions":{"cost":{"requestedQueryCost":52,"actualQueryCost":12,"throttleStatus":{"maximumAvailable":2000,"currentlyAvailable":1988,"restoreRate":100}}}}`)
	}))
	defer api.Close()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	shopify, err := profile.Shopify(profile.ShopifyLimits{Shop: "example.myshopify.com", Maximum: 2_000, RestoreRate: 100}, profile.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	transport, err := pacehttp.New(limiter, shopify.Options())
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: transport}

	ctx := profile.WithCall(context.Background(), profile.Call{Input: 52}) // the query's requestedQueryCost
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/admin/api/2025-07/graphql.json", strings.NewReader(`{"query":"{ products(first: 50) { nodes { id } } }"}`))
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, shopify.Key, shopify.Policy)
	// Output:
	// 200 OK example.myshopify.com/admin/api/graphql points: 100/s, burst 1975
}
