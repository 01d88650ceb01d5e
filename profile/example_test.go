package profile_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/profile"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// An OpenAI model's quota, 5,000 requests and 450,000 tokens per minute, paced
// for the whole fleet: each request carries its estimate (the prompt's
// tokens and max_tokens), and the usage the answer reports settles it.
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, `{"usage":{"prompt_tokens":900,"completion_tokens":310,"total_tokens":1210}}`)
	}))
	defer api.Close()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	openai, err := profile.OpenAI(profile.OpenAILimits{Model: "gpt-4o", RPM: 5_000, TPM: 450_000}, profile.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	transport, err := pacehttp.New(limiter, openai.Options())
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: transport}

	ctx := profile.WithCall(context.Background(), profile.Call{Input: 900, Output: 400}) // the prompt's tokens, max_tokens
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api.URL+"/v1/chat/completions", strings.NewReader(`{"max_tokens": 400}`))
	if err != nil {
		log.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.Status, strings.TrimSpace(string(body)))
	// Output:
	// 200 OK {"usage":{"prompt_tokens":900,"completion_tokens":310,"total_tokens":1210}}
}

// Without HTTP: a call to Anthropic's Messages API reserves its estimate on
// the three bands (requests, input and output tokens per minute) in one
// slot, and settles what the answer reports.
func ExampleProfile_Request() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	claude, err := profile.Anthropic(profile.AnthropicLimits{Model: "claude-sonnet-4", RPM: 4_000, ITPM: 2_000_000, OTPM: 400_000}, profile.Settings{})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	call := profile.Call{Input: 2_000, Output: 1_024} // the prompt's tokens, max_tokens
	req, err := claude.Request(call)
	if err != nil {
		log.Fatal(err)
	}
	r, err := limiter.ReserveN(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Sleep(ctx); err != nil {
		log.Fatal(err)
	}
	used := profile.Usage{Input: 1_850, Output: 700} // call the API here; its answer's usage says what it used
	if err := claude.Settle(ctx, r, call, used); err != nil {
		log.Fatal(err)
	}
	fmt.Println(req.Key, req.Cost)
	// Output:
	// api.anthropic.com/claude-sonnet-4 map[input-tokens:2000 output-tokens:1024 requests:1]
}

// OpenAI's quota without HTTP: 5,000 requests and 450,000 tokens per
// minute, replenished continuously and enforced over short periods. The
// profile's policy is two token buckets holding 300 ms of each; a call
// reserves its estimate, and settles what it used.
func ExampleProfile_Settle() {
	rdb, stop := embeddedRedis()
	defer stop()
	limiter, err := reserve.New(rdb, reserve.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	openai, err := profile.OpenAI(profile.OpenAILimits{Model: "gpt-4o", RPM: 5_000, TPM: 450_000}, profile.Settings{})
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	call := profile.Call{Input: 120, Output: 100} // the prompt's tokens, max_tokens
	req, err := openai.Request(call)
	if err != nil {
		log.Fatal(err)
	}
	r, err := limiter.ReserveN(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Sleep(ctx); err != nil {
		log.Fatal(err)
	}
	used := profile.Usage{Input: 120, Output: 64} // call the provider here; usage.prompt_tokens and completion_tokens
	if err := openai.Settle(ctx, r, call, used); err != nil {
		log.Fatal(err)
	}
	fmt.Println(openai.Policy)
	// Output:
	// requests: 83.33333333333333/s, burst 25; tokens: 7500/s, burst 2250
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
