package provider

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// ConcurrencyOptions configure a Concurrency provider. N is required.
type ConcurrencyOptions struct {
	// N is the calls each host allows open at once.
	N int
	// Hold is how long each call stays open before its answer (a slow
	// call, a stream). With HoldMax above it, each call's hold is drawn
	// log-uniformly from [Hold, HoldMax] (from Seed), so that calls of
	// 10 ms and of 30 s mix as their orders of magnitude do. A request's
	// X-Hold header (a Go duration, such as "250ms") overrides both.
	// Default 0: answered at once.
	Hold, HoldMax time.Duration
	// Seed seeds the holds drawn between Hold and HoldMax.
	Seed uint64
}

// Concurrency is a running provider on 127.0.0.1 that limits the calls
// open at once, not their rate: each host (the request's Host) allows at
// most N calls open, and answers any call beyond them at once with 429 Too
// Many Requests, header X-Concurrency-Limit N, no Retry-After (a seat
// frees when a call ends, not at a time the provider can tell). A refused
// call is never open.
//
// A call is open from its arrival (the handler's start) to its response's
// end: the open count drops just before the answer is written, with its
// Content-Length, so a client cannot have read the whole answer, and
// start a new call on the seat it gave back, while the provider still
// counts the old one. A client that disconnects (its request's context
// ends) ends its call then; one that gave up without closing its
// connection still holds its call open at the provider, as a real one
// would. Concurrency counts per host: calls served (answered 200), calls
// refused over N, calls ended by their client, and the most open at once.
type Concurrency struct {
	opts ConcurrencyOptions
	ln   net.Listener
	srv  *http.Server

	mu    sync.Mutex
	rng   *rand.Rand
	hosts map[string]*ConcurrencyStats
}

// ConcurrencyStats are one host's counts (or every host's, summed, with
// MaxOpen the most of any host).
type ConcurrencyStats struct {
	Served    int // answered 200 after their hold
	Refused   int // answered 429: N calls were open at their arrival
	Abandoned int // ended by their client (disconnected) before the answer
	Open      int // open now
	MaxOpen   int // the most open at once
}

// StartConcurrency starts a Concurrency provider on a free 127.0.0.1 port.
func StartConcurrency(opts ConcurrencyOptions) (*Concurrency, error) {
	switch {
	case opts.N < 1:
		return nil, errors.New("provider: ConcurrencyOptions.N must be at least 1")
	case opts.Hold < 0 || opts.HoldMax < 0:
		return nil, errors.New("provider: ConcurrencyOptions.Hold and HoldMax must not be negative")
	case opts.HoldMax != 0 && (opts.HoldMax < opts.Hold || opts.Hold == 0):
		return nil, fmt.Errorf("provider: ConcurrencyOptions.HoldMax %v needs a Hold above 0 and at most HoldMax (got Hold %v)", opts.HoldMax, opts.Hold)
	}
	c := &Concurrency{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15)), hosts: map[string]*ConcurrencyStats{}}
	var err error
	if c.ln, c.srv, err = serve(c); err != nil {
		return nil, err
	}
	return c, nil
}

// URL is the provider's base URL; set the request's Host to choose a host.
func (c *Concurrency) URL() string { return "http://" + c.ln.Addr().String() }

// Close stops the provider.
func (c *Concurrency) Close() error { return closeServer(c.srv) }

// hold returns how long a call stays open: r's X-Hold, or drawn from the
// options. c.mu is held.
func (c *Concurrency) hold(r *http.Request) (time.Duration, error) {
	if h := r.Header.Get("X-Hold"); h != "" {
		d, err := time.ParseDuration(h)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("X-Hold %q: want a Go duration >= 0", h)
		}
		return d, nil
	}
	if c.opts.HoldMax <= c.opts.Hold {
		return c.opts.Hold, nil
	}
	lo, hi := math.Log(float64(c.opts.Hold)), math.Log(float64(c.opts.HoldMax))
	return time.Duration(math.Exp(lo + c.rng.Float64()*(hi-lo))), nil
}

// ServeHTTP opens one call, or refuses it.
func (c *Concurrency) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	hold, err := c.hold(r)
	if err != nil {
		c.mu.Unlock()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	st := c.hosts[r.Host]
	if st == nil {
		st = &ConcurrencyStats{}
		c.hosts[r.Host] = st
	}
	if st.Open >= c.opts.N {
		st.Refused++
		c.mu.Unlock()
		w.Header().Set("X-Concurrency-Limit", strconv.Itoa(c.opts.N))
		http.Error(w, "429 too many open calls", http.StatusTooManyRequests)
		return
	}
	st.Open++
	st.MaxOpen = max(st.MaxOpen, st.Open)
	c.mu.Unlock()

	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		c.mu.Lock()
		st.Open--
		st.Abandoned++
		c.mu.Unlock()
		return
	}
	body := []byte("ok " + r.URL.Path + "\n")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	c.mu.Lock()
	st.Open--
	st.Served++
	c.mu.Unlock()
	w.Write(body)
}

// Stats returns each host's counts so far, and their sum (MaxOpen: the
// most of any host).
func (c *Concurrency) Stats() (total ConcurrencyStats, byHost map[string]ConcurrencyStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byHost = make(map[string]ConcurrencyStats, len(c.hosts))
	for h, st := range c.hosts {
		byHost[h] = *st
		total.Served += st.Served
		total.Refused += st.Refused
		total.Abandoned += st.Abandoned
		total.Open += st.Open
		total.MaxOpen = max(total.MaxOpen, st.MaxOpen)
	}
	return total, byHost
}
