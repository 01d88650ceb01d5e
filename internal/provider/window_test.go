package provider

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// TestWindowDialects: a Window accepts Quota calls in a window and refuses
// the next, reporting the count in each dialect's headers, and OpenAI's
// refusal carries its JSON body and no Retry-After.
func TestWindowDialects(t *testing.T) {
	remaining := map[string]string{
		DialectGitHub: "X-RateLimit-Remaining", DialectXRateLimit: "X-RateLimit-Remaining",
		DialectDraft06: "RateLimit-Remaining", DialectDraft07: "RateLimit", DialectDraft10: "RateLimit",
		DialectOpenAI: "x-ratelimit-remaining-requests", DialectAnthropic: "anthropic-ratelimit-requests-remaining",
	}
	for _, d := range WindowDialects {
		t.Run(d, func(t *testing.T) {
			// A window of an hour: the test's calls all fall in one.
			p := &Window{Quota: 2, Per: time.Hour, Dialect: d}
			srv := httptest.NewServer(p)
			defer srv.Close()
			for i := range 3 {
				resp, err := http.Get(srv.URL)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want := http.StatusOK
				if i == 2 {
					want = http.StatusTooManyRequests
				}
				if resp.StatusCode != want {
					t.Fatalf("call %d: status %d, want %d", i+1, resp.StatusCode, want)
				}
				if resp.Header.Get(remaining[d]) == "" {
					t.Fatalf("call %d: no %s in %v", i+1, remaining[d], resp.Header)
				}
				if d == DialectOpenAI {
					reset, err := time.ParseDuration(resp.Header.Get("x-ratelimit-reset-requests"))
					if err != nil || reset <= 0 || reset > time.Hour {
						t.Fatalf("call %d: x-ratelimit-reset-requests %q (%v)", i+1, resp.Header.Get("x-ratelimit-reset-requests"), err)
					}
					if got := resp.Header.Get("x-ratelimit-remaining-requests"); got != strconv.Itoa(max(0, 1-i)) {
						t.Fatalf("call %d: remaining %s, want %d", i+1, got, max(0, 1-i))
					}
					if i == 2 && (string(body) != OpenAIRefusal || resp.Header.Get("Retry-After") != "") {
						t.Fatalf("OpenAI's 429: body %q, Retry-After %q", body, resp.Header.Get("Retry-After"))
					}
				}
				if d == DialectAnthropic {
					if _, err := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-requests-reset")); err != nil {
						t.Fatalf("call %d: anthropic-ratelimit-requests-reset: %v", i+1, err)
					}
				}
			}
			s := p.Calls()
			if len(s) != 3 || !s[0].Accepted || !s[1].Accepted || s[2].Accepted {
				t.Fatalf("calls %+v: want 2 accepted, then 1 refused", s)
			}
		})
	}
}
