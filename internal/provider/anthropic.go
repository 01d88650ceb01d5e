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

// AnthropicOptions configure an Anthropic-style provider. RPM, ITPM and
// OTPM are required.
type AnthropicOptions struct {
	// RPM, ITPM and OTPM are the requests, input tokens and output tokens
	// each host accepts per minute: three token buckets, as Anthropic
	// describes its limits ("the token bucket algorithm: your capacity is
	// continuously replenished up to your maximum limit"). A call needs 1
	// request, its input tokens and its output tokens.
	RPM, ITPM, OTPM int
	// Hold is how much of each quota a bucket holds, as LLMOptions.Hold: a
	// minute's worth by default, time.Second to enforce it per second.
	Hold time.Duration
	// Latency is added to every call. Default 0.
	Latency time.Duration
}

// Anthropic is a running fake Anthropic Messages API on 127.0.0.1. A call
// is a POST whose JSON body is {"input_tokens": I, "output_tokens": O}:
// the tokens the call will use (the simulation decides them). The provider
// charges them when the call arrives, on the three buckets at once or not
// at all. (Anthropic charges the output tokens' bucket max_tokens at the
// start and the actual count at the end; this model charges the actual
// count at the start, which a client cannot know either.) It answers:
//
//   - 200 with {"usage": {"input_tokens": I, "output_tokens": O}} and
//     Anthropic's headers anthropic-ratelimit-{requests,input-tokens,
//     output-tokens}-{limit,remaining,reset}, the reset an RFC 3339 time
//     at which the bucket is full again;
//   - 429 with the same headers and retry-after (whole seconds, rounded
//     up) when a bucket lacks room; nothing is charged;
//   - 400 for a body that is not as above with 1 <= I <= ITPM and
//     0 <= O <= OTPM.
type Anthropic struct {
	opts AnthropicOptions
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	buckets  map[string]*[3]bucket // by host: requests, input, output
	accepted map[string][]AnthropicUse
	rejected map[string][]time.Time
}

// AnthropicUse is one call an Anthropic provider accepted.
type AnthropicUse struct {
	At            time.Time
	Input, Output int
}

// StartAnthropic starts an Anthropic provider on a free 127.0.0.1 port.
func StartAnthropic(opts AnthropicOptions) (*Anthropic, error) {
	if opts.RPM < 1 || opts.ITPM < 1 || opts.OTPM < 1 {
		return nil, errors.New("provider: RPM, ITPM and OTPM must be at least 1")
	}
	if opts.Hold < 0 || opts.Hold > time.Minute {
		return nil, errors.New("provider: Hold must be from 0 (a minute) to a minute")
	}
	a := &Anthropic{opts: opts, buckets: map[string]*[3]bucket{}, accepted: map[string][]AnthropicUse{}, rejected: map[string][]time.Time{}}
	var err error
	if a.ln, a.srv, err = serve(a); err != nil {
		return nil, err
	}
	return a, nil
}

// URL is the provider's base URL; set the request's Host to choose a host.
func (a *Anthropic) URL() string { return "http://" + a.ln.Addr().String() }

// Close stops the provider.
func (a *Anthropic) Close() error { return closeServer(a.srv) }

// ServeHTTP serves one call.
func (a *Anthropic) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Input  *int `json:"input_tokens"`
		Output *int `json:"output_tokens"`
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil || body.Input == nil || body.Output == nil ||
		*body.Input < 1 || *body.Input > a.opts.ITPM || *body.Output < 0 || *body.Output > a.opts.OTPM {
		http.Error(w, fmt.Sprintf(`want {"input_tokens": I, "output_tokens": O} with 1 <= I <= %d, 0 <= O <= %d`, a.opts.ITPM, a.opts.OTPM), http.StatusBadRequest)
		return
	}
	in, out := *body.Input, *body.Output
	quotas := [3]int{a.opts.RPM, a.opts.ITPM, a.opts.OTPM}
	need := [3]float64{1, float64(in), float64(out)}
	a.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	b := a.buckets[r.Host]
	if b == nil {
		b = &[3]bucket{}
		for i, q := range quotas {
			b[i] = newBucket(held(q, a.opts.Hold), float64(q)/60, now)
		}
		a.buckets[r.Host] = b
	}
	ok, wait := true, time.Duration(0)
	for i := range b {
		okI, waitI := b[i].take(now, need[i])
		ok = ok && okI
		wait = max(wait, waitI)
	}
	if ok {
		for i := range b {
			b[i].level -= need[i]
		}
		a.accepted[r.Host] = append(a.accepted[r.Host], AnthropicUse{At: now, Input: in, Output: out})
	} else {
		a.rejected[r.Host] = append(a.rejected[r.Host], now)
	}
	h := w.Header()
	for i, name := range [3]string{"requests", "input-tokens", "output-tokens"} {
		h.Set("anthropic-ratelimit-"+name+"-limit", strconv.Itoa(quotas[i]))
		h.Set("anthropic-ratelimit-"+name+"-remaining", strconv.Itoa(int(b[i].level)))
		h.Set("anthropic-ratelimit-"+name+"-reset", now.Add(b[i].untilFull()).UTC().Format(time.RFC3339))
	}
	a.mu.Unlock()
	if !ok {
		h.Set("retry-after", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		http.Error(w, `{"type":"error","error":{"type":"rate_limit_error","message":"rate limit exceeded"}}`, http.StatusTooManyRequests)
		return
	}
	if a.opts.Latency > 0 {
		time.Sleep(a.opts.Latency)
	}
	h.Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"usage":{"input_tokens":%d,"output_tokens":%d}}`+"\n", in, out)
}

// Uses returns the calls host accepted so far, in order, and the times of
// the 429s (copies).
func (a *Anthropic) Uses(host string) ([]AnthropicUse, []time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.accepted[host]), slices.Clone(a.rejected[host])
}
