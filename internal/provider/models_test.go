package provider

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// do sends method with body to url for host, and returns the answer's
// status, headers and body.
func do(t *testing.T, method, url, host, body string) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestLLMHold: with Hold a second, each bucket holds a second of its
// quota (RPM 120: 2 requests; TPM 6,000: 100 tokens), refilled at the
// minute's rate.
func TestLLMHold(t *testing.T) {
	l, err := StartLLM(LLMOptions{RPM: 120, TPM: 6000, Hold: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if code, h, body := do(t, http.MethodPost, l.URL(), "a.test", `{"tokens": 100}`); code != http.StatusOK || h.Get("x-ratelimit-remaining-tokens") != "0" {
		t.Fatalf("a second's tokens: %d %s, remaining %q", code, body, h.Get("x-ratelimit-remaining-tokens"))
	}
	// 100 tokens refill in 1 s: the next 60 are at least 0.5 s away.
	code, h, _ := do(t, http.MethodPost, l.URL(), "a.test", `{"tokens": 60}`)
	if ms, _ := strconv.Atoi(h.Get("retry-after-ms")); code != http.StatusTooManyRequests || ms < 500 || ms > 600 {
		t.Errorf("60 more tokens at once: %d, retry-after-ms %q; want 429 after about 600 ms", code, h.Get("retry-after-ms"))
	}
	if _, err := StartLLM(LLMOptions{RPM: 1, TPM: 1, Hold: 2 * time.Minute}); err == nil {
		t.Error("Hold of 2 minutes: no error")
	}
}

// TestAnthropicBuckets: requests, input and output tokens are charged
// together or not at all, each bucket on its own quota, with Anthropic's
// headers.
func TestAnthropicBuckets(t *testing.T) {
	a, err := StartAnthropic(AnthropicOptions{RPM: 10, ITPM: 1000, OTPM: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	code, h, body := do(t, http.MethodPost, a.URL(), "a.test", `{"input_tokens": 600, "output_tokens": 150}`)
	if code != http.StatusOK || body != `{"usage":{"input_tokens":600,"output_tokens":150}}`+"\n" {
		t.Fatalf("first call: %d %q", code, body)
	}
	for name, want := range map[string]string{
		"anthropic-ratelimit-requests-limit": "10", "anthropic-ratelimit-requests-remaining": "9",
		"anthropic-ratelimit-input-tokens-remaining": "400", "anthropic-ratelimit-output-tokens-remaining": "50",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if reset, err := time.Parse(time.RFC3339, h.Get("anthropic-ratelimit-output-tokens-reset")); err != nil || time.Until(reset) < 40*time.Second {
		t.Errorf("output tokens reset %q (%v): want an RFC 3339 time about 45 s away", h.Get("anthropic-ratelimit-output-tokens-reset"), err)
	}
	// Input tokens are there, output tokens are not: refused, nothing charged.
	if code, h, _ := do(t, http.MethodPost, a.URL(), "a.test", `{"input_tokens": 100, "output_tokens": 100}`); code != http.StatusTooManyRequests || h.Get("retry-after") == "" || h.Get("anthropic-ratelimit-input-tokens-remaining") != "400" {
		t.Errorf("output tokens short: %d, retry-after %q, input remaining %q; want 429 charging nothing", code, h.Get("retry-after"), h.Get("anthropic-ratelimit-input-tokens-remaining"))
	}
	for _, body := range []string{`{}`, `{"input_tokens": 0, "output_tokens": 1}`, `{"input_tokens": 1}`, `{"input_tokens": 1, "output_tokens": 201}`} {
		if code, _, _ := do(t, http.MethodPost, a.URL(), "a.test", body); code != http.StatusBadRequest {
			t.Errorf("body %s: %d, want 400", body, code)
		}
	}
	uses, rej := a.Uses("a.test")
	if len(uses) != 1 || uses[0].Input != 600 || uses[0].Output != 150 || len(rej) != 1 {
		t.Errorf("uses %v, refusals %v", uses, rej)
	}
}

// TestAzureWindows: requests are counted per period (RPM 6 per 1,000
// TPM: 100,000 TPM give 600 RPM, 10 a second), tokens (the prompt and
// max_tokens) per minute, both in windows from the provider's start.
func TestAzureWindows(t *testing.T) {
	a, err := StartAzure(AzureOptions{TPM: 100_000, Period: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	// A period of 30 s holds 300 requests; the minute 100,000 tokens.
	code, _, body := do(t, http.MethodPost, a.URL(), "a.test", `{"prompt_tokens": 60000, "max_tokens": 30000}`)
	if code != http.StatusOK || body != `{"usage":{"prompt_tokens":60000,"completion_tokens":30000,"total_tokens":90000}}`+"\n" {
		t.Fatalf("first call: %d %q", code, body)
	}
	code, h, _ := do(t, http.MethodPost, a.URL(), "a.test", `{"prompt_tokens": 9000, "max_tokens": 1001}`)
	if ms, _ := strconv.Atoi(h.Get("retry-after-ms")); code != http.StatusTooManyRequests || ms < 50_000 || ms > 60_000 {
		t.Errorf("10,001 tokens more in the minute: %d, retry-after-ms %q; want 429 until the minute's end", code, h.Get("retry-after-ms"))
	}
	if code, h, _ := do(t, http.MethodPost, a.URL(), "a.test", `{"prompt_tokens": 9000, "max_tokens": 1000}`); code != http.StatusOK || h.Get("x-ratelimit-remaining-tokens") != "0" {
		t.Errorf("the minute's last 10,000 tokens: %d, remaining %q", code, h.Get("x-ratelimit-remaining-tokens"))
	}
	uses, rej := a.Uses("a.test")
	if len(uses) != 2 || uses[1].Tokens != 10_000 || len(rej) != 1 {
		t.Errorf("uses %v, refusals %v", uses, rej)
	}
	if AzureRPM(100_000) != 600 {
		t.Errorf("AzureRPM(100,000) = %d, want 600", AzureRPM(100_000))
	}
	b, err := StartAzure(AzureOptions{TPM: 1000, Period: 10 * time.Second}) // 6 RPM: 1 request per 10 s
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if code, _, _ := do(t, http.MethodPost, b.URL(), "a.test", `{"prompt_tokens": 1, "max_tokens": 0}`); code != http.StatusOK {
		t.Fatalf("first request: %d", code)
	}
	if code, _, _ := do(t, http.MethodPost, b.URL(), "a.test", `{"prompt_tokens": 1, "max_tokens": 0}`); code != http.StatusTooManyRequests {
		t.Errorf("a second request in the period: %d, want 429", code)
	}
}

// TestGitHubLimits: GETs cost 1 point and POSTs 5 in the sliding window;
// the primary quota runs out with a 403 and x-ratelimit-remaining 0, its
// reset a Unix time.
func TestGitHubLimits(t *testing.T) {
	g, err := StartGitHub(GitHubOptions{Primary: 4, Points: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if code, h, _ := do(t, http.MethodPost, g.URL(), "tok", ""); code != http.StatusOK || h.Get("x-ratelimit-remaining") != "3" || h.Get("x-ratelimit-used") != "1" {
		t.Fatalf("POST: %d, remaining %q", code, h.Get("x-ratelimit-remaining"))
	}
	if code, _, _ := do(t, http.MethodPost, g.URL(), "tok", ""); code != http.StatusTooManyRequests {
		t.Errorf("a second POST (10 points of 7): %d, want 429", code)
	}
	for i := range 2 {
		if code, h, _ := do(t, http.MethodGet, g.URL(), "tok", ""); code != http.StatusOK {
			t.Fatalf("GET %d: %d", i, code)
		} else if reset, err := strconv.ParseInt(h.Get("x-ratelimit-reset"), 10, 64); err != nil || reset < time.Now().Add(59*time.Minute).Unix() {
			t.Errorf("x-ratelimit-reset %q: want a Unix time an hour away", h.Get("x-ratelimit-reset"))
		}
	}
	if code, _, body := do(t, http.MethodGet, g.URL(), "tok", ""); code != http.StatusTooManyRequests || !strings.Contains(body, "secondary rate limit") {
		t.Errorf("a GET past 7 points: %d %q", code, body)
	}
	if code, h, _ := do(t, http.MethodGet, g.URL(), "other", ""); code != http.StatusOK || h.Get("x-ratelimit-remaining") != "3" {
		t.Errorf("another token: %d", code)
	}
	g2, err := StartGitHub(GitHubOptions{Primary: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	do(t, http.MethodGet, g2.URL(), "tok", "")
	if code, h, _ := do(t, http.MethodGet, g2.URL(), "tok", ""); code != http.StatusForbidden || h.Get("x-ratelimit-remaining") != "0" {
		t.Errorf("past the primary quota: %d, remaining %q; want 403 and 0", code, h.Get("x-ratelimit-remaining"))
	}
	uses, rej := g.Uses("tok")
	if len(uses) != 3 || uses[0].Points != 5 || uses[1].Points != 1 || len(rej) != 2 {
		t.Errorf("uses %v, refusals %v", uses, rej)
	}
}
