// Command seats is pacer's in-flight demo: worker processes crawl a local
// multi-host site with at most 4 connections open per host and 20 calls/s
// per host, fleet-wide, in one policy (reserve.Band.InFlight beside a
// bucket). The site is internal/provider's Concurrency provider: it holds
// each call 50 ms to 500 ms and answers 429 to any call beyond 4 open per
// host. Mid-run one worker process is SIGKILLed in the middle of a call:
// its connection closes at once, but the seat it held stays taken until
// the fleet notices its silence (two heartbeats, about 2 s); the demo
// prints when each of its seats comes back, and ends with the provider's
// counts.
//
//	go run ./examples/seats                        # embedded Redis (miniredis)
//	go run ./examples/seats -redis 127.0.0.1:6379  # or redis://host:port/db
//
// With no -redis it uses an embedded Redis (miniredis, in this process, on
// a loopback port its worker processes reach) and says so.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/examples/internal/demo"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// config is what the flags set.
type config struct {
	RedisURL string
	Hosts    int           // hosts of the site
	Pages    int           // pages per host
	Procs    int           // worker processes
	Workers  int           // goroutines per process
	Conns    int           // calls open per host, fleet-wide (the provider's N too)
	Rate     float64       // calls per second per host
	KillAt   time.Duration // when the first worker process is killed mid-call (0: never)
	Seed     uint64        // the provider's holds
}

// childEnv carries a worker process's job.
const childEnv = "PACER_SEATS_CHILD"

// child is what a worker process is told.
type child struct {
	Config      config
	RedisURL    string
	ProviderURL string
	Prefix      string
	// Embedded: the Redis is the embedded one (miniredis), which has no
	// CLIENT LIST: the workers set SilentHold (see embeddedSilentHold).
	Embedded bool
}

// embeddedSilentHold is the workers' reserve.Options.SilentHold on the
// embedded Redis. A redis-server lets the fleet see at once that a killed
// process's connection is gone (CLIENT LIST), and its seats come back
// about 2 heartbeats after its last; miniredis has no CLIENT LIST, so a
// killed process looks like one silent, cut off from Redis, and is held
// for SilentHold: 1 min by default. The shortest allowed, two heartbeats,
// brings its seats back within about 3 s there too.
const embeddedSilentHold = 2 * time.Second

// policy is each host's: at most c.Conns calls open, c.Rate calls per
// second (burst 1), one request each.
func policy(c config) reserve.Policy {
	return reserve.Policy{
		{Name: "conns", Unit: "requests", InFlight: c.Conns},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: c.Rate, Burst: 1}},
	}
}

func main() {
	redis.SetLogger(reserve.RedisLogger(nil))
	if os.Getenv(childEnv) != "" {
		if err := childMain(); err != nil {
			log.Fatal(err)
		}
		return
	}
	var c config
	flag.StringVar(&c.RedisURL, "redis", "", demo.RedisFlagUsage)
	flag.IntVar(&c.Hosts, "hosts", 3, "hosts of the site")
	flag.IntVar(&c.Pages, "pages", 100, "pages per host")
	flag.IntVar(&c.Procs, "procs", 3, "worker processes")
	flag.IntVar(&c.Workers, "workers", 6, "crawling goroutines per worker process")
	flag.IntVar(&c.Conns, "conns", 4, "connections (calls open) per host, fleet-wide; the provider refuses any beyond them")
	flag.Float64Var(&c.Rate, "rate", 20, "calls per second per host, fleet-wide (burst 1)")
	flag.DurationVar(&c.KillAt, "kill-at", 1500*time.Millisecond, "when to SIGKILL the first worker process, in the middle of a call (0: never)")
	flag.Uint64Var(&c.Seed, "seed", 1, "seeds the provider's holds (50 ms to 500 ms per call)")
	flag.Parse()
	s, err := run(context.Background(), c, os.Stdout)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s)
}

// summary is a run as the provider and the workers saw it.
type summary struct {
	Pages, Fetched int
	Lost           int // pages the killed worker had taken: mid-call, or waiting for a seat
	MidCall        int // its calls under way when it was killed
	Refused        int // the provider's 429s: a call beyond Conns open
	MostOpen       int // the most calls open on one host at once
	Conns          int
	Busiest1s      int // the most slots of one host in any second
	Rate           float64
	HeldHosts      int             // hosts the killed worker held seats on
	SeatsBack      []time.Duration // from the kill to the provider seeing Conns open again, per host the killed worker held
	Duration       time.Duration
}

func (s summary) String() string {
	back := make([]string, len(s.SeatsBack))
	for i, d := range s.SeatsBack {
		back[i] = fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmt.Sprintf("summary pages=%d fetched=%d lost_with_killed_worker=%d (mid-call %d) refused_over_%d=%d most_open=%d busiest_1s=%d (rate %g/s, burst 1) seats_back_after=[%s] duration=%.1fs",
		s.Pages, s.Fetched, s.Lost, s.MidCall, s.Conns, s.Refused, s.MostOpen, s.Busiest1s, s.Rate, strings.Join(back, " "), s.Duration.Seconds())
}

// proc is a running worker process and what its lines told.
type proc struct {
	index  int
	cmd    *exec.Cmd
	stdout *os.File     // the read end of its stdout
	read   atomic.Int64 // bytes read from stdout
	mu     sync.Mutex
	lines  int64            // bytes of the lines handled (guarded by mu)
	open   map[int64]string // call id -> host: calls under way (guarded by mu)
	done   chan struct{}
}

// counted counts the bytes read from a process's stdout (proc.read).
type counted struct {
	r io.Reader
	n *atomic.Int64
}

func (c counted) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// run crawls and returns the summary; its lines go to out.
func run(ctx context.Context, c config, out io.Writer) (summary, error) {
	if c.Hosts < 1 || c.Pages < 1 || c.Procs < 2 || c.Workers < 1 || c.Conns < 1 || c.Rate <= 0 || c.KillAt < 0 {
		return summary{}, errors.New("seats: -hosts, -pages, -workers and -conns must be at least 1, -procs at least 2, -rate above 0, -kill-at not negative")
	}
	p, err := provider.StartConcurrency(provider.ConcurrencyOptions{N: c.Conns, Hold: 50 * time.Millisecond, HoldMax: 500 * time.Millisecond, Seed: c.Seed})
	if err != nil {
		return summary{}, err
	}
	defer p.Close()
	r, err := demo.Connect(c.RedisURL, out, "")
	if err != nil {
		return summary{}, fmt.Errorf("seats: %w", err)
	}
	defer r.Close()
	prefix := fmt.Sprintf("pacer:seats:%d:", time.Now().UnixNano())
	demo.PrintWatch(out, r, prefix)
	// The pages, hosts interleaved, in a Redis list the workers pop.
	var pages []any
	for i := range c.Pages {
		for h := range c.Hosts {
			pages = append(pages, fmt.Sprintf("h%d.example/%d", h, i))
		}
	}
	if err := r.Client.RPush(ctx, prefix+"pages", pages...).Err(); err != nil {
		return summary{}, err
	}
	fmt.Fprintf(out, "%d worker processes x %d goroutines crawl %d hosts x %d pages: at most %d calls open and %g calls/s per host, fleet-wide; each call held 50-500 ms\n",
		c.Procs, c.Workers, c.Hosts, c.Pages, c.Conns, c.Rate)

	if r.Embedded() && c.KillAt > 0 {
		fmt.Fprintf(out, "the embedded Redis has no CLIENT LIST: the fleet tells a killed worker from a silent one by its silence alone, so the workers set SilentHold %v (default 1 min; with -redis none is needed)\n", embeddedSilentHold)
	}
	exe, err := os.Executable()
	if err != nil {
		return summary{}, err
	}
	start := time.Now()
	var (
		mu      sync.Mutex
		fetched int
		slots   = map[string][]time.Time{}
	)
	procs := make([]*proc, c.Procs)
	errs := make(chan error, c.Procs)
	for i := range procs {
		job, _ := json.Marshal(child{Config: c, RedisURL: r.URL, ProviderURL: p.URL(), Prefix: prefix, Embedded: r.Embedded()})
		cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+string(job))
		cmd.Stderr = os.Stderr
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return summary{}, err
		}
		if err := cmd.Start(); err != nil {
			return summary{}, err
		}
		pr := &proc{index: i, cmd: cmd, open: map[int64]string{}, done: make(chan struct{})}
		pr.stdout, _ = stdout.(*os.File)
		procs[i] = pr
		go func() {
			// Each line: "s <id> <host> <slot ns>" a call starts,
			// "e <id>" it ended.
			sc := bufio.NewScanner(counted{stdout, &pr.read})
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				pr.mu.Lock()
				pr.lines += int64(len(sc.Bytes())) + 1
				if len(f) < 2 {
					pr.mu.Unlock()
					continue
				}
				id, _ := strconv.ParseInt(f[1], 10, 64)
				switch {
				case f[0] == "s" && len(f) == 4:
					pr.open[id] = f[2]
					ns, _ := strconv.ParseInt(f[3], 10, 64)
					mu.Lock()
					slots[f[2]] = append(slots[f[2]], time.Unix(0, ns))
					mu.Unlock()
				case f[0] == "e":
					delete(pr.open, id)
					mu.Lock()
					fetched++
					mu.Unlock()
				}
				pr.mu.Unlock()
			}
			err := cmd.Wait()
			close(pr.done)
			errs <- err
		}()
	}

	s := summary{Pages: c.Hosts * c.Pages, Conns: c.Conns, Rate: c.Rate}
	var killed *proc
	if c.KillAt > 0 {
		time.Sleep(time.Until(start.Add(c.KillAt)))
		killed = procs[0]
		// Wait for the victim to be mid-call (it always is, soon: its
		// workers outnumber its share of the seats). Where the process can
		// be stopped (stopMidCall), it is stopped and its last lines read
		// first, so that a call it ended just before is not taken for one
		// under way: it is killed only in the middle of a call.
		var held map[string]int
		for {
			killed.mu.Lock()
			held = map[string]int{}
			for _, h := range killed.open {
				held[h]++
			}
			killed.mu.Unlock()
			if len(held) > 0 {
				if h, stopped := killed.stopMidCall(); !stopped || len(h) > 0 {
					if stopped {
						held = h
					}
					break
				}
			}
			select {
			case <-killed.done:
				return summary{}, errors.New("seats: the worker process to kill ended first: more pages, or an earlier -kill-at")
			case <-time.After(time.Millisecond):
			}
		}
		// SIGKILL: no Close, no Done; the seats stay held in Redis until
		// the fleet notices the process is gone.
		_, before := p.Stats()
		killedAt := time.Now()
		killed.cmd.Process.Kill()
		killed.mu.Lock() // its last lines may still be read
		s.MidCall = len(killed.open)
		killed.mu.Unlock()
		s.HeldHosts = len(held)
		hosts := slices.Sorted(maps.Keys(held))
		var what []string
		for _, h := range hosts {
			what = append(what, fmt.Sprintf("%s (%d)", h, held[h]))
		}
		fmt.Fprintf(out, "t=%5.2fs killed worker process %d (pid %d, SIGKILL) in the middle of its calls, holding seats on %s\n",
			killedAt.Sub(start).Seconds(), killed.index+1, killed.cmd.Process.Pid, strings.Join(what, ", "))
		// The provider sees the connections close at once (its abandoned
		// calls; 300 ms at most for a call not yet arrived); the seats come
		// back when the fleet notices. A host is whole again when its N
		// calls are open at the provider again: while the dead process
		// holds a seat, the live ones hold at most N-1.
		printed := map[string]bool{}
		back := map[string]bool{}
		for len(back) < len(hosts) && time.Since(killedAt) < 30*time.Second {
			_, by := p.Stats()
			for _, h := range hosts {
				open := by[h].Open
				closed := by[h].Abandoned-before[h].Abandoned >= held[h] || time.Since(killedAt) > 300*time.Millisecond
				switch {
				case back[h] || !closed:
				case open >= c.Conns:
					d := time.Since(killedAt)
					back[h] = true
					s.SeatsBack = append(s.SeatsBack, d)
					fmt.Fprintf(out, "t=%5.2fs %s: %d of %d calls open again: the killed worker's %s came back %.2f s after the kill\n",
						time.Since(start).Seconds(), h, open, c.Conns, seats(held[h]), d.Seconds())
				case !printed[h]:
					printed[h] = true
					fmt.Fprintf(out, "t=%5.2fs %s: %d of %d calls open: the killed worker's calls ended at the provider with its connections; its %s still held until the fleet notices it is gone\n",
						time.Since(start).Seconds(), h, open, c.Conns, seatsAre(held[h]))
				}
			}
			if fetched := func() int { mu.Lock(); defer mu.Unlock(); return fetched }(); fetched >= s.Pages-len(hosts)*c.Conns {
				break // the crawl is ending: no more calls to fill the seats
			}
			time.Sleep(2 * time.Millisecond)
		}
		if len(back) < len(hosts) {
			fmt.Fprintf(out, "the crawl ended before every seat was seen back (%d of %d hosts)\n", len(back), len(hosts))
		}
	}
	var werr []error
	for _, pr := range procs {
		err := <-errs
		if err != nil && pr != killed {
			werr = append(werr, err)
		}
	}
	// One error is the killed process's; the others must be none.
	if len(werr) > 1 || (killed == nil && len(werr) > 0) {
		return summary{}, fmt.Errorf("seats: a worker process failed: %w", errors.Join(werr...))
	}
	s.Duration = time.Since(start)
	total, _ := p.Stats()
	s.Refused, s.MostOpen = total.Refused, total.MaxOpen
	mu.Lock()
	s.Fetched = fetched
	for _, ts := range slots {
		s.Busiest1s = max(s.Busiest1s, provider.Busiest(ts, time.Second))
	}
	mu.Unlock()
	s.Lost = s.Pages - s.Fetched
	return s, nil
}

// seats is "seat" or "n seats".
func seats(n int) string {
	if n == 1 {
		return "seat"
	}
	return fmt.Sprintf("%d seats", n)
}

// seatsAre is "seat is" or "n seats are".
func seatsAre(n int) string {
	if n == 1 {
		return "seat is"
	}
	return seats(n) + " are"
}

// childMain is a worker process: it pops pages until none is left.
func childMain() error {
	var j child
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &j); err != nil {
		return fmt.Errorf("seats: %s: %w", childEnv, err)
	}
	_, opts, err := demo.ParseRedis(j.RedisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	lopts := reserve.Options{KeyPrefix: j.Prefix, RequireRedis: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if j.Embedded {
		lopts.SilentHold = embeddedSilentHold
	}
	limiter, err := reserve.New(rdb, lopts)
	if err != nil {
		return err
	}
	defer limiter.Close()
	pol := policy(j.Config)
	var (
		outMu sync.Mutex
		ids   int64
	)
	line := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	client := &http.Client{Timeout: time.Minute}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, j.Config.Workers)
	for w := range j.Config.Workers {
		wg.Go(func() {
			for {
				page, err := rdb.LPop(ctx, j.Prefix+"pages").Result()
				if errors.Is(err, redis.Nil) {
					return
				}
				if err != nil {
					errs[w] = err
					return
				}
				host, path, _ := strings.Cut(page, "/")
				if errs[w] = fetch(ctx, limiter, client, j.ProviderURL, host, path, pol, func(slot time.Time) int64 {
					outMu.Lock()
					ids++
					id := ids
					outMu.Unlock()
					line("s %d %s %d", id, host, slot.UnixNano())
					return id
				}, func(id int64) { line("e %d", id) }); errs[w] != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fetch takes a seat and a slot on host's policy, calls the provider and
// gives the seat back when the answer is read: Acquire, then Done.
func fetch(ctx context.Context, l *reserve.Limiter, client *http.Client, url, host, path string, pol reserve.Policy, started func(slot time.Time) int64, ended func(id int64)) error {
	r, err := l.Acquire(ctx, reserve.Request{Key: host, Policy: pol, Cost: reserve.Cost{"requests": 1}})
	if err != nil {
		return err
	}
	defer r.Done()
	id := started(r.Time())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/"+path, nil)
	if err != nil {
		return err
	}
	req.Host = host
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// A 429 (a call beyond the open calls the provider allows) is
	// counted by the provider, and the page is not fetched again.
	ended(id)
	return err
}
