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

// TestGeminiProfile: Gemini's policy, exactly (requests and input tokens
// as a burst and the rest of the minute, the requests per day a calendar
// day in Los Angeles); a call's cost; the settle from usageMetadata; the
// options' MaxWait and DailyReset; bad limits.
func TestGeminiProfile(t *testing.T) {
	p, err := Gemini(GeminiLimits{Project: "proj", Model: "gemini-2.5-flash", RPM: 1000, TPM: 1_000_000, RPD: 10_000}, Settings{})
	if err != nil {
		t.Fatal(err)
	}
	// 300 ms of 1,000 RPM: 5 at once and 995 a minute; of 1,000,000 TPM:
	// 5,000 tokens at once and 995,000 a minute.
	check(t, p, nil, "generativelanguage.googleapis.com/proj/gemini-2.5-flash", reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 995.0 / 60, Burst: 5}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 995_000.0 / 60, Burst: 5000}},
		{Name: "daily", Window: p.Policy[2].Window},
	})
	w := p.Policy[2]
	if w.Unit != "requests" || w.Window.N != 10_000 || w.Window.Calendar != reserve.Day || w.Window.Location.String() != "America/Los_Angeles" {
		t.Errorf("the daily band %+v: want 10,000 requests a calendar day in America/Los_Angeles", w)
	}
	// The free tier's 15 RPM: a burst of 1 and 14 more a minute.
	free := must(Gemini(GeminiLimits{Project: "p", Model: "m", RPM: 15, TPM: 250_000, RPD: 1000}, Settings{}))
	if b := free.Policy[0].Limit; b.Burst != 1 || diff(b.Rate, 14.0/60) > 1e-9 {
		t.Errorf("15 RPM: %+v, want a burst of 1 at 14 a minute", b)
	}

	for name, l := range map[string]GeminiLimits{
		"no project":   {Model: "m", RPM: 10, TPM: 10, RPD: 10},
		"project /":    {Project: "a/b", Model: "m", RPM: 10, TPM: 10, RPD: 10},
		"no model":     {Project: "p", RPM: 10, TPM: 10, RPD: 10},
		"rpm 1":        {Project: "p", Model: "m", RPM: 1, TPM: 10, RPD: 10},
		"tpm 0":        {Project: "p", Model: "m", RPM: 10, RPD: 10},
		"rpd 0":        {Project: "p", Model: "m", RPM: 10, TPM: 10},
		"rpd negative": {Project: "p", Model: "m", RPM: 10, TPM: 10, RPD: -5},
	} {
		if p, err := Gemini(l, Settings{}); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, %v; want an error matching ErrInvalid", name, p, err)
		}
	}
	if _, err := Gemini(GeminiLimits{Project: "p", Model: "m", RPM: 10, TPM: 10, RPD: 10}, Settings{Burst: -time.Second}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative Burst: %v", err)
	}
	// A Burst of a minute leaves 1 a minute beyond the burst.
	if b := must(Gemini(GeminiLimits{Project: "p", Model: "m", RPM: 10, TPM: 10, RPD: 10}, Settings{Burst: time.Minute})).Policy[0].Limit; b.Burst != 9 || diff(b.Rate, 1.0/60) > 1e-9 {
		t.Errorf("a Burst of a minute: %+v", b)
	}

	r, err := p.Request(Call{Input: 812.4, Output: 2000})
	if err != nil || !equalCost(r.Cost, reserve.Cost{"requests": 1, "tokens": 813}) {
		t.Errorf("a call: %+v, %v; want 1 request and 813 tokens (output not counted)", r.Cost, err)
	}

	req, _ := http.NewRequestWithContext(WithCall(t.Context(), Call{Input: 800}), http.MethodPost, "http://x/", nil)
	if _, err := p.route(req); err != nil {
		t.Fatal(err)
	}
	body := `{"candidates":[],"usageMetadata":{"promptTokenCount":750,"candidatesTokenCount":300,"totalTokenCount":1050}}`
	resp := &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(body)), Request: req}
	o := p.Options()
	got, err := o.Settle(resp)
	if err != nil || !equalCost(got, reserve.Cost{"tokens": 800}) || p.credit["tokens"] != 50 {
		t.Errorf("settles %v (%v), credit %v; want 800 reserved settled and 50 of credit", got, err, p.credit)
	}
	if rest, _ := io.ReadAll(resp.Body); string(rest) != body {
		t.Errorf("the body left for the caller is %q", rest)
	}
	resp = &http.Response{StatusCode: 200, Body: io.NopCloser(strings.NewReader(`{"usageMetadata":{"totalTokenCount":5}}`)), Request: req}
	if _, err := o.Settle(resp); err == nil {
		t.Error("a body without promptTokenCount settles")
	}
	if o.MaxWait < 25*time.Hour || o.DailyReset == nil || o.DailyReset.String() != "America/Los_Angeles" || !o.IgnoreCounts || o.ShopifyThrottle {
		t.Errorf("options: MaxWait %v, DailyReset %v, IgnoreCounts %v; want ≥ 25 h, America/Los_Angeles, true", o.MaxWait, o.DailyReset, o.IgnoreCounts)
	}
	if o := must(OpenAI(OpenAILimits{Model: "m", RPM: 60, TPM: 60_000}, Settings{})).Options(); o.MaxWait != 0 || o.DailyReset != nil {
		t.Errorf("openai's options: MaxWait %v, DailyReset %v; want pacehttp's defaults", o.MaxWait, o.DailyReset)
	}
}
