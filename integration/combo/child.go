package combo

import (
	"bufio"
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// ChildSpec tells a fleet process where everything is.
type ChildSpec struct {
	ID    string // "1", or "1b" for the process started again in slot 1
	Seed  uint64
	Redis string // host:port
	// Cluster: a Cluster's masters (host:port), in a run on a Cluster;
	// Redis is then empty.
	Cluster  []string `json:",omitempty"`
	Prefix   string   // the run's KeyPrefix
	Provider string   // the provider's base URL
	// Script, if set, makes the process a Python child: it execs
	// pythonBin on this script (python.go).
	Script string `json:",omitempty"`
	// Body is the seed's body variant of KeyHTTP's refusals (body.go).
	Body string `json:",omitempty"`
	// Seats is KeySeats's policy (seats.go); N 0: the key is not called.
	Seats SeatsDraw `json:",omitempty"`
	// SeatCallers: this process's goroutines calling KeySeats (seats.go).
	SeatCallers int `json:",omitempty"`
}

// The fleet's demand, per process: goroutines that call the Sliding key and
// the policy key one call after the other (several times what the limits
// allow, so there is always a queue), and bursts of hotBurst calls on the
// hot key, enough callers queued at once for a lease.
const (
	slidingGoroutines = 4
	policyGoroutines  = 4
	hotBurst          = 12
	httpGoroutines    = 3
	// adaptiveGoroutines call KeyAdaptive one call after the other: a
	// demand far above its true limit, as the rate must be learned from
	// refusals.
	adaptiveGoroutines = 3
	maxAttempts        = 3 // a call refused with 429 is tried again this often
	// rateEvery is how often a process samples KeyAdaptive's learned rate.
	rateEvery = 250 * time.Millisecond
)

// child is one fleet process.
type child struct {
	spec  ChildSpec
	l     *reserve.Limiter
	http  *http.Client
	paced *http.Client // KeyHTTP's calls, through pacehttp
	// adaptive: KeyAdaptive's calls, through pacehttp with Options.Adaptive
	adaptive *http.Client
	seatHTTP *http.Client // KeySeats's calls (seats.go)
	slots    sync.Map     // call ID -> the slot pacehttp sends it on (sending)
	out      *noteWriter
	seq      atomic.Int64
	bg       sync.WaitGroup // settles retried after the call returned
	after    context.Context

	closed atomic.Bool // the runner told it to close

	mu     sync.Mutex
	counts map[string]int64
}

func (c *child) count(name string) {
	c.mu.Lock()
	c.counts[name]++
	c.mu.Unlock()
}

// childMain is a fleet process: it builds its limiter as the README's quick
// start does, says it is ready, waits for "go <start> <end>" on stdin (Unix
// ns), calls the keys from start to end and prints its counts.
func childMain(spec ChildSpec) error {
	out := &noteWriter{}
	stderr := slog.NewTextHandler(os.Stderr, nil)
	// go-redis's own dial errors (several per failed call) at Debug, off.
	redis.SetLogger(reserve.RedisLogger(slog.New(stderr)))

	// The quick start's client, or on a Cluster a ClusterClient with
	// go-redis's defaults.
	var rdb redis.UniversalClient
	if len(spec.Cluster) > 0 {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: spec.Cluster})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: spec.Redis})
	}
	defer rdb.Close()
	sm := newSeatMetrics()
	l, err := reserve.New(rdb, reserve.Options{
		KeyPrefix: spec.Prefix,
		Metrics:   sm, // the seats it holds (seats.go)
		Logger:    slog.New(&switchLog{next: stderr, out: out, child: spec.ID}),
		// No FleetSize: a process started again while Redis is down has
		// never reached it, does not know its rank in the fleet, and
		// refuses with ErrUnavailable until it does (the default).
	})
	if err != nil {
		return err
	}
	// Its PID, for the runner to stop it with SIGSTOP (FaultStall).
	// Its Limiter's id: its seat tickets in Redis start with it.
	out.print(Note{Type: noteReady, Child: spec.ID, Pid: os.Getpid(), Lim: limiterID(l)})

	stdin := bufio.NewReader(os.Stdin)
	line, err := stdin.ReadString('\n')
	if err != nil {
		return fmt.Errorf("reading the start: %w", err)
	}
	var start, end int64
	if _, err := fmt.Sscanf(line, "go %d %d", &start, &end); err != nil {
		return fmt.Errorf("reading the start %q: %w", line, err)
	}
	time.Sleep(time.Until(time.Unix(0, start)))
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, end))
	defer cancel()
	// Settles and pauses may finish a little after the end.
	after, cancelAfter := context.WithDeadline(context.Background(), time.Unix(0, end).Add(2*time.Second))
	defer cancelAfter()

	c := &child{spec: spec, l: l, out: out, after: after, counts: map[string]int64{},
		http: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	// KeySeats's calls last up to the run's end: no timeout but ctx's.
	c.seatHTTP = &http.Client{Transport: c.http.Transport}
	// The runner's commands, one a line (commands.go): close (stop calling
	// and Close the Limiter: FaultClose) and pause (Limiter.Pause:
	// LocalPause).
	go c.commands(stdin, func() { cancel(); cancelAfter() })
	hook.Sending = sending(&c.slots) // this process's one child
	tr, err := pacehttp.New(l, pacehttp.Options{
		Base: stampFire{c.http.Transport, &c.slots},
		Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: KeyHTTP, Policy: httpFleet, Cost: reserve.Cost{unitRequests: 1}}, nil
		},
		MaxRetries: -1,
		// Every 429 of the provider says how long to wait (Retry-After,
		// or RetryInfo in the google body variant): a Transport that
		// missed it would pause only this, which the pause judge sees.
		DefaultWait: time.Millisecond,
		Logger:      slog.New(stderr),
	})
	if err != nil {
		return err
	}
	c.paced = &http.Client{Transport: tr}
	cfg := adaptiveConfig
	atr, err := pacehttp.New(l, pacehttp.Options{
		Base: stampFire{c.http.Transport, &c.slots},
		// Adaptive replaces the Route's policy by the learned rate.
		Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: KeyAdaptive, Cost: reserve.Permits(1)}, nil
		},
		Adaptive:   &cfg,
		MaxRetries: -1,
		Logger:     slog.New(stderr),
	})
	if err != nil {
		return err
	}
	c.adaptive = &http.Client{Transport: atr}
	var wg sync.WaitGroup
	for g := range httpGoroutines {
		wg.Go(func() { c.caller(KeyHTTP, 2000+g).loop(ctx) })
	}
	for g := range adaptiveGoroutines {
		wg.Go(func() { c.caller(KeyAdaptive, 3000+g).loop(ctx) })
	}
	wg.Go(func() { c.sampleRate(ctx) })
	for g := range slidingGoroutines {
		wg.Go(func() { c.caller(KeySliding, g).loop(ctx) })
	}
	for g := range policyGoroutines {
		wg.Go(func() { c.caller(KeyPolicy, slidingGoroutines+g).loop(ctx) })
	}
	wg.Go(func() { c.hot(ctx) })
	c.fairCallers(ctx, wg.Go)
	c.seatCallers(ctx, wg.Go)
	wg.Wait()
	c.bg.Wait()
	c.mu.Lock()
	sm.final(c.counts)
	out.print(Note{Type: noteDone, Child: spec.ID, Counts: c.counts})
	c.mu.Unlock()
	closing := time.Now()
	err = l.Close()
	if c.closed.Load() {
		n := Note{Type: noteClose, Child: spec.ID, At: closing.UnixNano(), End: time.Now().UnixNano()}
		if err != nil {
			// Closed while Redis is broken, it may not reach it to leave
			// the fleet: noted, not a failure of the process.
			n.Err = err.Error()
		}
		out.print(n)
		return nil
	}
	return err
}

// hot runs bursts of hotBurst concurrent calls on the hot key.
func (c *child) hot(ctx context.Context) {
	rng := c.rng(1000)
	n := 0
	for {
		t := time.NewTimer(time.Duration(250+rng.IntN(350)) * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		var wg sync.WaitGroup
		for range hotBurst {
			n++
			cl := c.caller(KeyHot, 1000+n)
			wg.Go(func() { cl.one(ctx, cl.draw()) })
		}
		wg.Wait()
	}
}

// sampleRate notes KeyAdaptive's learned rate every rateEvery, read with
// Peek (which counts no demand and writes nothing) through a Rate of its
// own with the Transport's Config. While Redis cannot be reached Peek gives
// the last rate it read (or Start).
func (c *child) sampleRate(ctx context.Context) {
	rate, err := adaptive.New(c.l, KeyAdaptive, adaptiveConfig)
	if err != nil {
		c.errNote("adaptive", KeyAdaptive, err)
		return
	}
	t := time.NewTicker(rateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lim, err := rate.Peek(ctx)
		switch {
		case err == nil:
			c.note(Note{Type: noteRate, Key: KeyAdaptive, At: time.Now().UnixNano(), Rate: lim.Rate})
		case !ended(ctx):
			c.errNote("peek", KeyAdaptive, err)
		}
	}
}

// rng returns a generator for the goroutine g of this process, drawn from
// the seed, the process and g.
func (c *child) rng(g int) *rand.Rand {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d", c.spec.ID, g)
	return rand.New(rand.NewPCG(c.spec.Seed, h.Sum64()))
}

func (c *child) note(n Note) {
	n.Child = c.spec.ID
	c.out.print(n)
}

// errNote reports an error from the limiter.
func (c *child) errNote(op, key string, err error) {
	c.count("err")
	c.note(Note{Type: noteErr, Key: key, Op: op, At: time.Now().UnixNano(), Err: strings.ReplaceAll(err.Error(), "\n", " ")})
}

// switchLog is the limiter's Logger: it prints a switch note for every
// switch between Redis and local pacing (the limiter logs each once, when
// it happens) and passes every record on to next.
type switchLog struct {
	next  slog.Handler
	out   *noteWriter
	child string
}

// Enabled lets the limiter's Debug records of moves through (Handle keeps
// them from next).
func (s *switchLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelDebug || s.next.Enabled(ctx, l)
}

func (s *switchLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < slog.LevelInfo {
		op := ""
		switch r.Message {
		case "pacer: a sleeper moved to a fresh slot":
			op = "moved"
		case "pacer: a resume moved a sleeper earlier":
			op = "shifted"
		case "pacer: fleet view":
			op = "fleet"
		}
		if op != "" {
			n := Note{Type: noteMove, Child: s.child, At: r.Time.UnixNano(), Op: op, Attrs: map[string]string{}}
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == "key" {
					n.Key = a.Value.String()
				} else if a.Key != "limiter" {
					n.Attrs[a.Key] = a.Value.String()
				}
				return true
			})
			s.out.print(n)
		}
		if !s.next.Enabled(ctx, r.Level) {
			return nil
		}
	}
	switch {
	case strings.HasPrefix(r.Message, "pacer: redis unavailable, "): // not "... at start": New's first failure
		s.out.print(Note{Type: noteSwitch, Child: s.child, At: r.Time.UnixNano(), To: "local"})
	case strings.HasPrefix(r.Message, "pacer: redis answers again"):
		s.out.print(Note{Type: noteSwitch, Child: s.child, At: r.Time.UnixNano(), To: "redis"})
	}
	return s.next.Handle(ctx, r)
}

func (s *switchLog) WithAttrs(as []slog.Attr) slog.Handler {
	return &switchLog{next: s.next.WithAttrs(as), out: s.out, child: s.child}
}

func (s *switchLog) WithGroup(name string) slog.Handler {
	return &switchLog{next: s.next.WithGroup(name), out: s.out, child: s.child}
}

// sortedCounts returns counts' names in order, for printing.
func sortedCounts(counts map[string]int64) []string {
	names := make([]string, 0, len(counts))
	for n := range counts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
