package provider

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// AzureOptions configure an Azure OpenAI-style deployment. TPM is required.
type AzureOptions struct {
	// TPM is the deployment's tokens per minute. Its requests per minute
	// are derived from it as Azure does: 6 RPM per 1,000 TPM.
	TPM int
	// Period is how often requests are evaluated: Azure "evaluates the rate
	// of incoming requests over a small period of time, typically 1 or 10
	// seconds", and refuses a request beyond RPM*Period/60 in one period.
	// Default time.Second; at most a minute.
	Period time.Duration
	// Latency is added to every call. Default 0.
	Latency time.Duration
}

// Azure is a running fake Azure OpenAI deployment on 127.0.0.1, to Azure's
// published rules (learn.microsoft.com, "Azure OpenAI quotas and
// limits"): a call's "estimated max processed-token count", its prompt
// tokens and its max_tokens, "is added to a running token count of all
// requests that is reset each minute", and requests are counted over
// fixed periods (AzureOptions.Period). Both kinds of window start when the
// provider starts, not on whole minutes or seconds of the clock: a client
// cannot know where they fall. A call is a POST of {"prompt_tokens": P,
// "max_tokens": M}, P+M charged when it arrives on both counts at once or
// not at all. It answers:
//
//   - 200 with {"usage": {"prompt_tokens": P, "completion_tokens": M,
//     "total_tokens": P+M}} (the model writes max_tokens) and
//     x-ratelimit-remaining-requests and x-ratelimit-remaining-tokens;
//   - 429 with retry-after (whole seconds, rounded up) and retry-after-ms
//     (the time to the end of the window that refused it); nothing is
//     charged;
//   - 400 for a body that is not as above with P >= 1, M >= 0 and
//     P+M <= TPM.
type Azure struct {
	opts   AzureOptions
	rpm    int
	perWin float64 // requests per period
	start  time.Time
	ln     net.Listener
	srv    *http.Server

	mu       sync.Mutex
	windows  map[string]*azureCount
	accepted map[string][]Use
	rejected map[string][]time.Time
}

// azureCount is one host's counts in its current windows.
type azureCount struct {
	minute, period   int64 // window numbers
	tokens, requests float64
}

// StartAzure starts an Azure provider on a free 127.0.0.1 port.
func StartAzure(opts AzureOptions) (*Azure, error) {
	if opts.TPM < 1000 {
		return nil, errors.New("provider: TPM must be at least 1000 (6 RPM)")
	}
	if opts.Period == 0 {
		opts.Period = time.Second
	}
	if opts.Period < 0 || opts.Period > time.Minute {
		return nil, errors.New("provider: Period must be from 0 (1 s) to a minute")
	}
	rpm := AzureRPM(opts.TPM)
	a := &Azure{opts: opts, rpm: rpm, perWin: float64(rpm) * opts.Period.Seconds() / 60, start: time.Now(),
		windows: map[string]*azureCount{}, accepted: map[string][]Use{}, rejected: map[string][]time.Time{}}
	var err error
	if a.ln, a.srv, err = serve(a); err != nil {
		return nil, err
	}
	return a, nil
}

// AzureRPM is the requests per minute Azure derives from a deployment's
// tokens per minute: 6 per 1,000.
func AzureRPM(tpm int) int { return tpm * 6 / 1000 }

// URL is the provider's base URL; set the request's Host to choose a host.
func (a *Azure) URL() string { return "http://" + a.ln.Addr().String() }

// Close stops the provider.
func (a *Azure) Close() error { return closeServer(a.srv) }

// ServeHTTP serves one call.
func (a *Azure) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt *int `json:"prompt_tokens"`
		Max    *int `json:"max_tokens"`
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil || body.Prompt == nil || body.Max == nil ||
		*body.Prompt < 1 || *body.Max < 0 || *body.Prompt+*body.Max > a.opts.TPM {
		http.Error(w, fmt.Sprintf(`want {"prompt_tokens": P, "max_tokens": M} with P >= 1, M >= 0, P+M <= %d`, a.opts.TPM), http.StatusBadRequest)
		return
	}
	prompt, maxTokens := *body.Prompt, *body.Max
	n := float64(prompt + maxTokens)
	a.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	since := now.Sub(a.start)
	minute, period := int64(since/time.Minute), int64(since/a.opts.Period)
	c := a.windows[r.Host]
	if c == nil {
		c = &azureCount{minute: minute, period: period}
		a.windows[r.Host] = c
	}
	if c.minute != minute {
		c.minute, c.tokens = minute, 0
	}
	if c.period != period {
		c.period, c.requests = period, 0
	}
	var wait time.Duration
	if c.requests+1 > a.perWin {
		wait = time.Duration(period+1)*a.opts.Period - since
	}
	if c.tokens+n > float64(a.opts.TPM) {
		wait = max(wait, time.Duration(minute+1)*time.Minute-since)
	}
	if wait == 0 {
		c.requests++
		c.tokens += n
		a.accepted[r.Host] = append(a.accepted[r.Host], Use{At: now, Tokens: int(n)})
	} else {
		a.rejected[r.Host] = append(a.rejected[r.Host], now)
	}
	h := w.Header()
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(a.perWin-c.requests)))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(int(float64(a.opts.TPM)-c.tokens)))
	a.mu.Unlock()
	if wait > 0 {
		h.Set("retry-after", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/1e6)), 10))
		http.Error(w, `{"error":{"code":"429","message":"Requests to the deployment have exceeded the rate limit"}}`, http.StatusTooManyRequests)
		return
	}
	if a.opts.Latency > 0 {
		time.Sleep(a.opts.Latency)
	}
	h.Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n", prompt, maxTokens, prompt+maxTokens)
}

// Uses returns the calls host accepted so far (the tokens each charged),
// in order, and the times of the 429s (copies).
func (a *Azure) Uses(host string) ([]Use, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.accepted[host]), slices.Clone(a.rejected[host])
}
