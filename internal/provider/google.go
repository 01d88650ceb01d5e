package provider

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Google is a Google-style API (Gemini's generateContent, as its rate
// limits page describes it): requests per minute and requests per day per
// project and model, the day ending at midnight in Zone (Pacific time by
// Google's rule). It sends no rate-limit header: a call beyond a quota is
// refused with 429 RESOURCE_EXHAUSTED and a google.rpc.QuotaFailure naming
// the quota (its quotaId says PerMinute or PerDay) and a
// google.rpc.RetryInfo, whose retryDelay is the time to the minute's end,
// rounded up to whole seconds, for either quota (as Gemini sends a short
// retryDelay on a day's quota too). A refused call is not counted. Set the
// fields before serving; Google is an http.Handler.
//
// With TokensPerMinute, a call's input tokens (its X-Prompt-Tokens header,
// standing for the prompt's tokens Google counts; default 0) count against
// a quota of input tokens in each minute too ("Tokens per minute (input)"),
// and an accepted call's answer reports them in usageMetadata
// (promptTokenCount, candidatesTokenCount from X-Output-Tokens,
// totalTokenCount), as Gemini's generateContent does.
type Google struct {
	PerMinute       int            // requests in each minute (aligned to the clock's minutes); 0: no such quota
	TokensPerMinute int            // input tokens in each minute; 0: no such quota
	PerDay          int            // requests in each day of Zone; 0: no such quota
	Zone            *time.Location // default America/Los_Angeles
	// Minute is the minute's length (default a minute; a test shortens
	// it): the minutes are aligned to the Unix epoch.
	Minute time.Duration
	// Now is the provider's clock (default time.Now): a test sets it to
	// meet a day's end.
	Now func() time.Time

	mu     sync.Mutex
	minute int64  // the current minute: Unix time / Minute
	day    string // the current day in Zone, "2006-01-02"
	inMin  int
	tokMin int // input tokens in the current minute
	inDay  int
	calls  []GoogleCall
}

// GoogleCall is one call a Google received.
type GoogleCall struct {
	At       time.Time
	Accepted bool
	Quota    string // the quotaId that refused it
	Tokens   int    // its input tokens (X-Prompt-Tokens)
}

// The quotaIds Google's refusals name (Gemini's free tier's).
const (
	GoogleMinuteQuota = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
	GoogleDayQuota    = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
	GoogleTokenQuota  = "GenerateContentInputTokensPerModelPerMinute-FreeTier"
)

func (p *Google) zone() *time.Location {
	if p.Zone != nil {
		return p.Zone
	}
	loc, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		return time.FixedZone("PST", -8*60*60)
	}
	return loc
}

// ServeHTTP answers one call.
func (p *Google) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	tokens, output := 0, 0
	for h, v := range map[string]*int{"X-Prompt-Tokens": &tokens, "X-Output-Tokens": &output} {
		if s := r.Header.Get(h); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				http.Error(w, h+": want a whole number >= 0", http.StatusBadRequest)
				return
			}
			*v = n
		}
	}
	length := p.Minute
	if length <= 0 {
		length = time.Minute
	}
	p.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	if p.Now != nil {
		now = p.Now()
	}
	day := now.In(p.zone()).Format(time.DateOnly)
	minute := now.UnixNano() / int64(length)
	if minute != p.minute {
		p.minute, p.inMin, p.tokMin = minute, 0, 0
	}
	if day != p.day {
		p.day, p.inDay = day, 0
	}
	var quota, metric, value string
	switch {
	case p.PerDay > 0 && p.inDay >= p.PerDay:
		quota, metric, value = GoogleDayQuota, "generativelanguage.googleapis.com/generate_content_requests", strconv.Itoa(p.PerDay)
	case p.PerMinute > 0 && p.inMin >= p.PerMinute:
		quota, metric, value = GoogleMinuteQuota, "generativelanguage.googleapis.com/generate_content_requests", strconv.Itoa(p.PerMinute)
	case p.TokensPerMinute > 0 && p.tokMin+tokens > p.TokensPerMinute:
		quota, metric, value = GoogleTokenQuota, "generativelanguage.googleapis.com/generate_content_free_tier_input_token_count", strconv.Itoa(p.TokensPerMinute)
	default:
		p.inMin++
		p.inDay++
		p.tokMin += tokens
	}
	p.calls = append(p.calls, GoogleCall{At: now, Accepted: quota == "", Quota: quota, Tokens: tokens})
	p.mu.Unlock()
	if quota == "" {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"candidates":[{"content":{"parts":[{"text":"ok"}]}}],"usageMetadata":{"promptTokenCount":%d,"candidatesTokenCount":%d,"totalTokenCount":%d}}`, tokens, output, tokens+output)
		return
	}
	left := int64(length) - now.UnixNano()%int64(length)
	retry := (left + int64(time.Second) - 1) / int64(time.Second) // seconds to the minute's end, rounded up
	body := map[string]any{"error": map[string]any{
		"code":    429,
		"message": "You exceeded your current quota, please check your plan and billing details.",
		"status":  "RESOURCE_EXHAUSTED",
		"details": []any{
			map[string]any{
				"@type": "type.googleapis.com/google.rpc.QuotaFailure",
				"violations": []any{map[string]any{
					"quotaMetric":     metric,
					"quotaId":         quota,
					"quotaDimensions": map[string]string{"location": "global", "model": "gemini-2.0-flash"},
					"quotaValue":      value,
				}},
			},
			map[string]any{"@type": "type.googleapis.com/google.rpc.Help", "links": []any{map[string]string{"description": "Learn more about Gemini API quotas", "url": "https://ai.google.dev/gemini-api/docs/rate-limits"}}},
			map[string]any{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": strconv.FormatInt(retry, 10) + "s"},
		},
	}}
	w.Header().Set("Content-Type", "application/json; charset=UTF-8")
	w.WriteHeader(http.StatusTooManyRequests)
	json.NewEncoder(w).Encode(body)
}

// Calls returns the calls received so far, in order (a copy).
func (p *Google) Calls() []GoogleCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]GoogleCall(nil), p.calls...)
}
