package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// The counts phase (issue 24, item 2): pacehttp against providers that
// report their quota, a fixed window in each dialect and a refilling bucket
// in OpenAI's, each called by 3 members of 8 goroutines with a Limit far
// above the quota; each run beside the same one with the counts ignored
// (Options.IgnoreCounts: what pacehttp did before), all at once.

// countsRun is one provider's run.
type countsRun struct {
	Dialect string
	Latency time.Duration
	Ignored bool
	Stats   provider.WindowStats // fixed windows
	Quota   int
	Calls   int // every call the provider answered, accepted or refused
	Callers int // 429s that reached the callers (after pacehttp's retries)

	// The refilling bucket: calls accepted per second after the first
	// minute's burst, and refusals.
	Rate    float64
	Refused int
}

// countsResults are the counts phase's figures.
type countsResults struct {
	Quota      int
	Per        time.Duration
	Span       time.Duration
	RPM        int
	BucketSpan time.Duration
	Runs       []countsRun
	Steal      time.Duration
}

// countsLimit is every member's Limit: far above any quota here.
var countsLimit = reserve.Limit{Rate: 1000, Burst: 10}

func (b *bench) runCounts(ctx context.Context, progress func(string, ...any)) (*countsResults, error) {
	res := &countsResults{Quota: 50, Per: 5 * time.Second, Span: 32 * time.Second, RPM: 600, BucketSpan: 30 * time.Second}
	if b.cfg.Quick {
		res.Quota, res.Per, res.Span, res.BucketSpan = 10, time.Second, 4*time.Second, 4*time.Second
	}
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	cpu := readMachineCPU()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	key := 0
	for _, ignored := range []bool{false, true} {
		for _, latency := range []time.Duration{0, 200 * time.Millisecond} {
			for _, dialect := range provider.WindowDialects {
				key++
				name := fmt.Sprintf("counts-%d", key)
				run := countsRun{Dialect: dialect, Latency: latency, Ignored: ignored, Quota: res.Quota}
				p := &provider.Window{Quota: res.Quota, Per: res.Per, Dialect: dialect, Latency: latency}
				wg.Go(func() {
					srv := httptest.NewServer(p)
					defer srv.Close()
					n429, err := b.countsCall(ctx, srv.URL, name, ignored, res.Span)
					if err != nil {
						fail(err)
						return
					}
					run.Callers = n429
					run.Stats, run.Calls = p.Stats(), len(p.Calls())
					mu.Lock()
					res.Runs = append(res.Runs, run)
					mu.Unlock()
				})
			}
		}
		// OpenAI's dialect: a bucket that refills continuously.
		wg.Go(func() {
			llm, err := provider.StartLLM(provider.LLMOptions{RPM: res.RPM, TPM: 100_000_000})
			if err != nil {
				fail(err)
				return
			}
			defer llm.Close()
			host := fmt.Sprintf("bucket-%v", ignored)
			start := time.Now()
			if _, err := b.countsLLM(ctx, llm.URL(), host, ignored, res.BucketSpan); err != nil {
				fail(err)
				return
			}
			uses, refusals := llm.Uses(host)
			// After the bucket's first minute's quota (spent at once).
			from := start.Add(res.BucketSpan / 3)
			n := 0
			for _, u := range uses {
				if u.At.After(from) {
					n++
				}
			}
			mu.Lock()
			res.Runs = append(res.Runs, countsRun{Dialect: "openai (refilling)", Ignored: ignored,
				Rate: float64(n) / time.Since(from).Seconds(), Refused: len(refusals), Calls: len(uses) + len(refusals)})
			mu.Unlock()
		})
	}
	wg.Wait()
	res.Steal = stealSince(cpu)
	if len(errs) > 0 {
		return nil, errs[0]
	}
	for _, r := range res.Runs {
		progress("counts      %-20s latency %-6v ignored %-5v %s; used %v, refused %v", r.Dialect, r.Latency, r.Ignored, r.figures(), r.Stats.PerWindow, r.Stats.RefusedPer)
	}
	return res, nil
}

// countsMembers returns 3 Transports, each on its own Limiter on a client
// built as the README's quick start builds it, and a function closing them.
func (b *bench) countsMembers(ignored bool) ([]*http.Client, func(), error) {
	var (
		clients []*http.Client
		lims    []*reserve.Limiter
	)
	closeAll := func() {
		for _, l := range lims {
			l.Close()
		}
	}
	for range 3 {
		rdb, err := quickStartClient(b.url)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		l, err := reserve.New(rdb, reserve.Options{Logger: b.log})
		if err != nil {
			rdb.Close()
			closeAll()
			return nil, nil, err
		}
		lims = append(lims, l)
		tr, err := pacehttp.New(l, pacehttp.Options{Limit: countsLimit, IgnoreCounts: ignored, Logger: b.log})
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		clients = append(clients, &http.Client{Transport: tr})
	}
	return clients, closeAll, nil
}

// countsCall has 3 members of 8 goroutines GET url for span, each call
// paced on key (the request's Host), and returns the 429s the callers got.
func (b *bench) countsCall(ctx context.Context, url, key string, ignored bool, span time.Duration) (int, error) {
	return b.countsLoop(ctx, ignored, span, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err == nil {
			req.Host = key
		}
		return req, err
	})
}

// countsLLM has 3 members of 8 goroutines call the LLM provider for host.
func (b *bench) countsLLM(ctx context.Context, url, host string, ignored bool, span time.Duration) (int, error) {
	return b.countsLoop(ctx, ignored, span, func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err == nil {
			req.Host = host
			req.Header.Set("Idempotency-Key", "x") // a 429 is retried
			body := `{"tokens": 10}`
			req.Body = io.NopCloser(strings.NewReader(body))
			req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
			req.ContentLength = int64(len(body))
		}
		return req, err
	})
}

func (b *bench) countsLoop(ctx context.Context, ignored bool, span time.Duration, request func(context.Context) (*http.Request, error)) (int, error) {
	clients, closeAll, err := b.countsMembers(ignored)
	if err != nil {
		return 0, err
	}
	var refused atomic.Int64
	defer closeAll()
	rctx, cancel := context.WithTimeout(ctx, span)
	defer cancel()
	var wg sync.WaitGroup
	for _, c := range clients {
		for range 8 {
			wg.Go(func() {
				for rctx.Err() == nil {
					req, err := request(rctx)
					if err != nil {
						return
					}
					resp, err := c.Do(req)
					if pastRunEnd(err) {
						pauseRetry(rctx)
						continue
					}
					if err != nil {
						continue
					}
					if resp.StatusCode == http.StatusTooManyRequests && rctx.Err() == nil {
						refused.Add(1)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	return int(refused.Load()), ctx.Err()
}

// figures is one run's figures, for progress and the table.
func (r countsRun) figures() string {
	if r.Dialect == "openai (refilling)" {
		return fmt.Sprintf("%.2f/s accepted, %d refused", r.Rate, r.Refused)
	}
	s := r.Stats
	if s.Windows == 0 {
		return "no whole window"
	}
	full := 0 // windows at least 95% used
	for _, n := range s.PerWindow {
		if 100*n >= 95*r.Quota {
			full++
		}
	}
	return fmt.Sprintf("%d windows: %.1f%% used (fewest %d of %d; %d of %d windows ≥ 95%%), %d refused (most in one %d), %d 429s to callers",
		s.Windows, 100*float64(s.Used)/float64(s.Windows*r.Quota), s.MinUsed, r.Quota, full, s.Windows, s.Refused, s.MaxRefused, r.Callers)
}

func (r *countsResults) tables() string {
	t := table{
		title: "The provider's counts (pacehttp)",
		intro: fmt.Sprintf("Fixed windows of %d calls per %s, aligned to Unix time, refusals not counted, no Retry-After, in each dialect; "+
			"3 members (`reserve.New` on a client built as the README's quick start builds it, each with a `pacehttp.Transport` "+
			"of Limit %s/s) of 8 goroutines each, for %s. Windows judged: every whole window after the first (whose first calls "+
			"go out before any count is known). \"ignored\" is the same run with `IgnoreCounts` (pacehttp before the counts). "+
			"The refilling bucket is the LLM provider (%d requests per minute, refilled continuously, OpenAI's headers), "+
			"called for %s; its rate is counted after the first third. Every run at once. Steal over the phase: %s.",
			r.Quota, dur(r.Per), thousands(countsLimit.Rate), dur(r.Span), r.RPM, dur(r.BucketSpan), dur(r.Steal)),
		header: []string{"provider", "latency", "counts", "ignored"},
	}
	type row struct {
		dialect string
		latency time.Duration
	}
	cells := map[row][2]string{}
	var order []row
	for _, run := range r.Runs {
		k := row{run.Dialect, run.Latency}
		c, ok := cells[k]
		if !ok {
			order = append(order, k)
		}
		if run.Ignored {
			c[1] = run.figures()
		} else {
			c[0] = run.figures()
		}
		cells[k] = c
	}
	slices.SortFunc(order, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.dialect, b.dialect), cmp.Compare(a.latency, b.latency))
	})
	for _, k := range order {
		c := cells[k]
		latency := "–"
		if !strings.Contains(k.dialect, "refilling") {
			latency = fmt.Sprintf("%d ms", k.latency.Milliseconds())
		}
		t.rows = append(t.rows, []string{k.dialect, latency, c[0], c[1]})
	}
	return t.markdown()
}
