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
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/profile"
)

// TestGeminiFleet: the Gemini profile, its minute shortened to 2 s,
// against a Google-like API (internal/provider.Google) counting 20
// requests and 4,000 input tokens in each 2-second minute from the
// epoch, with a day's quota too large to bind: calls of 50 to 350 input
// tokens estimated ±50%, no call refused, judged by the provider's log.
func TestGeminiFleet(t *testing.T) {
	const minute = 2 * time.Second
	google := &provider.Google{PerMinute: 20, TokensPerMinute: 4000, PerDay: 1_000_000, Minute: minute}
	api := httptest.NewServer(google)
	defer api.Close()
	p, err := profile.GeminiScaled(profile.GeminiLimits{Project: "p", Model: "m", RPM: 20, TPM: 4000, RPD: 1_000_000}, profile.Settings{}, minute)
	if err != nil {
		t.Fatal(err)
	}
	fleet(t, clients(t, p, 2), func(c *http.Client, rng *rand.Rand) error {
		n := 50 + rng.IntN(301)
		return postHeaders(c, api.URL, profile.Call{Input: off(rng, float64(n))}, map[string]string{"X-Prompt-Tokens": fmt.Sprint(n)})
	})
	accepted, refused, tokens := 0, 0, 0
	for _, c := range google.Calls() {
		if !c.Accepted {
			refused++
			t.Logf("refused at %v: %s", c.At.Format("15:04:05.000"), c.Quota)
			continue
		}
		accepted++
		tokens += c.Tokens
	}
	t.Logf("%d calls, %d input tokens, %d refused", accepted, tokens, refused)
	if accepted < 10 || refused > 0 {
		t.Errorf("the provider accepted %d calls and refused %d, want some and none", accepted, refused)
	}
}

// postHeaders posts an empty JSON body to url with the call's estimate and
// the headers given, and checks the answer is a 200 or a 429 (the
// provider's log is the judge).
func postHeaders(c *http.Client, url string, call profile.Call, headers map[string]string) error {
	req, err := http.NewRequestWithContext(profile.WithCall(context.Background(), call), http.MethodPost, url, strings.NewReader(`{}`))
	if err != nil {
		return err
	}
	req.Host = fleetHost
	req.Header.Set("Idempotency-Key", fmt.Sprint(rand.Uint64()))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
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
