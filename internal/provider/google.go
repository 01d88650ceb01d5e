package provider

import (
	"encoding/json"
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
type Google struct {
	PerMinute int            // requests in each minute (aligned to the clock's minutes); 0: no such quota
	PerDay    int            // requests in each day of Zone; 0: no such quota
	Zone      *time.Location // default America/Los_Angeles
	// Now is the provider's clock (default time.Now): a test sets it to
	// meet a day's end.
	Now func() time.Time

	mu     sync.Mutex
	minute int64  // the current minute: Unix time / 60 s
	day    string // the current day in Zone, "2006-01-02"
	inMin  int
	inDay  int
	calls  []GoogleCall
}

// GoogleCall is one call a Google received.
type GoogleCall struct {
	At       time.Time
	Accepted bool
	Quota    string // the quotaId that refused it
}

// The quotaIds Google's refusals name (Gemini's free tier's).
const (
	GoogleMinuteQuota = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
	GoogleDayQuota    = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
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
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	day := now.In(p.zone()).Format(time.DateOnly)
	minute := now.Unix() / 60
	p.mu.Lock()
	if minute != p.minute {
		p.minute, p.inMin = minute, 0
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
	default:
		p.inMin++
		p.inDay++
	}
	p.calls = append(p.calls, GoogleCall{At: now, Accepted: quota == "", Quota: quota})
	p.mu.Unlock()
	if quota == "" {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"candidates":[{"content":{"parts":[{"text":"ok"}]}}]}`))
		return
	}
	retry := 60 - now.Unix()%60 // seconds to the minute's end, rounded up
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
