// Command crawler is pacer's demo: a fleet of workers crawls a local
// multi-host site served by a strict provider (429 beyond its per-host
// limit), with a per-host limit shared through Redis, and prints live
// progress and a summary measured on the provider's side.
//
//	go run ./examples/crawler                          # embedded Redis (miniredis)
//	go run ./examples/crawler -redis redis://127.0.0.1:6379/0
//	go run ./examples/crawler -plot calls.svg          # and a chart of the calls
//
// With no -redis it uses an embedded Redis (miniredis, in this process) and
// says so. A 429 pauses that host for the whole fleet (Limiter.Pause).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/pacer-go/pacer/examples/internal/chart"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// config is what the flags set.
type config struct {
	RedisURL      string  // "" for the embedded Redis
	Hosts         int     // hosts of the site
	Pages         int     // pages per host
	Workers       int     // crawling goroutines
	Rate          float64 // pacer's limit per host, calls/s
	Burst         int
	ProviderLimit int // the provider's limit per host, calls in any 1 s
	Progress      time.Duration
	Procs         int    // worker processes; 1: the workers run in this process
	Plot          string // an SVG chart of the calls per 100 ms, or ""
}

// childEnv carries a child process's job: the test binary or the crawler
// itself, re-run with it set, crawls its share of the pages and exits.
const childEnv = "PACER_CRAWLER_CHILD"

// child is what a child process is told.
type child struct {
	Config      config
	ProviderURL string
	RedisAddr   string // host:port of the Redis the parent uses (embedded or not)
	RedisURL    string // or its URL
	Prefix      string
	Index       int // this child's share: pages with index % Procs == Index
}

// summary is the run as the provider saw it. Rates are per host.
type summary struct {
	Calls, Rejected int
	Rate            float64 // achieved calls/s per host, averaged over hosts
	Limit           float64
	Busiest1s       int // most calls to one host in any 1 s
	Duration        time.Duration
}

func (s summary) String() string {
	return fmt.Sprintf("summary calls=%d rejected=%d rate=%.2f limit=%g busiest_1s=%d duration=%.1f",
		s.Calls, s.Rejected, s.Rate, s.Limit, s.Busiest1s, s.Duration.Seconds())
}

func main() {
	var c config
	flag.StringVar(&c.RedisURL, "redis", "", "Redis URL (redis://host:port/db); empty: an embedded Redis in this process")
	flag.IntVar(&c.Hosts, "hosts", 3, "hosts of the site")
	flag.IntVar(&c.Pages, "pages", 100, "pages per host")
	flag.IntVar(&c.Workers, "workers", 16, "crawling goroutines")
	flag.Float64Var(&c.Rate, "rate", 20, "pacer's limit per host, calls per second")
	flag.IntVar(&c.Burst, "burst", 1, "pacer's burst per host")
	flag.IntVar(&c.ProviderLimit, "provider-limit", 0, "the provider's limit per host, calls in any second (default: -rate + -burst, what pacer promises in any second)")
	flag.DurationVar(&c.Progress, "progress", time.Second, "how often to print progress")
	flag.IntVar(&c.Procs, "procs", 1, "worker processes (each with -workers goroutines), sharing the limit through Redis")
	flag.StringVar(&c.Plot, "plot", "", "write a chart of each host's calls per 100 ms to this SVG file")
	if os.Getenv(childEnv) != "" {
		if err := childMain(); err != nil {
			log.Fatal(err)
		}
		return
	}
	flag.Parse()
	if c.ProviderLimit == 0 {
		c.ProviderLimit = int(math.Floor(c.Rate)) + c.Burst
	}
	s, err := run(context.Background(), c, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s)
}

// run crawls and returns the provider's summary; progress goes to out.
func run(ctx context.Context, c config, out io.Writer) (summary, error) {
	if c.Hosts < 1 || c.Pages < 1 || c.Workers < 1 || c.ProviderLimit < 1 {
		return summary{}, errors.New("crawler: -hosts, -pages, -workers and -provider-limit must be at least 1")
	}
	c.Procs = max(c.Procs, 1)
	p, err := provider.Start(provider.Options{Limit: c.ProviderLimit})
	if err != nil {
		return summary{}, err
	}
	defer p.Close()

	rdb, addr, closeRedis, err := connect(c.RedisURL, out)
	if err != nil {
		return summary{}, err
	}
	defer closeRedis()
	prefix := fmt.Sprintf("pacer:crawler:%d:", time.Now().UnixNano()) // a fresh site each run
	start := time.Now()
	stopProgress := progress(out, p, c, start)
	defer stopProgress()
	if c.Procs == 1 {
		if err := crawl(ctx, c, p.URL(), rdb, prefix, 0, out); err != nil {
			return summary{}, err
		}
	} else {
		fmt.Fprintf(out, "starting %d worker processes of %d goroutines each\n", c.Procs, c.Workers)
		if err := fleet(ctx, c, p.URL(), addr, prefix); err != nil {
			return summary{}, err
		}
	}
	s := summarize(p.Stats(), c, time.Since(start))
	if c.Plot != "" {
		title := fmt.Sprintf("crawler: %d hosts, %d workers x %d processes, %g/s per host", c.Hosts, c.Workers, c.Procs, c.Rate)
		if err := chart.WriteFile(c.Plot, chart.Chart{Title: title, Start: start, Rate: c.Rate, ProviderLimit: c.ProviderLimit, Series: chart.Hosts(p.Calls())}); err != nil {
			return s, err
		}
	}
	return s, nil
}

// fleet runs c.Procs child processes, each crawling its share, and waits.
func fleet(ctx context.Context, c config, providerURL, redisAddr, prefix string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	errs := make(chan error, c.Procs)
	for i := range c.Procs {
		job, _ := json.Marshal(child{Config: c, ProviderURL: providerURL, RedisAddr: redisAddr, RedisURL: c.RedisURL, Prefix: prefix, Index: i})
		cmd := exec.CommandContext(ctx, exe)
		cmd.Env = append(os.Environ(), childEnv+"="+string(job))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		go func() {
			if err := cmd.Wait(); err != nil {
				errs <- fmt.Errorf("crawler: worker process %d: %w", i, err)
				return
			}
			errs <- nil
		}()
	}
	var first error
	for range c.Procs {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// childMain is a worker process: it crawls its share and exits.
func childMain() error {
	var j child
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &j); err != nil {
		return fmt.Errorf("crawler: %s: %w", childEnv, err)
	}
	var rdb *redis.Client
	if j.RedisURL != "" {
		opts, err := redis.ParseURL(j.RedisURL)
		if err != nil {
			return err
		}
		opts.ContextTimeoutEnabled, opts.MaxRetries = true, -1
		rdb = redis.NewClient(opts)
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: j.RedisAddr, ContextTimeoutEnabled: true, MaxRetries: -1})
	}
	defer rdb.Close()
	return crawl(context.Background(), j.Config, j.ProviderURL, rdb, j.Prefix, j.Index, os.Stderr)
}

// crawl fetches the pages whose index % c.Procs == share, from c.Workers
// goroutines, pacing each host on the Limiter shared through rdb.
func crawl(ctx context.Context, c config, providerURL string, rdb redis.UniversalClient, prefix string, share int, out io.Writer) error {
	limiter, err := reserve.New(rdb, reserve.Options{
		KeyPrefix: prefix,
		Logger:    slog.New(slog.NewTextHandler(out, nil)),
	})
	if err != nil {
		return err
	}
	defer limiter.Close()
	lim := reserve.Limit{Rate: c.Rate, Burst: c.Burst}

	// The pages, hosts interleaved; a page refused with 429 goes back in.
	var (
		mu    sync.Mutex
		queue []string // "host page"
		left  int
	)
	for i := range c.Pages {
		if i%max(c.Procs, 1) != share {
			continue
		}
		for h := range c.Hosts {
			queue = append(queue, fmt.Sprintf("h%d.example %d", h, i))
			left++
		}
	}
	next := func() (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(queue) == 0 {
			return "", false
		}
		j := queue[0]
		queue = queue[1:]
		return j, true
	}
	client := &http.Client{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	errs := make(chan error, c.Workers)
	for w := range c.Workers {
		wg.Go(func() {
			for {
				job, ok := next()
				if !ok {
					mu.Lock()
					done := left == 0
					mu.Unlock()
					if done {
						return
					}
					time.Sleep(10 * time.Millisecond) // a refused page may come back
					continue
				}
				var host, page string
				fmt.Sscan(job, &host, &page)
				paused, err := waitSlot(ctx, limiter, host, lim)
				if err != nil {
					errs <- err
					return
				}
				if paused {
					// A 429 seen by another worker paused the host while
					// this one slept: take a slot after the pause.
					mu.Lock()
					queue = append(queue, job)
					mu.Unlock()
					continue
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, providerURL+"/page/"+page, nil)
				req.Host = host
				req.Header.Set("X-Client", fmt.Sprintf("proc-%d/worker-%d", share, w))
				resp, err := client.Do(req)
				if err != nil {
					errs <- err
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusTooManyRequests {
					secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
					// The provider said stop: the whole fleet waits.
					if err := limiter.Pause(ctx, host, lim, time.Duration(max(secs, 1))*time.Second); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					queue = append(queue, job)
					mu.Unlock()
					continue
				}
				mu.Lock()
				left--
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// waitSlot reserves a slot on host and sleeps until it, like Limiter.Wait,
// then reports whether a Pause made meanwhile (a 429 another worker saw)
// covers the slot: slots granted before a pause keep their times, so a
// caller that slept should not call a provider that said to wait.
func waitSlot(ctx context.Context, l *reserve.Limiter, host string, lim reserve.Limit) (paused bool, err error) {
	r, err := l.Reserve(ctx, host, lim, 1)
	if err != nil {
		return false, err
	}
	if err := r.Sleep(ctx); err != nil {
		return false, err
	}
	paused, err = r.InPause(ctx)
	if errors.Is(err, reserve.ErrUnavailable) {
		return false, nil // no pause can be known; the local fallback paces
	}
	return paused, err
}

// connect returns a client to redisURL, or to an embedded miniredis.
func connect(redisURL string, out io.Writer) (redis.UniversalClient, string, func(), error) {
	if redisURL == "" {
		mr := miniredis.NewMiniRedis()
		if err := mr.Start(); err != nil {
			return nil, "", nil, err
		}
		fmt.Fprintf(out, "no -redis given: using an embedded Redis (miniredis, in this process) at %s\n", mr.Addr())
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		return rdb, mr.Addr(), func() { rdb.Close(); mr.Close() }, nil
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, "", nil, fmt.Errorf("crawler: -redis: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	rdb := redis.NewClient(opts)
	fmt.Fprintf(out, "using Redis at %s\n", opts.Addr)
	return rdb, opts.Addr, func() { rdb.Close() }, nil
}

// progress prints calls, 429s and each host's rate over the last interval
// until stopped.
func progress(out io.Writer, p *provider.Server, c config, start time.Time) func() {
	if c.Progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(c.Progress)
		defer t.Stop()
		prev := map[string]int{}
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st := p.Stats()
			line := fmt.Sprintf("t=%4.1fs calls=%d 429s=%d  per host/s:", time.Since(start).Seconds(), st.Accepted+st.Rejected, st.Rejected)
			for h := range c.Hosts {
				host := fmt.Sprintf("h%d.example", h)
				n := st.ByHost[host].Accepted
				line += fmt.Sprintf(" %s %.1f", host, float64(n-prev[host])/c.Progress.Seconds())
				prev[host] = n
			}
			fmt.Fprintf(out, "%s (limit %g)\n", line, c.Rate)
		}
	}()
	return func() { close(done); <-finished }
}

// summarize turns the provider's counts into the summary line.
func summarize(st provider.Stats, c config, d time.Duration) summary {
	s := summary{Calls: st.Accepted + st.Rejected, Rejected: st.Rejected, Limit: c.Rate, Duration: d}
	var rates float64
	for _, h := range st.ByHost {
		s.Busiest1s = max(s.Busiest1s, h.Busiest1s)
		if span := h.Last.Sub(h.First).Seconds(); span > 0 {
			// The first Burst calls come at once; the rest are paced.
			rates += float64(h.Accepted-c.Burst) / span
		}
	}
	if len(st.ByHost) > 0 {
		s.Rate = rates / float64(len(st.ByHost))
	}
	return s
}
