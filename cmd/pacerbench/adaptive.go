package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// The adaptive phase (issue 24, item 5): what a warm key with a learned
// rate costs Redis per request through pacehttp, beside the same calls
// paced by a fixed Limit at the same rate. One Limiter on the quick
// start's client, 16 goroutines calling a local server that accepts every
// call; the learned rate is pinned (Start = Min = Max), so that the runs
// differ only in how the requests are paced, not in what is learned.

// adaptiveRun is one run's figures.
type adaptiveRun struct {
	Rate     float64
	Adaptive bool
	Requests int64
	Span     time.Duration
	Evalsha  int64 // EVALSHA calls (every script: reservations, reads of the rate, heartbeats)
	Usec     int64 // their time in Redis, µs
	Commands int64 // every command Redis ran (in scripts too)
}

// adaptiveResults are the adaptive phase's figures.
type adaptiveResults struct {
	Goroutines int
	Warmup     time.Duration
	Runs       []adaptiveRun
	Steal      time.Duration
}

func (b *bench) runAdaptive(ctx context.Context, progress func(string, ...any)) (*adaptiveResults, error) {
	res := &adaptiveResults{Goroutines: 16, Warmup: time.Second}
	span := 5 * time.Second
	if b.cfg.Quick {
		res.Warmup, span = 200*time.Millisecond, 500*time.Millisecond
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	cpu := readMachineCPU()
	for _, rate := range []float64{200, 2000} {
		for _, learned := range []bool{false, true} {
			run, err := b.adaptiveRun(ctx, srv.URL, rate, learned, res, span)
			if err != nil {
				return nil, err
			}
			progress("adaptive    %s", run.figures())
			res.Runs = append(res.Runs, run)
		}
	}
	res.Steal = stealSince(cpu)
	return res, nil
}

// adaptiveRun runs res.Goroutines callers on one key at rate for the
// warm-up and then span, and reads what Redis ran over span.
func (b *bench) adaptiveRun(ctx context.Context, url string, rate float64, learned bool, res *adaptiveResults, span time.Duration) (adaptiveRun, error) {
	run := adaptiveRun{Rate: rate, Adaptive: learned}
	if err := b.flush(ctx); err != nil {
		return run, err
	}
	rdb, err := quickStartClient(b.url)
	if err != nil {
		return run, err
	}
	l, err := reserve.New(rdb, reserve.Options{Logger: b.log})
	if err != nil {
		rdb.Close()
		return run, err
	}
	defer l.Close()
	opts := pacehttp.Options{Limit: reserve.Limit{Rate: rate, Burst: 1}, Logger: b.log}
	if learned {
		opts.Adaptive = &adaptive.Config{Start: rate, Min: rate, Max: rate}
	}
	tr, err := pacehttp.New(l, opts)
	if err != nil {
		return run, err
	}
	client := &http.Client{Transport: tr}
	// The callers run until the usage over span is read: a deadline of
	// warm-up + span from here ran out before the count began when the
	// usage read that starts it was slow (TestQuick beside a CPU hog: 0
	// requests counted).
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		counting atomic.Bool
		done     atomic.Int64
		wg       sync.WaitGroup
	)
	for range res.Goroutines {
		wg.Go(func() {
			for rctx.Err() == nil {
				req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
				if err != nil {
					return
				}
				req.Host = "warm.example"
				resp, err := client.Do(req)
				if pastRunEnd(err) {
					pauseRetry(rctx)
					continue
				}
				if err != nil {
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if counting.Load() {
					done.Add(1)
				}
			}
		})
	}
	var usageErr error
	select {
	case <-time.After(res.Warmup):
	case <-ctx.Done():
	}
	base, err := startUsage(ctx, b.admin)
	start := time.Now()
	counting.Store(true)
	if err != nil {
		usageErr = err
	}
	select {
	case <-time.After(span):
	case <-ctx.Done():
	}
	counting.Store(false)
	run.Requests, run.Span = done.Load(), time.Since(start)
	u, err := endUsage(ctx, b.admin, base)
	cancel()
	wg.Wait()
	if usageErr != nil {
		return run, usageErr
	}
	if err != nil {
		return run, err
	}
	for name, st := range u.Stats {
		if !outer[name] {
			run.Commands += st.Calls
		}
	}
	run.Evalsha, run.Usec = u.Stats["evalsha"].Calls, u.Stats["evalsha"].Usec
	return run, ctx.Err()
}

func (r adaptiveRun) pacing() string {
	if r.Adaptive {
		return "Adaptive (pinned)"
	}
	return "Limit"
}

// figures is one run's figures, for progress.
func (r adaptiveRun) figures() string {
	n := float64(max(1, r.Requests))
	return fmt.Sprintf("%-6s/s %-17s %8.1f requests/s, %.2f EVALSHA (%.1f µs in Redis) and %.2f commands per request",
		thousands(r.Rate), r.pacing(), float64(r.Requests)/r.Span.Seconds(), float64(r.Evalsha)/n, float64(r.Usec)/n, float64(r.Commands)/n)
}

func (r *adaptiveResults) tables() string {
	t := table{
		title: "A warm adaptive key (pacehttp)",
		intro: fmt.Sprintf("One `reserve.New` on a client built as the README's quick start builds it, one `pacehttp.Transport`, "+
			"%d goroutines calling one host on a local server that accepts every call, burst 1. \"Adaptive (pinned)\" is "+
			"`Options.Adaptive` with Start = Min = Max = the rate (the learned rate's machinery, nothing to learn); \"Limit\" is "+
			"`Options.Limit` at the same rate. Counted over %s after a %s warm-up, Redis's figures from INFO commandstats: "+
			"EVALSHA is every script, heartbeats and reads of the rate included; commands is every command Redis ran, a script's "+
			"one by one and the script itself not. Steal over the phase: %s.",
			r.Goroutines, dur(r.Runs[0].Span.Round(100*time.Millisecond)), dur(r.Warmup), dur(r.Steal)),
		header: []string{"rate", "pacing", "requests/s", "EVALSHA per request", "their time in Redis per request", "commands per request"},
	}
	for _, run := range r.Runs {
		n := float64(max(1, run.Requests))
		t.rows = append(t.rows, []string{thousands(run.Rate) + "/s", run.pacing(),
			fmt.Sprintf("%.1f", float64(run.Requests)/run.Span.Seconds()),
			fmt.Sprintf("%.2f", float64(run.Evalsha)/n), fmt.Sprintf("%.1f µs", float64(run.Usec)/n),
			fmt.Sprintf("%.2f", float64(run.Commands)/n)})
	}
	return t.markdown()
}
