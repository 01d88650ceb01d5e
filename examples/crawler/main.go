// Command crawler is pacer's demo: a fleet of workers crawls a local
// multi-host site served by a strict provider (429 beyond its per-host
// limit), with a per-host limit shared through Redis, and prints live
// progress and a summary measured on the provider's side.
//
//	go run ./examples/crawler                          # embedded Redis (miniredis)
//	go run ./examples/crawler -redis 127.0.0.1:6379    # or redis://host:port/db, rediss://...
//	go run -tags chart ./examples/crawler -plot calls.svg  # and a chart of the calls
//	go run ./examples/crawler -adaptive -procs 4       # the provider's limit hidden: the fleet learns it
//	go run ./examples/crawler -adaptive -retry-after-ms # and its 429s say the exact wait, not whole seconds
//	go run -tags otel ./examples/crawler -trace  # and a line per request's wait: what it waited for (package otelpacer)
//
// With no -redis it uses an embedded Redis (miniredis, in this process) and
// says so. Requests go through pacehttp's Transport: it paces each host
// fleet-wide, and a 429 pauses that host for the whole fleet and is retried
// after the pause. No host holds more than -per-host of a process's workers,
// so a host lowered or paused leaves the others at their rate.
// Package demo (examples/internal/demo) holds the plumbing it shares with
// the batch example: connecting, progress, the summary line.
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
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/examples/internal/chart"
	"github.com/pacer-go/pacer/examples/internal/demo"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// config is what the flags set.
type config struct {
	RedisURL      string  // the -redis flag: "" for the embedded Redis
	Hosts         int     // hosts of the site
	Pages         int     // pages per host
	Workers       int     // crawling goroutines
	Rate          float64 // pacer's limit per host, calls/s
	Burst         int
	ProviderLimit int // the provider's limit per host, calls in any 1 s
	Progress      time.Duration
	Procs         int    // worker processes; 1: the workers run in this process
	Plot          string // an SVG chart of the calls per 100 ms, or ""

	// Adaptive hides the provider's limit: the fleet learns it
	// (package adaptive), from Start calls/s per host.
	Adaptive bool
	Start    float64
	ChangeAt time.Duration // the provider's limit becomes ChangeTo after this (0: never)
	ChangeTo int
	// Prefix is the fleet's key prefix ("": a fresh one per run).
	Prefix string
	// PerHost caps the workers of a process busy with one host at once
	// (0: workers / hosts, rounded up).
	PerHost int
	// RetryAfterMs: the provider's 429s also carry retry-after-ms, the
	// exact wait, beside Retry-After's whole seconds.
	RetryAfterMs bool
	// Trace prints each request's wait span (package otelpacer), one line
	// each: the key, the band it waited for, the wait.
	Trace bool
}

// job is one page to fetch: its host and its path's number.
type job struct{ host, page string }

// maxSetAside is the longest a host whose next slot lies beyond the
// client's Timeout is set aside before its pages are tried again (an
// operator's resume, or a higher limit, shows then).
const maxSetAside = 5 * time.Second

// childEnv carries a child process's job: the test binary or the crawler
// itself, re-run with it set, crawls its share of the pages and exits.
const childEnv = "PACER_CRAWLER_CHILD"

// child is what a child process is told.
type child struct {
	Config      config
	ProviderURL string
	RedisURL    string // the Redis the parent uses (embedded or not)
	Prefix      string
	Index       int // this child's share: pages with index % Procs == Index
}

// summary is the run as the provider saw it: calls, 429s, and the rate and
// busiest second per host.
type summary = demo.Summary

func main() {
	// go-redis's own lines (a dial error per failed call while Redis is
	// down) go to slog at Debug level; pacer logs each outage once.
	redis.SetLogger(reserve.RedisLogger(nil))
	var c config
	flag.StringVar(&c.RedisURL, "redis", "", demo.RedisFlagUsage)
	flag.IntVar(&c.Hosts, "hosts", 3, "hosts of the site")
	flag.IntVar(&c.Pages, "pages", 100, "pages per host")
	flag.IntVar(&c.Workers, "workers", 16, "crawling goroutines")
	flag.StringVar(&c.Prefix, "prefix", "", "the fleet's key prefix (default pacer:crawler:<unix ns>:, a fresh one per run)")
	flag.IntVar(&c.PerHost, "per-host", 0, "the most workers of a process busy with one host at once, so that a slow host keeps no more (default -workers / -hosts, rounded up)")
	flag.Float64Var(&c.Rate, "rate", 0, "pacer's rate per host, calls per second (default: -provider-limit minus -burst)")
	flag.IntVar(&c.Burst, "burst", 0, "pacer's burst per host (default 1)")
	flag.IntVar(&c.ProviderLimit, "provider-limit", 21, "the provider's limit per host: calls in any second; pacer's limit is derived from it (reserve.Sliding)")
	flag.DurationVar(&c.Progress, "progress", time.Second, "how often to print progress")
	flag.IntVar(&c.Procs, "procs", 1, "worker processes (each with -workers goroutines), sharing the limit through Redis")
	flag.StringVar(&c.Plot, "plot", "", "write a chart of each host's calls per 100 ms to this SVG file (a build with -tags chart)")
	flag.BoolVar(&c.Adaptive, "adaptive", false, "hide the provider's limit: the fleet learns each host's rate from the 429s (package adaptive)")
	flag.Float64Var(&c.Start, "start", 5, "with -adaptive: the rate per host the fleet starts from")
	flag.DurationVar(&c.ChangeAt, "change-at", 0, "the provider changes its limit to -change-to after this long (0: never)")
	flag.IntVar(&c.ChangeTo, "change-to", 10, "the provider's limit per host after -change-at")
	flag.BoolVar(&c.RetryAfterMs, "retry-after-ms", false, "the provider's 429s also say retry-after-ms, the exact wait, beside Retry-After in whole seconds")
	flag.BoolVar(&c.Trace, "trace", false, "print each request's wait span (OpenTelemetry, package otelpacer): the host, the band it waited for, the wait (a build with -tags otel)")
	if os.Getenv(childEnv) != "" {
		if err := childMain(); err != nil {
			log.Fatal(err)
		}
		return
	}
	flag.Parse()
	s, err := run(context.Background(), c, os.Stderr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s)
}

// run crawls and returns the provider's summary; progress goes to out.
func run(ctx context.Context, c config, out io.Writer) (summary, error) {
	if c.Plot != "" {
		if err := chart.Check("./examples/crawler"); err != nil {
			return summary{}, err
		}
	}
	if c.Trace {
		if err := demo.CheckTracing("./examples/crawler"); err != nil {
			return summary{}, err
		}
	}
	if c.Hosts < 1 || c.Pages < 1 || c.Workers < 1 || c.ProviderLimit < 1 {
		return summary{}, errors.New("crawler: -hosts, -pages, -workers and -provider-limit must be at least 1")
	}
	if c.PerHost < 0 {
		return summary{}, errors.New("crawler: -per-host must not be negative (0: -workers / -hosts)")
	}
	if c.ChangeAt < 0 || (c.ChangeAt > 0 && c.ChangeTo < 1) || (c.Adaptive && !(c.Start >= 1 && c.Start <= 1000)) {
		return summary{}, errors.New("crawler: -change-at must not be negative, -change-to at least 1, -start from 1 to 1000")
	}
	c.Procs = max(c.Procs, 1)
	// The provider's limit is given; pacer's is derived from it.
	lim, warn, err := demo.PacerLimit(c.ProviderLimit, c.Rate, c.Burst)
	if err != nil {
		return summary{}, fmt.Errorf("crawler: -provider-limit, -rate, -burst: %w", err)
	}
	if warn != "" {
		fmt.Fprintln(out, "crawler:", warn)
	}
	c.Rate, c.Burst = lim.Rate, lim.Burst
	p, err := provider.Start(provider.Options{Limit: c.ProviderLimit, RetryAfterMs: c.RetryAfterMs})
	if err != nil {
		return summary{}, err
	}
	defer p.Close()

	r, err := demo.Connect(c.RedisURL, out, "")
	if err != nil {
		return summary{}, fmt.Errorf("crawler: %w", err)
	}
	defer r.Close()
	prefix := c.Prefix
	if prefix == "" {
		prefix = fmt.Sprintf("pacer:crawler:%d:", time.Now().UnixNano()) // a fresh site each run
	}
	demo.PrintWatch(out, r, prefix)
	start := time.Now()
	var learned func(host string) float64 // the fleet's learned rate, for progress
	if c.Adaptive {
		watcher, err := reserve.New(r.Client, reserve.Options{KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler), RequireRedis: true})
		if err != nil {
			return summary{}, err
		}
		defer watcher.Close()
		var (
			ratesMu sync.Mutex
			rates   = map[string]*adaptive.Rate{}
		)
		learned = func(host string) float64 {
			ratesMu.Lock()
			rate := rates[host]
			if rate == nil {
				var err error
				if rate, err = adaptive.New(watcher, host, adaptiveFor(c)); err != nil {
					ratesMu.Unlock()
					return math.NaN()
				}
				rates[host] = rate
			}
			ratesMu.Unlock()
			lim, err := rate.Peek(ctx)
			if err != nil {
				return math.NaN()
			}
			return lim.Rate
		}
	}
	stopProgress := progress(out, p, c, start, learned)
	defer stopProgress()
	var (
		mu        sync.Mutex
		changedAt time.Time                     // when the provider's limit changed
		samples   = map[string][]chart.Sample{} // the learned rates, for -plot
	)
	if c.Adaptive && c.Plot != "" {
		stopSampling := demo.Every(250*time.Millisecond, func() {
			for h := range c.Hosts {
				host := fmt.Sprintf("h%d.example", h)
				if r := learned(host); !math.IsNaN(r) {
					mu.Lock()
					samples[host] = append(samples[host], chart.Sample{At: time.Now(), Rate: r})
					mu.Unlock()
				}
			}
		})
		defer stopSampling()
	}
	if c.ChangeAt > 0 {
		change := time.AfterFunc(c.ChangeAt, func() {
			p.SetLimit(c.ChangeTo)
			mu.Lock()
			changedAt = time.Now()
			mu.Unlock()
			fmt.Fprintf(out, "t=%4.1fs the provider's limit is now %d per host\n", time.Since(start).Seconds(), c.ChangeTo)
		})
		defer change.Stop()
	}
	if c.Procs == 1 {
		if err := crawl(ctx, c, p.URL(), r.Client, prefix, 0, out); err != nil {
			return summary{}, err
		}
	} else {
		fmt.Fprintf(out, "starting %d worker processes of %d goroutines each\n", c.Procs, c.Workers)
		if err := fleet(ctx, c, p.URL(), r.URL, prefix); err != nil {
			return summary{}, err
		}
	}
	s := demo.Summarize(p.Stats(), c.Rate, c.Burst, time.Since(start))
	if c.Adaptive || c.ChangeAt > 0 {
		fmt.Fprintln(out, learning(p, c, start))
	}
	if c.Plot != "" {
		title := fmt.Sprintf("crawler: %d hosts, %d workers x %d processes, %g/s per host", c.Hosts, c.Workers, c.Procs, c.Rate)
		if c.Adaptive {
			title = fmt.Sprintf("crawler -adaptive: %d hosts, %d workers x %d processes, from %g/s per host", c.Hosts, c.Workers, c.Procs, c.Start)
		}
		ch := chart.Chart{Title: title, Start: start, Rate: c.Rate, ProviderLimit: c.ProviderLimit,
			Series: chart.Hosts(p.Calls(), p.Rejections())}
		mu.Lock()
		if !changedAt.IsZero() {
			ch.ProviderSteps = []chart.Step{{At: changedAt, Limit: c.ChangeTo}}
		}
		for i := range ch.Series {
			ch.Series[i].Learned = samples[ch.Series[i].Name]
		}
		mu.Unlock()
		if err := chart.WriteFile(c.Plot, ch); err != nil {
			return s, err
		}
		fmt.Fprintf(out, "wrote the chart of each host's calls per 100 ms to %s\n", c.Plot)
	}
	return s, nil
}

// fleet runs c.Procs child processes, each crawling its share, and waits.
func fleet(ctx context.Context, c config, providerURL, redisURL, prefix string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	errs := make(chan error, c.Procs)
	for i := range c.Procs {
		job, _ := json.Marshal(child{Config: c, ProviderURL: providerURL, RedisURL: redisURL, Prefix: prefix, Index: i})
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
	_, opts, err := demo.ParseRedis(j.RedisURL)
	if err != nil {
		return err
	}
	opts.ContextTimeoutEnabled, opts.MaxRetries = true, -1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	return crawl(context.Background(), j.Config, j.ProviderURL, rdb, j.Prefix, j.Index, os.Stderr)
}

// crawl fetches the pages whose index % c.Procs == share, from c.Workers
// goroutines, pacing each host on the Limiter shared through rdb.
func crawl(ctx context.Context, c config, providerURL string, rdb redis.UniversalClient, prefix string, share int, out io.Writer) error {
	lopts := reserve.Options{
		KeyPrefix:    prefix,
		Logger:       slog.New(slog.NewTextHandler(out, nil)),
		RequireRedis: true, // as in README's quick start: a wrong -redis fails here
	}
	var tracer reserve.Tracer
	if c.Trace {
		tel, stop, err := demo.Tracing(out)
		if err != nil {
			return err
		}
		defer stop()
		lopts.Tracer, tracer = tel, tel
	}
	limiter, err := reserve.New(rdb, lopts)
	if err != nil {
		return err
	}
	defer limiter.Close()
	// The transport paces each host fleet-wide and obeys the provider: a
	// 429 pauses the host for every worker, and the page is fetched again
	// after the pause.
	opts := pacehttp.Options{Limit: reserve.Limit{Rate: c.Rate, Burst: c.Burst}, Tracer: tracer}
	if c.Adaptive {
		a := adaptiveFor(c)
		opts.Adaptive = &a
	}
	transport, err := pacehttp.New(limiter, opts)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: transport, Timeout: 2 * time.Minute}

	// The pages, hosts interleaved; a page still refused after the
	// transport's retries goes back in. No host holds more than perHost of
	// the workers at once: a worker takes the first page whose host has
	// room, so a host that is slow (a lower limit, a pause, a long queue)
	// keeps perHost workers asleep on its slots, and the others go on
	// crawling the other hosts at their rate. Without the cap every worker
	// would end up asleep on the slowest host's queue. A host whose next
	// slot lies beyond the client's Timeout (a pause of minutes: pacehttp
	// fails the request at once with a *reserve.WaitTooLongError) is set
	// aside for that wait (at most maxSetAside at a time), its page handed
	// back.
	perHost := c.PerHost
	if perHost < 1 {
		perHost = (c.Workers + c.Hosts - 1) / c.Hosts
	}
	var (
		mu        sync.Mutex
		more      = sync.NewCond(&mu) // a page or a host's room came back
		queue     []job               // pages to fetch
		left      int
		active    = map[string]int{}       // workers on each host
		notBefore = map[string]time.Time{} // hosts set aside
	)
	for i := range c.Pages {
		if i%max(c.Procs, 1) != share {
			continue
		}
		for h := range c.Hosts {
			queue = append(queue, job{fmt.Sprintf("h%d.example", h), strconv.Itoa(i)})
			left++
		}
	}
	// next returns the first page whose host has room, waiting for one;
	// false when every page is done.
	next := func() (host, page string, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		for left > 0 {
			now := time.Now()
			for i, j := range queue {
				if active[j.host] < perHost && !now.Before(notBefore[j.host]) {
					queue = slices.Delete(queue, i, i+1)
					active[j.host]++
					return j.host, j.page, true
				}
			}
			more.Wait()
		}
		return "", "", false
	}
	// done gives the host's room back; a page refused, or not sent, goes
	// back in.
	done := func(host, page string, ok bool) {
		mu.Lock()
		defer mu.Unlock()
		active[host]--
		if ok {
			left--
		} else {
			queue = append(queue, job{host, page})
		}
		more.Broadcast()
	}
	// setAside keeps the host's pages from the workers for d.
	setAside := func(host string, d time.Duration) {
		d = min(d, maxSetAside)
		mu.Lock()
		notBefore[host] = time.Now().Add(d)
		mu.Unlock()
		time.AfterFunc(d, func() {
			mu.Lock()
			more.Broadcast()
			mu.Unlock()
		})
	}
	var wg sync.WaitGroup
	errs := make(chan error, c.Workers)
	for w := range c.Workers {
		wg.Go(func() {
			for {
				host, page, ok := next()
				if !ok {
					return
				}
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, providerURL+"/page/"+page, nil)
				req.Host = host
				req.Header.Set("X-Client", fmt.Sprintf("proc-%d/worker-%d", share, w))
				resp, err := client.Do(req)
				if tooLong, ok := errors.AsType[*reserve.WaitTooLongError](err); ok {
					setAside(host, tooLong.Wait)
					done(host, page, false)
					continue
				}
				if err != nil {
					errs <- err
					mu.Lock()
					left = 0 // the others stop too
					more.Broadcast()
					mu.Unlock()
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done(host, page, resp.StatusCode != http.StatusTooManyRequests)
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// progress prints calls, 429s and each host's rate over the last interval,
// every c.Progress, until stopped.
// adaptiveFor is the crawler's adaptive.Config: from -start, between 1
// and 1,000 calls/s per host, the defaults otherwise.
func adaptiveFor(c config) adaptive.Config {
	return adaptive.Config{Start: c.Start, Min: 1, Max: 1000}
}

func progress(out io.Writer, p *provider.Server, c config, start time.Time, learned func(string) float64) (stop func()) {
	prev := map[string]int{}
	return demo.Every(c.Progress, func() {
		st := p.Stats()
		line := fmt.Sprintf("t=%4.1fs calls=%d 429s=%d  per host/s:", time.Since(start).Seconds(), st.Accepted+st.Rejected, st.Rejected)
		for h := range c.Hosts {
			host := fmt.Sprintf("h%d.example", h)
			n := st.ByHost[host].Accepted
			line += fmt.Sprintf(" %s %.1f", host, float64(n-prev[host])/c.Progress.Seconds())
			if learned != nil {
				line += fmt.Sprintf(" (learned %.1f)", learned(host))
			}
			prev[host] = n
		}
		if c.Adaptive {
			fmt.Fprintln(out, line)
			return
		}
		fmt.Fprintf(out, "%s (limit %g)\n", line, c.Rate)
	})
}

// learning reports how the fleet found the provider's limit, per host: when
// it first held 90% of the limit for a second (from the start, and from the
// change), and the share of calls refused.
func learning(p *provider.Server, c config, start time.Time) string {
	st := p.Stats()
	line := fmt.Sprintf("learning: refused %d of %d calls (%.2f%%)", st.Rejected, st.Accepted+st.Rejected,
		100*float64(st.Rejected)/float64(max(1, st.Accepted+st.Rejected)))
	calls, refusals := p.Calls(), p.Rejections()
	for h := range c.Hosts {
		host := fmt.Sprintf("h%d.example", h)
		line += fmt.Sprintf("; %s: 90%% of %d at %s", host, c.ProviderLimit, reached(calls[host], start, 0, 0.9*float64(c.ProviderLimit)))
		if c.ChangeAt > 0 {
			line += fmt.Sprintf(", of %d at %s after the change, lowest 2 s after it %.1f/s",
				c.ChangeTo, reached(calls[host], start, c.ChangeAt, 0.9*float64(c.ChangeTo)), lowest(calls[host], start.Add(c.ChangeAt), 2*time.Second))
		}
	}
	if c.ChangeAt > 0 {
		from, to := start.Add(c.ChangeAt), start.Add(c.ChangeAt+30*time.Second)
		var ok, refused int
		for h := range c.Hosts {
			host := fmt.Sprintf("h%d.example", h)
			ok += between(calls[host], from, to)
			refused += between(refusals[host], from, to)
		}
		line += fmt.Sprintf("; over the 30 s after the change refused %d of %d (%.2f%%)", refused, ok+refused, 100*float64(refused)/float64(max(1, ok+refused)))
	}
	return line
}

// lowest returns the fewest calls per second in any span of length w from
// begin to the last call (stepping by a tenth of a second): how far the
// rate fell after a change.
func lowest(calls []time.Time, begin time.Time, w time.Duration) float64 {
	if len(calls) == 0 || calls[len(calls)-1].Sub(begin) < w {
		return 0
	}
	least := math.Inf(1)
	for t := begin; !t.Add(w).After(calls[len(calls)-1]); t = t.Add(w / 20) {
		least = min(least, float64(between(calls, t, t.Add(w)))/w.Seconds())
	}
	return least
}

// between counts the sorted times in [from, to).
func between(times []time.Time, from, to time.Time) int {
	i, _ := slices.BinarySearchFunc(times, from, time.Time.Compare)
	j, _ := slices.BinarySearchFunc(times, to, time.Time.Compare)
	return j - i
}

// reached returns when, after start+from, the calls first numbered at least
// n in the second before one of them (relative to start+from), or "never".
func reached(calls []time.Time, start time.Time, from time.Duration, n float64) string {
	begin := start.Add(from)
	i := 0
	for j, t := range calls {
		for t.Sub(calls[i]) >= time.Second {
			i++
		}
		if t.After(begin) && float64(j-i+1) >= n && calls[i].After(begin) {
			return fmt.Sprintf("%.1fs", t.Sub(begin).Seconds())
		}
	}
	return "never"
}
