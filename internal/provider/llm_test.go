package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func call(t *testing.T, l *LLM, host, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, l.URL()+"/v1/chat/completions", strings.NewReader(body))
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestLLMBuckets: requests and tokens are charged together or not at all,
// with OpenAI's headers on every answer and retry-after on a 429. The
// buckets refill at quota/60 per second, slower than the test runs: RPM 3
// refills a request in 20 s, TPM 1000 refills 400 tokens in 24 s.
func TestLLMBuckets(t *testing.T) {
	l, err := StartLLM(LLMOptions{RPM: 3, TPM: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	resp, body := call(t, l, "a.test", `{"tokens": 600}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d %s", resp.StatusCode, body)
	}
	var out struct {
		Usage struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Usage.TotalTokens != 600 {
		t.Errorf("body %q: usage %d (%v), want 600", body, out.Usage.TotalTokens, err)
	}
	h := resp.Header
	for name, want := range map[string]string{
		"x-ratelimit-limit-requests": "3", "x-ratelimit-limit-tokens": "1000",
		"x-ratelimit-remaining-requests": "2", "x-ratelimit-remaining-tokens": "400",
	} {
		if got := h.Get(name); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	// 1 request in 20 s, 600 tokens in 36 s (rounded to whole seconds).
	if got := h.Get("x-ratelimit-reset-requests"); got != "20s" {
		t.Errorf("x-ratelimit-reset-requests = %q, want 20s", got)
	}
	if got := h.Get("x-ratelimit-reset-tokens"); got != "36s" {
		t.Errorf("x-ratelimit-reset-tokens = %q, want 36s", got)
	}

	// 600 more tokens are not there: 429, and neither bucket is charged.
	resp, _ = call(t, l, "a.test", `{"tokens": 600}`)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("second call of 600: %d, want 429", resp.StatusCode)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("retry-after")); err != nil || ra < 12 || ra > 13 {
		t.Errorf("retry-after %q, want 12 or 13 (200 tokens at 16.7/s)", resp.Header.Get("retry-after"))
	}
	if ms, err := strconv.Atoi(resp.Header.Get("retry-after-ms")); err != nil || ms < 11900 || ms > 12100 {
		t.Errorf("retry-after-ms %q, want about 12000", resp.Header.Get("retry-after-ms"))
	}
	if got := resp.Header.Get("x-ratelimit-remaining-requests"); got != "2" {
		t.Errorf("after a 429, remaining requests %q, want 2 (nothing charged)", got)
	}

	// Two small calls use the last 2 requests; the next is refused for
	// want of a request although tokens remain.
	for i := range 2 {
		if resp, body := call(t, l, "a.test", `{"tokens": 100}`); resp.StatusCode != http.StatusOK {
			t.Fatalf("small call %d: %d %s", i, resp.StatusCode, body)
		}
	}
	if resp, _ := call(t, l, "a.test", `{"tokens": 1}`); resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth request: %d, want 429", resp.StatusCode)
	}
	// Another host has its own buckets.
	if resp, _ := call(t, l, "b.test", `{"tokens": 1000}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("b.test: %d, want 200", resp.StatusCode)
	}

	st := l.Stats("a.test")
	if st.Calls != 3 || st.Rejected != 2 || st.Tokens != 800 {
		t.Errorf("stats %+v, want 3 calls, 2 rejected, 800 tokens", st)
	}
	uses, rej := l.Uses("a.test")
	if len(uses) != 3 || uses[0].Tokens != 600 || len(rej) != 2 {
		t.Errorf("uses %v, rejections %v", uses, rej)
	}
}

// TestLLMBadInput: a call that is not {"tokens": N} with 1 <= N <= TPM is
// a 400 and charges nothing; a GET is a 405.
func TestLLMBadInput(t *testing.T) {
	l, err := StartLLM(LLMOptions{RPM: 10, TPM: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, body := range []string{``, `{}`, `{"tokens": 0}`, `{"tokens": -5}`, `{"tokens": 1001}`, `{"tokens": "x"}`, `not json`} {
		if resp, _ := call(t, l, "a.test", body); resp.StatusCode != http.StatusBadRequest {
			t.Errorf("body %q: %d, want 400", body, resp.StatusCode)
		}
	}
	resp, err := http.Get(l.URL())
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: %d, want 405", resp.StatusCode)
	}
	if st := l.Stats("a.test"); st.Calls != 0 || st.Rejected != 0 {
		t.Errorf("stats %+v after bad calls, want none", st)
	}
	if _, err := StartLLM(LLMOptions{RPM: 0, TPM: 10}); err == nil {
		t.Error("StartLLM with RPM 0: no error")
	}
}

func TestOpenAIDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0ms", 11200 * time.Microsecond: "12ms", time.Second: "1s",
		6 * time.Minute: "6m0s", time.Hour + 2*time.Minute + 3400*time.Millisecond: "1h2m3s",
	} {
		if got := OpenAIDuration(d); got != want {
			t.Errorf("OpenAIDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
