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

// LLMOptions configure an LLM-style provider. RPM and TPM are required.
type LLMOptions struct {
	// RPM and TPM are the requests and tokens each host accepts per
	// minute. Each is a token bucket, as OpenAI and Anthropic describe
	// theirs: it holds a minute's quota and refills continuously at
	// quota/60 per second; a call needs 1 request and its tokens.
	RPM, TPM int
	// Latency is added to every call (the model "generating"). Default 0.
	Latency time.Duration
	// Hold is how much of each quota a bucket holds: a minute's worth by
	// default; time.Second enforces the minute's quota per second, as
	// OpenAI says it may ("RPM 60 may be enforced as 1 request per
	// second"): a bucket of RPM/60 requests and TPM/60 tokens, refilled at
	// the same rates. At most a minute.
	Hold time.Duration
}

// held is a quota of n per minute as a bucket holding hold's worth (a
// minute's by default), at least 1 unit.
func held(n int, hold time.Duration) float64 {
	if hold <= 0 || hold > time.Minute {
		return float64(n)
	}
	return max(1, float64(n)*hold.Seconds()/60)
}

// LLM is a running fake LLM API on 127.0.0.1. A call is a POST whose JSON
// body is {"tokens": N}: the tokens the call will use (prompt and
// completion together; the simulation decides them, the client's estimate
// is its own business). The provider charges them when the call arrives,
// on both buckets at once or not at all. It answers:
//
//   - 200 with {"usage": {"total_tokens": N}} and OpenAI's headers:
//     x-ratelimit-limit-requests, x-ratelimit-limit-tokens,
//     x-ratelimit-remaining-requests, x-ratelimit-remaining-tokens, and
//     x-ratelimit-reset-requests, x-ratelimit-reset-tokens (the time until
//     the bucket is full again, as "1s", "6m0s" or "12ms");
//   - 429 with the same headers, retry-after (whole seconds, rounded up)
//     and retry-after-ms when a bucket lacks room; nothing is charged;
//   - 400 for a body that is not {"tokens": N} with 1 <= N <= TPM.
type LLM struct {
	opts LLMOptions
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	buckets  map[string]*[2]bucket // by host: requests, tokens
	accepted map[string][]Use      // by host, in order
	rejected map[string][]time.Time
}

// Use is one call an LLM accepted: when, and the tokens it charged.
type Use struct {
	At     time.Time
	Tokens int
}

// bucket is a token bucket that starts full.
type bucket struct {
	capacity, rate float64 // units, units/s
	level          float64
	at             time.Time
}

// newBucket returns a full bucket of capacity units refilled at rate per
// second.
func newBucket(capacity, rate float64, now time.Time) bucket {
	return bucket{capacity: capacity, rate: rate, level: capacity, at: now}
}

// take reports whether n units are there at now and takes them if so; if
// not, it returns how long until they are.
func (b *bucket) take(now time.Time, n float64) (bool, time.Duration) {
	b.refill(now)
	if b.level >= n {
		return true, 0
	}
	return false, time.Duration(math.Ceil((n - b.level) / b.rate * 1e9))
}

func (b *bucket) refill(now time.Time) {
	if now.After(b.at) {
		b.level = math.Min(b.capacity, b.level+now.Sub(b.at).Seconds()*b.rate)
		b.at = now
	}
}

// untilFull is how long until b holds its capacity again.
func (b *bucket) untilFull() time.Duration {
	return time.Duration((b.capacity - b.level) / b.rate * 1e9)
}

// StartLLM starts an LLM provider on a free 127.0.0.1 port.
func StartLLM(opts LLMOptions) (*LLM, error) {
	if opts.RPM < 1 || opts.TPM < 1 {
		return nil, errors.New("provider: RPM and TPM must be at least 1")
	}
	if opts.Hold < 0 || opts.Hold > time.Minute {
		return nil, errors.New("provider: Hold must be from 0 (a minute) to a minute")
	}
	l := &LLM{opts: opts, buckets: map[string]*[2]bucket{}, accepted: map[string][]Use{}, rejected: map[string][]time.Time{}}
	var err error
	if l.ln, l.srv, err = serve(l); err != nil {
		return nil, err
	}
	return l, nil
}

// URL is the provider's base URL; set the request's Host to choose a host.
func (l *LLM) URL() string { return "http://" + l.ln.Addr().String() }

// Close stops the provider.
func (l *LLM) Close() error { return closeServer(l.srv) }

// ServeHTTP serves one call.
func (l *LLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Tokens *int `json:"tokens"`
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&body); err != nil || body.Tokens == nil || *body.Tokens < 1 || *body.Tokens > l.opts.TPM {
		http.Error(w, fmt.Sprintf(`want {"tokens": N} with 1 <= N <= %d`, l.opts.TPM), http.StatusBadRequest)
		return
	}
	n := *body.Tokens
	l.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	b := l.buckets[r.Host]
	if b == nil {
		b = &[2]bucket{
			newBucket(held(l.opts.RPM, l.opts.Hold), float64(l.opts.RPM)/60, now),
			newBucket(held(l.opts.TPM, l.opts.Hold), float64(l.opts.TPM)/60, now),
		}
		l.buckets[r.Host] = b
	}
	okR, waitR := b[0].take(now, 1)
	okT, waitT := b[1].take(now, float64(n))
	ok := okR && okT
	if ok {
		b[0].level--
		b[1].level -= float64(n)
		l.accepted[r.Host] = append(l.accepted[r.Host], Use{At: now, Tokens: n})
	} else {
		l.rejected[r.Host] = append(l.rejected[r.Host], now)
	}
	h := w.Header()
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(l.opts.RPM))
	h.Set("x-ratelimit-limit-tokens", strconv.Itoa(l.opts.TPM))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(int(b[0].level)))
	h.Set("x-ratelimit-remaining-tokens", strconv.Itoa(int(b[1].level)))
	h.Set("x-ratelimit-reset-requests", OpenAIDuration(b[0].untilFull()))
	h.Set("x-ratelimit-reset-tokens", OpenAIDuration(b[1].untilFull()))
	l.mu.Unlock()
	if !ok {
		wait := max(waitR, waitT)
		h.Set("retry-after", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		h.Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(wait)/1e6)), 10))
		http.Error(w, "429 rate limit reached", http.StatusTooManyRequests)
		return
	}
	if l.opts.Latency > 0 {
		time.Sleep(l.opts.Latency)
	}
	h.Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`+"\n", n)
}

// OpenAIDuration formats d as OpenAI's x-ratelimit-reset-* headers do:
// "12ms" under a second, else Go's form in whole seconds ("1s", "6m0s",
// "1h2m3s").
func OpenAIDuration(d time.Duration) string {
	if d < time.Second {
		return strconv.FormatInt(int64(math.Ceil(float64(d)/1e6)), 10) + "ms"
	}
	return d.Round(time.Second).String()
}

// LLMStats are an LLM's counts for one host.
type LLMStats struct {
	Calls, Rejected int
	Tokens          int       // tokens of the calls accepted
	First, Last     time.Time // first and last call accepted
}

// Stats returns the counts so far for host.
func (l *LLM) Stats(host string) LLMStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	log := l.accepted[host]
	st := LLMStats{Calls: len(log), Rejected: len(l.rejected[host])}
	for _, u := range log {
		st.Tokens += u.Tokens
	}
	if len(log) > 0 {
		st.First, st.Last = log[0].At, log[len(log)-1].At
	}
	return st
}

// Uses returns the calls host accepted so far, in order, and the times of
// the 429s (copies: the caller may keep them).
func (l *LLM) Uses(host string) ([]Use, []time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.accepted[host]), slices.Clone(l.rejected[host])
}
