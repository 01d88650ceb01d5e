// Package provider is a strict rate-limited HTTP API for the examples and
// integration tests: the judge of pacer's claims. It serves many hosts (by
// the request's Host), allows each host at most Limit calls in any sliding
// second (and optionally Limit/10 in any 100 ms), answers 429 with
// Retry-After beyond that, adds a latency, and counts accepted and rejected
// calls per host and per client (the X-Client header). StartLLM starts an
// LLM-style API instead: requests and tokens per minute (llm.go);
// StartConcurrency one that limits the calls open at once, 429 beyond N
// (concurrency.go).
package provider

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Options configure a provider. Limit is required.
type Options struct {
	// Limit is the calls each host accepts in any sliding 1 s window.
	Limit int
	// Strict100ms also limits each host to ceil(Limit/10) calls in any
	// sliding 100 ms window. Default false.
	Strict100ms bool
	// Latency is added to every call. Default 0.
	Latency time.Duration
	// Leaky replaces the sliding windows with a leaky bucket per host at
	// Limit calls per second (see Leaky): a millisecond clock and one call
	// of tolerance. Default false.
	Leaky bool
	// RetryAfterMs adds retry-after-ms to each 429 (as OpenAI and Azure
	// OpenAI send it): the exact time until the call would be accepted, in
	// milliseconds, rounded up, beside Retry-After's whole seconds.
	// Default false.
	RetryAfterMs bool
}

// Server is a running provider on 127.0.0.1.
type Server struct {
	opts Options
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	leaky    map[string]*Leaky      // by host, with Options.Leaky
	accepted map[string][]time.Time // by host, in order
	rejected map[string][]time.Time // by host, in order
	byClient map[string]Counts
}

// Counts are calls accepted and rejected.
type Counts struct{ Accepted, Rejected int }

// Start starts a provider on a free 127.0.0.1 port.
func Start(opts Options) (*Server, error) {
	if opts.Limit < 1 {
		return nil, errors.New("provider: Limit must be at least 1")
	}
	s := &Server{opts: opts, leaky: map[string]*Leaky{}, accepted: map[string][]time.Time{}, rejected: map[string][]time.Time{}, byClient: map[string]Counts{}}
	var err error
	if s.ln, s.srv, err = serve(s); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the provider's base URL; set the request's Host to choose a host.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() }

// SetLimit changes the calls each host accepts in any sliding second, from
// now on (a provider that changes its limit mid-run). n must be at least 1.
func (s *Server) SetLimit(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opts.Limit = max(n, 1)
	clear(s.leaky) // leaky buckets take the new rate
}

// Close stops the provider.
func (s *Server) Close() error { return closeServer(s.srv) }

// serve serves h on a free 127.0.0.1 port until the server is closed
// (closeServer): every provider of this package starts so.
func serve(h http.Handler) (net.Listener, *http.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	return ln, srv, nil
}

// closeServer shuts srv down, giving calls in flight 2 s to finish.
func closeServer(srv *http.Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return srv.Shutdown(ctx)
}

// ServeHTTP accepts or rejects one call.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.opts.Latency > 0 {
		time.Sleep(s.opts.Latency)
	}
	host, client := r.Host, r.Header.Get("X-Client")
	s.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in (see Shopify)
	retry := s.admit(host, now)
	c := s.byClient[client]
	if retry > 0 {
		s.rejected[host] = append(s.rejected[host], now)
		c.Rejected++
	} else {
		s.accepted[host] = append(s.accepted[host], now)
		c.Accepted++
	}
	s.byClient[client] = c
	s.mu.Unlock()
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(retry.Seconds()))))
		if s.opts.RetryAfterMs {
			w.Header().Set("retry-after-ms", strconv.FormatInt(int64(math.Ceil(float64(retry)/1e6)), 10))
		}
		http.Error(w, "429 too many requests", http.StatusTooManyRequests)
		return
	}
	w.Write([]byte("ok " + r.URL.Path + "\n"))
}

// admit returns 0 if a call to host at now is within the limits, else how
// long until it would be. s.mu is held.
func (s *Server) admit(host string, now time.Time) time.Duration {
	if s.opts.Leaky {
		l := s.leaky[host]
		if l == nil {
			l = &Leaky{Rate: float64(s.opts.Limit)}
			s.leaky[host] = l
		}
		if l.Admit(now) {
			return 0
		}
		return time.Duration(float64(time.Second) / l.Rate)
	}
	log := s.accepted[host]
	wait := windowWait(log, now, time.Second, s.opts.Limit)
	if s.opts.Strict100ms {
		wait = max(wait, windowWait(log, now, 100*time.Millisecond, (s.opts.Limit+9)/10))
	}
	return wait
}

// windowWait: if the last limit calls of log all fall within w before now,
// the time until the oldest of them leaves the window; else 0.
func windowWait(log []time.Time, now time.Time, w time.Duration, limit int) time.Duration {
	if len(log) < limit {
		return 0
	}
	oldest := log[len(log)-limit]
	if d := oldest.Add(w).Sub(now); d > 0 {
		return d
	}
	return 0
}

// Stats are a provider's counts.
type Stats struct {
	Accepted, Rejected int
	ByHost             map[string]HostStats
	ByClient           map[string]Counts
}

// HostStats are one host's counts and timing.
type HostStats struct {
	Accepted, Rejected int
	First, Last        time.Time // first and last accepted call
	Busiest1s          int       // most accepted calls in any 1 s
	Busiest100ms       int       // most accepted calls in any 100 ms
}

// Stats returns the counts so far.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{ByHost: map[string]HostStats{}, ByClient: map[string]Counts{}}
	for c, n := range s.byClient {
		st.ByClient[c] = n
	}
	hosts := map[string]bool{}
	for h := range s.accepted {
		hosts[h] = true
	}
	for h := range s.rejected {
		hosts[h] = true
	}
	for h := range hosts {
		log := s.accepted[h]
		hs := HostStats{Accepted: len(log), Rejected: len(s.rejected[h]),
			Busiest1s: Busiest(log, time.Second), Busiest100ms: Busiest(log, 100*time.Millisecond)}
		if len(log) > 0 {
			hs.First, hs.Last = log[0], log[len(log)-1]
		}
		st.ByHost[h] = hs
		st.Accepted += hs.Accepted
		st.Rejected += hs.Rejected
	}
	return st
}

// Calls returns the times of the calls each host accepted so far, in the
// order the provider accepted them (a copy: the caller may keep it).
func (s *Server) Calls() map[string][]time.Time { return s.copyLogs(s.accepted) }

// Rejections returns the times of the calls each host refused with 429 so
// far, in order (a copy: the caller may keep it).
func (s *Server) Rejections() map[string][]time.Time { return s.copyLogs(s.rejected) }

// copyLogs returns a deep copy of logs (accepted or rejected), taken under
// s.mu.
func (s *Server) copyLogs(logs map[string][]time.Time) map[string][]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]time.Time, len(logs))
	for h, log := range logs {
		out[h] = slices.Clone(log)
	}
	return out
}

// Busiest returns the most of the sorted times in any window of length w.
func Busiest(times []time.Time, w time.Duration) int {
	times = sortedCopy(times)
	most, i := 0, 0
	for j := range times {
		for times[j].Sub(times[i]) >= w {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// sortedCopy returns times sorted, leaving times as it was.
func sortedCopy(times []time.Time) []time.Time {
	times = slices.Clone(times)
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	return times
}

// MustRefuse reports whether n calls to one host, the first burst of them
// at once and the others spread over span = (n - burst) / rate seconds
// (rate: the calls per second held after the burst), put more than limit
// into some second, so that a provider allowing limit calls in any second
// must have refused some: floor(span) + 1 consecutive seconds cover them
// all, and one of those seconds holds at least n / (floor(span) + 1). A
// test that expects 429s from a provider below the fleet's limit asks it
// first: a machine too loaded to reach the provider's limit draws none.
// With several hosts called alike, rate may be their average: the fastest
// host was at least as fast.
func MustRefuse(n, burst int, rate float64, limit int) bool {
	if rate <= 0 || n <= burst {
		return n > limit
	}
	span := float64(n-burst) / rate
	return n > limit*(int(span)+1)
}
