package pacertest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"time"
)

// ProviderOptions are a Provider's terms.
type ProviderOptions struct {
	// Limit requests are accepted in any sliding Window; the others are
	// answered 429 Too Many Requests. Limit at least 1, Window positive.
	Limit  int
	Window time.Duration
	// RetryAfter, if positive, is the wait every 429 asks for. Default:
	// the time until the request would be accepted, in whole seconds
	// rounded up, as Retry-After carries it.
	RetryAfter time.Duration
	// Handler answers the accepted requests. Default: 200 OK, no body.
	Handler http.Handler
}

// A Provider is a fake rate-limited API: an http.Handler that accepts at
// most Limit requests in any sliding Window and answers the others 429 Too
// Many Requests with a Retry-After header. It records both, by time.Now (a
// synctest bubble's, in one). Serve it with net/http/httptest, or call it
// in-process through Client or Transport, which need no network and so
// run in a synctest bubble. A Provider is safe for concurrent use.
type Provider struct {
	opts ProviderOptions

	mu       sync.Mutex
	accepted []time.Time
	rejected []time.Time
}

// NewProvider returns a Provider on opts' terms; an error if they are not
// valid.
func NewProvider(opts ProviderOptions) (*Provider, error) {
	switch {
	case opts.Limit < 1:
		return nil, fmt.Errorf("pacertest: ProviderOptions.Limit %d: at least 1 request per window", opts.Limit)
	case opts.Window <= 0:
		return nil, fmt.Errorf("pacertest: ProviderOptions.Window %v: must be positive", opts.Window)
	case opts.RetryAfter < 0:
		return nil, fmt.Errorf("pacertest: ProviderOptions.RetryAfter %v: must not be negative", opts.RetryAfter)
	}
	return &Provider{opts: opts}, nil
}

// ServeHTTP accepts r, and passes it to the Handler, if fewer than Limit
// requests were accepted in the Window up to now; else it answers 429.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.opts.Limit < 1 {
		http.Error(w, "pacertest: a Provider not made by NewProvider", http.StatusInternalServerError)
		return
	}
	p.mu.Lock()
	now := time.Now() // under the lock: the logs stay in order
	wait := p.admit(now)
	if wait > 0 {
		p.rejected = append(p.rejected, now)
	} else {
		p.accepted = append(p.accepted, now)
	}
	p.mu.Unlock()
	if wait > 0 {
		if p.opts.RetryAfter > 0 {
			wait = p.opts.RetryAfter
		}
		secs := (wait + time.Second - 1) / time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
		http.Error(w, "pacertest: too many requests", http.StatusTooManyRequests)
		return
	}
	if p.opts.Handler != nil {
		p.opts.Handler.ServeHTTP(w, r)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// admit returns 0 if a request at now is accepted, else how long until it
// would be. p.mu is held.
func (p *Provider) admit(now time.Time) time.Duration {
	// The accepted requests in (now-Window, now], oldest first.
	from := now.Add(-p.opts.Window)
	i, _ := slices.BinarySearchFunc(p.accepted, from, func(t, target time.Time) int {
		if t.After(target) {
			return 1
		}
		return -1
	})
	in := p.accepted[i:]
	if len(in) < p.opts.Limit {
		return 0
	}
	// It is accepted once the oldest of the last Limit has left.
	return in[len(in)-p.opts.Limit].Add(p.opts.Window).Sub(now)
}

// Accepted returns when the requests accepted arrived, earliest first.
func (p *Provider) Accepted() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.accepted)
}

// Rejected returns when the requests answered 429 arrived, earliest first.
func (p *Provider) Rejected() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.rejected)
}

// Transport returns an http.RoundTripper that serves every request with
// p, in-process: whatever the request's URL, p answers it, with no
// network, so that it runs in a synctest bubble.
func (p *Provider) Transport() http.RoundTripper { return roundTripper{p} }

// Client returns an http.Client whose Transport is p.Transport().
func (p *Provider) Client() *http.Client { return &http.Client{Transport: p.Transport()} }

type roundTripper struct{ p *Provider }

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		closeBody(req)
		return nil, err
	}
	rec := httptest.NewRecorder()
	rt.p.ServeHTTP(rec, req)
	closeBody(req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// closeBody drains and closes a request's body, as a transport does.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_, _ = io.Copy(io.Discard, req.Body)
		_ = req.Body.Close()
	}
}
