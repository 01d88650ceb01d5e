package profile

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// must returns p, and panics on err (the limits in these tests are good).
func must(p *Profile, err error) *Profile {
	if err != nil {
		panic(err)
	}
	return p
}

// TestPolicies: each profile's policy, exactly, for the quotas given.
func TestPolicies(t *testing.T) {
	lim := func(rate float64, burst int) reserve.Limit { return reserve.Limit{Rate: rate, Burst: burst} }
	openai, err := OpenAI(OpenAILimits{Model: "gpt-4o", RPM: 1200, TPM: 600_000}, Settings{})
	check(t, openai, err, "api.openai.com/gpt-4o", reserve.Policy{
		{Name: "requests", Limit: lim(20, 6)}, {Name: "tokens", Limit: lim(10_000, 3000)}})
	// 30 RPM hold 1 request in a Burst of 2 s, 12,000 TPM 400 tokens.
	small, err := OpenAI(OpenAILimits{Model: "m", RPM: 30, TPM: 12_000}, Settings{Burst: 2 * time.Second})
	check(t, small, err, "api.openai.com/m", reserve.Policy{
		{Name: "requests", Limit: lim(0.5, 1)}, {Name: "tokens", Limit: lim(200, 400)}})
	anthropic, err := Anthropic(AnthropicLimits{Model: "claude-sonnet-4", RPM: 4000, ITPM: 2_000_000, OTPM: 400_000}, Settings{})
	check(t, anthropic, err, "api.anthropic.com/claude-sonnet-4", reserve.Policy{
		{Name: "requests", Limit: lim(4000.0/60, 20)}, {Name: "input-tokens", Limit: lim(2_000_000.0/60, 10_000)},
		{Name: "output-tokens", Limit: lim(400_000.0/60, 2000)}})
	// Azure: 600,000 TPM give 3,600 RPM, 60 a second: at most 60 in any
	// second; tokens: 3,000 at once and 597,000 a minute.
	azure, err := AzureOpenAI(AzureLimits{Deployment: "gpt-4o-eu", TPM: 600_000}, Settings{})
	check(t, azure, err, "azure-openai/gpt-4o-eu", reserve.Policy{
		{Name: "requests", Limit: lim(59, 1)}, {Name: "tokens", Limit: lim(597_000.0/60, 3000)}})
	azure10, err := AzureOpenAI(AzureLimits{Deployment: "d", TPM: 10_000, Period: 10 * time.Second}, Settings{})
	check(t, azure10, err, "azure-openai/d", reserve.Policy{
		{Name: "requests", Limit: lim(0.9, 1)}, {Name: "tokens", Limit: lim(9950.0/60, 50)}})
	gh, err := GitHub(GitHubLimits{Account: "octocat"}, Settings{})
	check(t, gh, err, "api.github.com/octocat", reserve.Policy{
		{Name: "requests", Limit: lim(4917.0/3600, 83)}, {Name: "points", Limit: lim(895.0/60, 5)}})
}

func check(t *testing.T, p *Profile, err error, key string, want reserve.Policy) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	if p.Key != key {
		t.Errorf("%s: key %q, want %q", p.Name, p.Key, key)
	}
	if len(p.Policy) != len(want) {
		t.Fatalf("%s: policy %+v, want %+v", p.Name, p.Policy, want)
	}
	for i, b := range p.Policy {
		w := want[i]
		if b.Name != w.Name || b.Limit.Burst != w.Limit.Burst || b.Window != w.Window || diff(b.Limit.Rate, w.Limit.Rate) > 1e-9 {
			t.Errorf("%s: band %d %+v, want %+v", p.Name, i, b, w)
		}
	}
	// The policy is one reserve accepts.
	if _, err := p.Request(Call{Input: 1}); err != nil {
		t.Errorf("%s: %v", p.Name, err)
	}
}

func diff(a, b float64) float64 {
	if a > b {
		return (a - b) / b
	}
	return (b - a) / b
}

// TestBadLimits: limits or settings a profile cannot use are an error
// matching ErrInvalid.
func TestBadLimits(t *testing.T) {
	for name, build := range map[string]func() (*Profile, error){
		"openai no model": func() (*Profile, error) { return OpenAI(OpenAILimits{RPM: 1, TPM: 1}, Settings{}) },
		"openai rpm 0":    func() (*Profile, error) { return OpenAI(OpenAILimits{Model: "m", TPM: 1}, Settings{}) },
		"burst negative":  func() (*Profile, error) { return OpenAI(OpenAILimits{Model: "m", RPM: 1, TPM: 1}, Settings{Burst: -1}) },
		"burst over a minute": func() (*Profile, error) {
			return OpenAI(OpenAILimits{Model: "m", RPM: 1, TPM: 1}, Settings{Burst: 61 * time.Second})
		},
		"anthropic otpm 0":    func() (*Profile, error) { return Anthropic(AnthropicLimits{Model: "m", RPM: 1, ITPM: 1}, Settings{}) },
		"azure no deployment": func() (*Profile, error) { return AzureOpenAI(AzureLimits{TPM: 600_000}, Settings{}) },
		// 10,000 TPM: 60 RPM, one request a second: evaluated each second,
		// no schedule is safe; each 10 s, 10.
		"azure 1 a second": func() (*Profile, error) { return AzureOpenAI(AzureLimits{Deployment: "d", TPM: 10_000}, Settings{}) },
		"azure period long": func() (*Profile, error) {
			return AzureOpenAI(AzureLimits{Deployment: "d", TPM: 600_000, Period: time.Hour}, Settings{})
		},
		"github no account": func() (*Profile, error) { return GitHub(GitHubLimits{}, Settings{}) },
		"github points 5":   func() (*Profile, error) { return GitHub(GitHubLimits{Account: "a", PointsPerMinute: 5}, Settings{}) },
	} {
		if p, err := build(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, %v; want an error matching ErrInvalid", name, p, err)
		}
	}
}

// TestRequest: each profile's cost of a call, and the calls it refuses.
func TestRequest(t *testing.T) {
	openai := must(OpenAI(OpenAILimits{Model: "m", RPM: 1200, TPM: 600_000}, Settings{}))
	anthropic := must(Anthropic(AnthropicLimits{Model: "m", RPM: 1200, ITPM: 600_000, OTPM: 120_000}, Settings{}))
	azure := must(AzureOpenAI(AzureLimits{Deployment: "d", TPM: 600_000}, Settings{}))
	gh := must(GitHub(GitHubLimits{Account: "a"}, Settings{}))
	for _, tc := range []struct {
		p    *Profile
		call Call
		want reserve.Cost
	}{
		{openai, Call{Input: 100.2, Output: 50}, reserve.Cost{"requests": 1, "tokens": 151}},
		{anthropic, Call{Input: 800, Output: 199.5}, reserve.Cost{"requests": 1, "input-tokens": 800, "output-tokens": 200}},
		{anthropic, Call{Input: 10}, reserve.Cost{"requests": 1, "input-tokens": 10, "output-tokens": 0}},
		{azure, Call{Input: 700.5, Output: 300}, reserve.Cost{"requests": 1, "tokens": 1001}},
		{gh, Call{}, reserve.Cost{"requests": 1, "points": 1}},
		{gh, Call{Method: http.MethodHead}, reserve.Cost{"requests": 1, "points": 1}},
		{gh, Call{Method: http.MethodPost}, reserve.Cost{"requests": 1, "points": 5}},
		{gh, Call{Method: http.MethodDelete}, reserve.Cost{"requests": 1, "points": 5}},
	} {
		r, err := tc.p.Request(tc.call)
		if err != nil {
			t.Errorf("%s %+v: %v", tc.p.Name, tc.call, err)
			continue
		}
		if r.Key != tc.p.Key || len(r.Policy) != len(tc.p.Policy) || !equalCost(r.Cost, tc.want) {
			t.Errorf("%s %+v: %+v, want cost %v", tc.p.Name, tc.call, r, tc.want)
		}
	}
	// Above the burst (3,000 tokens): refused, naming the setting.
	if _, err := openai.Request(Call{Input: 2000, Output: 1001}); !errors.Is(err, reserve.ErrExceedsBurst) || !strings.Contains(err.Error(), "a Settings.Burst of 301ms holds it") {
		t.Errorf("a call above the burst: %v, want ErrExceedsBurst naming the Settings.Burst that holds it", err)
	}
	for _, c := range []Call{{Input: -1}, {Output: -1}} {
		if _, err := openai.Request(c); err == nil {
			t.Errorf("estimate %+v: no error", c)
		}
	}
}

func equalCost(a, b reserve.Cost) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestCredit: what an estimate held beyond the call's use pays for the
// next calls' reservations, up to the band's burst; a use beyond the
// estimate and the credit is settled up.
func TestCredit(t *testing.T) {
	p := must(OpenAI(OpenAILimits{Model: "m", RPM: 1200, TPM: 600_000}, Settings{})) // tokens burst 3,000
	for i, step := range []struct {
		est, reserve, used, settle, credit float64
	}{
		{1000, 1000, 600, 1000, 400}, // 400 unused: credit
		{1000, 600, 1300, 900, 0},    // 400 paid from the credit; 300 used beyond the estimate, settled up
		{1000, 1000, 1000, 1000, 0},
		{1000, 1000, 0, 1000, 1000},
		{500, 0, 200, 0, 800},       // paid from the credit; 300 of it unused
		{3000, 2200, 0, 2200, 3000}, // the credit is kept up to the burst
	} {
		r, err := p.Request(Call{Input: step.est})
		if err != nil {
			t.Fatal(err)
		}
		got := p.settlement(r.Cost, reserve.Cost{"requests": 1, "tokens": step.est}, Usage{Input: step.used})
		if r.Cost["tokens"] != step.reserve || got["tokens"] != step.settle || len(got) != 1 || p.credit["tokens"] != step.credit {
			t.Errorf("step %d, estimate %v, used %v: reserved %v, settles %v, credit %v; want %v, %v, %v",
				i, step.est, step.used, r.Cost["tokens"], got["tokens"], p.credit["tokens"], step.reserve, step.settle, step.credit)
		}
	}
	// Anthropic keeps a credit per unit.
	a := must(Anthropic(AnthropicLimits{Model: "m", RPM: 1200, ITPM: 600_000, OTPM: 120_000}, Settings{}))
	est := reserve.Cost{"requests": 1, "input-tokens": 500, "output-tokens": 100}
	got := a.settlement(est, est, Usage{Input: 400, Output: 150})
	if got["input-tokens"] != 500 || got["output-tokens"] != 150 || a.credit["input-tokens"] != 100 || a.credit["output-tokens"] != 0 {
		t.Errorf("anthropic settles %v with credit %v", got, a.credit)
	}
	// GitHub's costs are known before the call: nothing to settle.
	gh := reserve.Cost{"requests": 1, "points": 1}
	if got := must(GitHub(GitHubLimits{Account: "a"}, Settings{})).settlement(gh, gh, Usage{}); got != nil {
		t.Errorf("github settles %v", got)
	}
}

// TestUsage: each provider's usage as its answers' bodies report it, and
// the body left whole for the caller.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		p    func() (*Profile, error)
		call Call
		body string
		want reserve.Cost
	}{
		{func() (*Profile, error) { return OpenAI(OpenAILimits{Model: "m", RPM: 60, TPM: 60_000}, Settings{}) }, Call{Input: 10},
			`{"id":"x","usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}`, reserve.Cost{"tokens": 12}},
		{func() (*Profile, error) { return OpenAI(OpenAILimits{Model: "m", RPM: 60, TPM: 60_000}, Settings{}) }, Call{Input: 10},
			`{"usage":{"total_tokens":30}}`, reserve.Cost{"tokens": 30}},
		{func() (*Profile, error) {
			return Anthropic(AnthropicLimits{Model: "m", RPM: 60, ITPM: 60_000, OTPM: 60_000}, Settings{})
		}, Call{Input: 10, Output: 10},
			`{"usage":{"input_tokens":7,"cache_creation_input_tokens":2,"cache_read_input_tokens":100,"output_tokens":15}}`,
			reserve.Cost{"input-tokens": 10, "output-tokens": 15}},
		// Azure counts the prompt and max_tokens, whatever the completion used.
		{func() (*Profile, error) { return AzureOpenAI(AzureLimits{Deployment: "d", TPM: 600_000}, Settings{}) }, Call{Input: 10, Output: 40},
			`{"usage":{"prompt_tokens":12,"completion_tokens":5,"total_tokens":17}}`, reserve.Cost{"tokens": 52}},
	} {
		p := must(tc.p())
		req, _ := http.NewRequestWithContext(WithCall(t.Context(), tc.call), http.MethodPost, "http://x/", nil)
		if _, err := p.route(req); err != nil {
			t.Fatal(err)
		}
		resp := &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(tc.body)), Request: req}
		got, err := p.Options().Settle(resp)
		if err != nil || !equalCost(got, tc.want) {
			t.Errorf("%s, body %s: settles %v (%v), want %v", p.Name, tc.body, got, err, tc.want)
		}
		if rest, _ := io.ReadAll(resp.Body); string(rest) != tc.body {
			t.Errorf("%s: the body left for the caller is %q", p.Name, rest)
		}
		resp = &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`{"usage":{}}`)), Request: req}
		if _, err := p.Options().Settle(resp); err == nil {
			t.Errorf("%s: a body without the usage settles", p.Name)
		}
	}
}

// TestRoute: an LLM request needs its estimate (WithCall); a GitHub one is
// costed by its method.
func TestRoute(t *testing.T) {
	openai := must(OpenAI(OpenAILimits{Model: "m", RPM: 60, TPM: 60_000}, Settings{}))
	req, _ := http.NewRequest(http.MethodPost, "http://x/", nil)
	if _, err := openai.route(req); err == nil || !strings.Contains(err.Error(), "WithCall") {
		t.Errorf("an LLM request without an estimate: %v, want an error naming WithCall", err)
	}
	if o := openai.Options(); !o.IgnoreCounts || o.Settle == nil || o.Route == nil {
		t.Errorf("openai's options %+v: want IgnoreCounts, a Route and a Settle", o)
	}
	gh := must(GitHub(GitHubLimits{Account: "a"}, Settings{}))
	rt, err := gh.route(req)
	if err != nil || rt.Cost["points"] != 5 || rt.Key != "api.github.com/a" {
		t.Errorf("github POST: %+v, %v", rt, err)
	}
	if o := gh.Options(); o.IgnoreCounts || o.Settle != nil {
		t.Errorf("github's options %+v: want the counts and no Settle", o)
	}
}
