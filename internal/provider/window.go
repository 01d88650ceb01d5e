package provider

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The dialects a Window answers in: how it reports its count.
const (
	// DialectGitHub: x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset as the window's end in Unix seconds.
	DialectGitHub = "github"
	// DialectXRateLimit: the same names with x-ratelimit-reset in seconds
	// from now, rounded up, as many APIs send them.
	DialectXRateLimit = "x-ratelimit"
	// DialectDraft06: the IETF draft's -06 RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (seconds, rounded up).
	DialectDraft06 = "draft-06"
	// DialectDraft07: the draft's -07 single RateLimit Dictionary,
	// "limit=50, remaining=7, reset=3", with RateLimit-Policy "50;w=5", as
	// express-rate-limit sends it with draft-7.
	DialectDraft07 = "draft-07"
	// DialectDraft10: the draft's -08 to -11 Lists, RateLimit-Policy
	// `"window";q=50;w=5` and RateLimit `"window";r=7;t=3`.
	DialectDraft10 = "draft-10"
	// DialectOpenAI: OpenAI's x-ratelimit-limit-requests,
	// x-ratelimit-remaining-requests and x-ratelimit-reset-requests, the
	// latter a Go duration to the window's end, to the millisecond ("1.5s",
	// "120ms"); a 429 carries OpenAI's JSON error body (OpenAIRefusal) and
	// no Retry-After.
	DialectOpenAI = "openai"
	// DialectAnthropic: Anthropic's anthropic-ratelimit-requests-limit,
	// -remaining and -reset, the latter the window's end as an RFC 3339
	// time; a 429 carries retry-after, the seconds to the window's end
	// rounded up, as Anthropic documents it.
	DialectAnthropic = "anthropic"
)

// OpenAIRefusal is the body of a Window's 429 in DialectOpenAI.
const OpenAIRefusal = `{"error":{"message":"Rate limit reached for requests","type":"requests","code":"rate_limit_exceeded"}}`

// WindowDialects are the dialects a Window speaks: every dialect of
// docs/http.md that reports a count of calls.
var WindowDialects = []string{DialectGitHub, DialectXRateLimit, DialectDraft06, DialectDraft07, DialectDraft10, DialectOpenAI, DialectAnthropic}

// Window is a fixed-window API: at most Quota calls in each window of length
// Per, windows aligned to the Unix epoch (as express-rate-limit and GitHub
// count). A call beyond the quota is refused with 429, without Retry-After,
// and not counted (DialectAnthropic's 429 alone carries a retry-after).
// Every answer reports the count in Dialect. Latency is
// the call's round trip: half of it before the call is counted, half after.
// Set the fields before serving; Window is an http.Handler.
type Window struct {
	Quota   int
	Per     time.Duration // a whole number of seconds
	Dialect string
	Latency time.Duration

	mu    sync.Mutex
	win   int64 // the current window's number
	used  int   // calls counted in it
	calls []WindowCall
}

// WindowCall is one call a Window received.
type WindowCall struct {
	At       time.Time // when it was counted (or refused)
	Window   int64     // the window's number: Unix time / Per
	Accepted bool
}

// ServeHTTP answers one call.
func (p *Window) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	time.Sleep(p.Latency / 2)
	p.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	win := now.UnixNano() / int64(p.Per)
	if win != p.win {
		p.win, p.used = win, 0
	}
	ok := p.used < p.Quota
	if ok {
		p.used++
	}
	left := p.Quota - p.used
	p.calls = append(p.calls, WindowCall{At: now, Window: win, Accepted: ok})
	p.mu.Unlock()

	end := time.Unix(0, (win+1)*int64(p.Per))
	CountHeaders(w.Header(), p.Dialect, int64(p.Quota), int64(left), p.Per, end, now, !ok)
	time.Sleep(p.Latency / 2)
	if !ok {
		if p.Dialect == DialectOpenAI {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(OpenAIRefusal))
			return
		}
		w.WriteHeader(http.StatusTooManyRequests)
		return
	}
	w.Write([]byte("ok"))
}

// CountHeaders sets h to report, in dialect, a window of quota calls of
// length per ending at end, with left calls left at now; refused is true
// for a 429 (DialectAnthropic's then carries retry-after). The combination
// runner's provider (integration/combo) speaks each dialect through it.
func CountHeaders(h http.Header, dialect string, quota, left int64, per time.Duration, end, now time.Time, refused bool) {
	reset := int64(math.Ceil(end.Sub(now).Seconds()))
	q, l, rs, secs := strconv.FormatInt(quota, 10), strconv.FormatInt(left, 10), strconv.FormatInt(reset, 10), int64(per/time.Second)
	switch dialect {
	case DialectGitHub:
		h.Set("X-RateLimit-Limit", q)
		h.Set("X-RateLimit-Remaining", l)
		h.Set("X-RateLimit-Reset", strconv.FormatInt(end.Unix(), 10))
	case DialectXRateLimit:
		h.Set("X-RateLimit-Limit", q)
		h.Set("X-RateLimit-Remaining", l)
		h.Set("X-RateLimit-Reset", rs)
	case DialectDraft06:
		h.Set("RateLimit-Limit", q)
		h.Set("RateLimit-Remaining", l)
		h.Set("RateLimit-Reset", rs)
		h.Set("RateLimit-Policy", fmt.Sprintf("%s;w=%d", q, secs))
	case DialectDraft07:
		h.Set("RateLimit", fmt.Sprintf("limit=%s, remaining=%s, reset=%s", q, l, rs))
		h.Set("RateLimit-Policy", fmt.Sprintf("%s;w=%d", q, secs))
	case DialectDraft10:
		h.Set("RateLimit-Policy", fmt.Sprintf(`"window";q=%s;w=%d`, q, secs))
		h.Set("RateLimit", fmt.Sprintf(`"window";r=%s;t=%s`, l, rs))
	case DialectOpenAI:
		h.Set("x-ratelimit-limit-requests", q)
		h.Set("x-ratelimit-remaining-requests", l)
		h.Set("x-ratelimit-reset-requests", end.Sub(now).Round(time.Millisecond).String())
	case DialectAnthropic:
		h.Set("anthropic-ratelimit-requests-limit", q)
		h.Set("anthropic-ratelimit-requests-remaining", l)
		h.Set("anthropic-ratelimit-requests-reset", end.UTC().Format(time.RFC3339))
		if refused {
			h.Set("retry-after", rs)
		}
	}
}

// Calls returns the calls received so far, in order (a copy).
func (p *Window) Calls() []WindowCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]WindowCall(nil), p.calls...)
}

// WindowStats are a Window's counts over whole windows.
type WindowStats struct {
	Windows    int   // whole windows judged
	Used       int   // calls accepted in them
	Refused    int   // calls refused in them
	MaxRefused int   // the most refused in one of them
	MinUsed    int   // the fewest accepted in one of them
	PerWindow  []int // the calls accepted in each
	RefusedPer []int // the calls refused in each
}

// Stats counts the calls of the windows after the first one with a call
// and before the last one with a call (the whole windows of a run).
func (p *Window) Stats() WindowStats {
	calls := p.Calls()
	if len(calls) == 0 {
		return WindowStats{}
	}
	first, last := calls[0].Window, calls[len(calls)-1].Window
	used := map[int64]int{}
	refused := map[int64]int{}
	for _, c := range calls {
		if c.Accepted {
			used[c.Window]++
		} else {
			refused[c.Window]++
		}
	}
	s := WindowStats{MinUsed: math.MaxInt}
	for win := first + 1; win < last; win++ {
		s.Windows++
		s.Used += used[win]
		s.Refused += refused[win]
		s.MaxRefused = max(s.MaxRefused, refused[win])
		s.MinUsed = min(s.MinUsed, used[win])
		s.PerWindow = append(s.PerWindow, used[win])
		s.RefusedPer = append(s.RefusedPer, refused[win])
	}
	if s.Windows == 0 {
		s.MinUsed = 0
	}
	return s
}
