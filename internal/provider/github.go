package provider

import (
	"errors"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// GitHubOptions configure a GitHub-style REST API. Zero values take
// GitHub's published limits for a user token.
type GitHubOptions struct {
	// Primary is the requests a token may make per PrimaryWindow: 5,000 an
	// hour by default. The window starts at the token's first request, and
	// x-ratelimit-reset says when it ends (Unix seconds).
	Primary       int
	PrimaryWindow time.Duration
	// Points is the secondary limit's points per PointsWindow: 900 a
	// minute by default, a GET, HEAD or OPTIONS costing 1 point and any
	// other method 5. They are counted over a sliding window (GitHub does
	// not say how it counts; a sliding window is the strictest reading).
	Points       int
	PointsWindow time.Duration
	// Latency is added to every call. Default 0.
	Latency time.Duration
}

// GitHub is a running fake GitHub REST API on 127.0.0.1: each host is a
// token. It enforces the primary quota (answering 403 with
// x-ratelimit-remaining 0 once it is spent) and the secondary limit of
// points (answering 429 with retry-after and GitHub's message "You have
// exceeded a secondary rate limit"), and sends x-ratelimit-limit,
// -remaining, -used, -reset and -resource on every answer. It does not
// model the secondary limit of 100 concurrent requests, nor that of 80
// content-creating requests a minute.
type GitHub struct {
	opts GitHubOptions
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	tokens   map[string]*githubToken
	rejected map[string][]time.Time
}

type githubToken struct {
	reset time.Time // end of the primary window
	used  int
	calls []GitHubUse // accepted, in order
}

// GitHubUse is one call GitHub accepted: when, and its points.
type GitHubUse struct {
	At     time.Time
	Points int
}

// GitHubPoints is a REST call's points under the secondary limit: 1 for
// GET, HEAD and OPTIONS, 5 for any other method.
func GitHubPoints(method string) int {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return 1
	}
	return 5
}

// StartGitHub starts a GitHub provider on a free 127.0.0.1 port.
func StartGitHub(opts GitHubOptions) (*GitHub, error) {
	if opts.Primary < 0 || opts.PrimaryWindow < 0 || opts.Points < 0 || opts.PointsWindow < 0 {
		return nil, errors.New("provider: negative GitHubOptions")
	}
	if opts.Primary == 0 {
		opts.Primary = 5000
	}
	if opts.PrimaryWindow == 0 {
		opts.PrimaryWindow = time.Hour
	}
	if opts.Points == 0 {
		opts.Points = 900
	}
	if opts.PointsWindow == 0 {
		opts.PointsWindow = time.Minute
	}
	g := &GitHub{opts: opts, tokens: map[string]*githubToken{}, rejected: map[string][]time.Time{}}
	var err error
	if g.ln, g.srv, err = serve(g); err != nil {
		return nil, err
	}
	return g, nil
}

// URL is the provider's base URL; set the request's Host to choose a host.
func (g *GitHub) URL() string { return "http://" + g.ln.Addr().String() }

// Close stops the provider.
func (g *GitHub) Close() error { return closeServer(g.srv) }

// ServeHTTP serves one call.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	points := GitHubPoints(r.Method)
	g.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	t := g.tokens[r.Host]
	if t == nil || !now.Before(t.reset) {
		if t == nil {
			t = &githubToken{}
			g.tokens[r.Host] = t
		}
		t.reset, t.used = now.Add(g.opts.PrimaryWindow), 0
	}
	status, retry := http.StatusOK, time.Duration(0)
	switch {
	case t.used >= g.opts.Primary:
		status = http.StatusForbidden
	default:
		inWindow := 0
		for i := len(t.calls) - 1; i >= 0 && now.Sub(t.calls[i].At) < g.opts.PointsWindow; i-- {
			inWindow += t.calls[i].Points
			if inWindow+points > g.opts.Points {
				status, retry = http.StatusTooManyRequests, t.calls[i].At.Add(g.opts.PointsWindow).Sub(now)
				break
			}
		}
	}
	if status == http.StatusOK {
		t.used++
		t.calls = append(t.calls, GitHubUse{At: now, Points: points})
	} else {
		g.rejected[r.Host] = append(g.rejected[r.Host], now)
	}
	h := w.Header()
	h.Set("x-ratelimit-limit", strconv.Itoa(g.opts.Primary))
	h.Set("x-ratelimit-remaining", strconv.Itoa(g.opts.Primary-t.used))
	h.Set("x-ratelimit-used", strconv.Itoa(t.used))
	h.Set("x-ratelimit-reset", strconv.FormatInt(int64(math.Ceil(float64(t.reset.UnixNano())/1e9)), 10))
	h.Set("x-ratelimit-resource", "core")
	h.Set("x-github-request-id", "0000:0000")
	g.mu.Unlock()
	switch status {
	case http.StatusForbidden:
		http.Error(w, `{"message":"API rate limit exceeded"}`, status)
		return
	case http.StatusTooManyRequests:
		h.Set("retry-after", strconv.Itoa(int(math.Ceil(retry.Seconds()))))
		http.Error(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`, status)
		return
	}
	if g.opts.Latency > 0 {
		time.Sleep(g.opts.Latency)
	}
	w.Write([]byte("{}\n"))
}

// Uses returns the calls host accepted so far, in order, and the times of
// its refusals (403 and 429; copies).
func (g *GitHub) Uses(host string) ([]GitHubUse, []time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var calls []GitHubUse
	if t := g.tokens[host]; t != nil {
		calls = slices.Clone(t.calls)
	}
	return calls, slices.Clone(g.rejected[host])
}
