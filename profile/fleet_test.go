package profile_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/profile"
	"github.com/pacer-go/pacer/reserve"
)

// The fleet tests run 2 processes' worth of Limiters (8 goroutines in
// all) through each profile's pacehttp options against a provider model
// that enforces the same quotas per second, for a few seconds, and judge
// by the provider's log: every call it refused is a failure. The quotas
// are small enough that the fleet is held by them from its first second.

const (
	fleetHost = "api.test"
	fleetRun  = 3 * time.Second
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// clients returns n clients, each on a Limiter of its own on one Redis,
// paced with p's options.
func clients(t *testing.T, p *profile.Profile, n int) []*http.Client {
	t.Helper()
	srv := redistest.New(t)
	var cs []*http.Client
	for range n {
		lim, err := reserve.New(srv.NewClient(t), reserve.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		o := p.Options()
		o.Logger = quiet
		tr, err := pacehttp.New(lim, o)
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, &http.Client{Transport: tr, Timeout: 10 * time.Second})
	}
	return cs
}

// fleet has 4 goroutines per client call send(client, rng) until the run
// is over, and returns the first error.
func fleet(t *testing.T, cs []*http.Client, send func(*http.Client, *rand.Rand) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), fleetRun)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for i, c := range cs {
		for g := range 4 {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(g)))
			wg.Go(func() {
				for ctx.Err() == nil {
					if err := send(c, rng); err != nil && ctx.Err() == nil {
						mu.Lock()
						first = cmpErr(first, err)
						mu.Unlock()
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if first != nil {
		t.Fatal(first)
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// post sends body to url with the call's estimate, and checks the answer
// is a 200 (a 429 left after pacehttp's retries fails the test too, but
// the provider's log is the judge).
func post(c *http.Client, url, body string, call profile.Call) error {
	req, err := http.NewRequestWithContext(profile.WithCall(context.Background(), call), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Host = fleetHost
	req.Header.Set("Idempotency-Key", fmt.Sprint(rand.Uint64()))
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusTooManyRequests {
		return fmt.Errorf("provider answered %s", resp.Status)
	}
	return nil
}

// off is v off by up to ±50%.
func off(rng *rand.Rand, v float64) float64 { return v * (1 + (rng.Float64() - 0.5)) }

// TestOpenAIFleet: the OpenAI profile against an OpenAI-like provider
// enforcing RPM 600 and TPM 120,000 per second (10 requests and 2,000
// tokens a second), calls of 50 to 350 tokens estimated ±50%: no call
// refused, and the fleet made calls.
func TestOpenAIFleet(t *testing.T) {
	api, err := provider.StartLLM(provider.LLMOptions{RPM: 600, TPM: 120_000, Hold: time.Second, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	p, err := profile.OpenAI(profile.OpenAILimits{Model: "m", RPM: 600, TPM: 120_000}, profile.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	fleet(t, clients(t, p, 2), func(c *http.Client, rng *rand.Rand) error {
		n := 50 + rng.IntN(301)
		return post(c, api.URL(), fmt.Sprintf(`{"tokens": %d}`, n), profile.Call{Input: off(rng, float64(n))})
	})
	uses, refused := api.Uses(fleetHost)
	t.Logf("%d calls, %d refused", len(uses), len(refused))
	if len(uses) < 10 || len(refused) > 0 {
		t.Errorf("the provider accepted %d calls and refused %d, want some and none", len(uses), len(refused))
	}
}

// TestAnthropicFleet: the Anthropic profile against an Anthropic-like
// provider enforcing RPM, ITPM and OTPM per second.
func TestAnthropicFleet(t *testing.T) {
	api, err := provider.StartAnthropic(provider.AnthropicOptions{RPM: 600, ITPM: 120_000, OTPM: 36_000, Hold: time.Second, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	p, err := profile.Anthropic(profile.AnthropicLimits{Model: "m", RPM: 600, ITPM: 120_000, OTPM: 36_000}, profile.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	fleet(t, clients(t, p, 2), func(c *http.Client, rng *rand.Rand) error {
		in, out := 50+rng.IntN(251), rng.IntN(101)
		return post(c, api.URL(), fmt.Sprintf(`{"input_tokens": %d, "output_tokens": %d}`, in, out), profile.Call{Input: off(rng, float64(in)), Output: off(rng, float64(out))})
	})
	uses, refused := api.Uses(fleetHost)
	t.Logf("%d calls, %d refused", len(uses), len(refused))
	if len(uses) < 10 || len(refused) > 0 {
		t.Errorf("the provider accepted %d calls and refused %d, want some and none", len(uses), len(refused))
	}
}

// TestAzureFleet: the Azure profile against an Azure-like deployment of
// 100,000 TPM (600 RPM, 10 requests a second, counted each second in
// windows the fleet cannot see): small calls, so that requests bind.
func TestAzureFleet(t *testing.T) {
	api, err := provider.StartAzure(provider.AzureOptions{TPM: 100_000, Period: time.Second, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	p, err := profile.AzureOpenAI(profile.AzureLimits{Deployment: "d", TPM: 100_000}, profile.Settings{})
	if err != nil {
		t.Fatal(err)
	}
	fleet(t, clients(t, p, 2), func(c *http.Client, rng *rand.Rand) error {
		prompt, maxTokens := 10+rng.IntN(41), 20
		return post(c, api.URL(), fmt.Sprintf(`{"prompt_tokens": %d, "max_tokens": %d}`, prompt, maxTokens), profile.Call{Input: off(rng, float64(prompt)), Output: float64(maxTokens)})
	})
	uses, refused := api.Uses(fleetHost)
	t.Logf("%d calls, %d refused", len(uses), len(refused))
	if len(uses) < 10 || len(refused) > 0 {
		t.Errorf("the provider accepted %d calls and refused %d, want some and none", len(uses), len(refused))
	}
}

// TestGitHubFleet: the GitHub profile, its hour shortened to 6 s and its
// minute to 2 s, against a GitHub-like API with the same windows: a
// primary quota of 120 requests per 6 s and 100 points per 2 s, GETs and
// POSTs mixed.
func TestGitHubFleet(t *testing.T) {
	api, err := provider.StartGitHub(provider.GitHubOptions{Primary: 120, PrimaryWindow: 6 * time.Second, Points: 100, PointsWindow: 2 * time.Second, Latency: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer api.Close()
	p, err := profile.GitHubScaled(profile.GitHubLimits{Account: "a", PerHour: 120, PointsPerMinute: 100}, profile.Settings{}, 6*time.Second, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	fleet(t, clients(t, p, 2), func(c *http.Client, rng *rand.Rand) error {
		method := http.MethodGet
		if rng.IntN(4) == 0 {
			method = http.MethodPost
		}
		req, err := http.NewRequest(method, api.URL()+"/repos/o/r/issues", nil)
		if err != nil {
			return err
		}
		req.Host = fleetHost
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	uses, refused := api.Uses(fleetHost)
	points := 0
	for _, u := range uses {
		points += u.Points
	}
	t.Logf("%d calls, %d points, %d refused", len(uses), points, len(refused))
	if len(uses) < 10 || len(refused) > 0 {
		t.Errorf("the provider accepted %d calls and refused %d, want some and none", len(uses), len(refused))
	}
}
