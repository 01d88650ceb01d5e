package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// The learn phase (issue 42, item 7): how fast a fleet learns a limit the
// provider does not publish, through pacehttp's Options.Adaptive. The
// provider is nginx's limit_req without burst (internal/provider.Leaky: a
// leaky bucket at L calls per second, a millisecond clock, one call of
// tolerance), answering 429 with `Retry-After: 1` or with no Retry-After
// at all. The fleet: learnProcs Limiters, each on a client built as the
// README's quick start builds it (reserve.New, default Options) with a
// pacehttp Transport whose Adaptive sets only Start (L/10), Min and Max,
// and learnGoroutines goroutines each calling without pause. The run
// starts cold (the figures of the cold start), and after 20 s the
// provider lowers its limit to 0.6 L (those of the lowered limit). With
// LEARN_DEBUG set in the environment, each run also prints the times of
// the refusals and the calls accepted in each second, to stderr (2: and
// the calls accepted in the 700 ms before each refusal).

const (
	learnLowered    = 0.6 // the limit after the change, a fraction of the first
	learnProcs      = 3
	learnGoroutines = 16
)

// learnLimits are the provider's limits at first (calls/s), a run each.
var learnLimits = []float64{10, 50}

// learnRun is one run's figures.
type learnRun struct {
	L          float64 // the provider's limit at first
	RetryAfter bool    // the 429s say Retry-After: 1 (else nothing)
	Change     time.Duration
	After      time.Duration // the run's length after the change
	// ColdReach and LowReach are when the accepted calls first numbered
	// 90% of the limit in a second (the second wholly after the start, or
	// the change); -1: never.
	ColdReach, LowReach    time.Duration
	ColdCalls, ColdRefused int     // calls and refusals before the change
	LowCalls, LowRefused   int     // after it
	ColdHeld, LowHeld      float64 // accepted calls/s over the second half of each part
	Steal                  time.Duration
}

// learnResults are the learn phase's figures.
type learnResults struct {
	Runs []learnRun
}

func (b *bench) runLearn(ctx context.Context, progress func(string, ...any)) (*learnResults, error) {
	res := &learnResults{}
	change, after, limits := 20*time.Second, 20*time.Second, learnLimits
	if b.cfg.Quick {
		// One limit: the quick run checks the phase works (CI's time).
		change, after, limits = 3*time.Second, 3*time.Second, learnLimits[:1]
	}
	for _, l := range limits {
		for _, ra := range []bool{true, false} {
			run, err := b.learnRun(ctx, l, ra, change, after)
			if err != nil {
				return nil, err
			}
			progress("learn       %s", run.figures())
			res.Runs = append(res.Runs, run)
		}
	}
	return res, nil
}

// learnServer is the provider: a leaky bucket, its rate changed at will,
// and the times of the calls it accepted and refused.
type learnServer struct {
	retryAfter bool

	mu       sync.Mutex
	bucket   provider.Leaky
	accepted []time.Time
	refused  []time.Time
}

func (s *learnServer) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	now := time.Now() // under the lock: the calls are judged in the order taken in
	ok := s.bucket.Admit(now)
	if ok {
		s.accepted = append(s.accepted, now)
	} else {
		s.refused = append(s.refused, now)
	}
	s.mu.Unlock()
	if ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.retryAfter {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(http.StatusTooManyRequests)
}

// setRate gives the provider a fresh bucket at rate (nginx reloaded).
func (s *learnServer) setRate(rate float64) {
	s.mu.Lock()
	s.bucket = provider.Leaky{Rate: rate}
	s.mu.Unlock()
}

func (b *bench) learnRun(ctx context.Context, learnL float64, retryAfter bool, change, after time.Duration) (learnRun, error) {
	run := learnRun{L: learnL, RetryAfter: retryAfter, Change: change, After: after}
	if err := b.flush(ctx); err != nil {
		return run, err
	}
	p := &learnServer{retryAfter: retryAfter}
	p.setRate(learnL)
	srv := httptest.NewServer(p)
	defer srv.Close()
	cfg := adaptive.Config{Start: learnL / 10, Min: 1, Max: 10 * learnL}
	var clients []*http.Client
	for range learnProcs {
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
		tr, err := pacehttp.New(l, pacehttp.Options{Adaptive: &cfg, Logger: b.log})
		if err != nil {
			return run, err
		}
		clients = append(clients, &http.Client{Transport: tr})
	}
	cpu := readMachineCPU()
	start := time.Now()
	rctx, cancel := context.WithDeadline(ctx, start.Add(change+after))
	defer cancel()
	var wg sync.WaitGroup
	for _, client := range clients {
		for range learnGoroutines {
			wg.Go(func() {
				for rctx.Err() == nil {
					req, err := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL, nil)
					if err != nil {
						return
					}
					req.Host = "learn.example"
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
				}
			})
		}
	}
	select {
	case <-time.After(time.Until(start.Add(change))):
	case <-ctx.Done():
	}
	p.setRate(learnL * learnLowered)
	wg.Wait()
	run.Steal = stealSince(cpu)
	if err := ctx.Err(); err != nil {
		return run, err
	}
	p.mu.Lock()
	accepted, refused := slices.Clone(p.accepted), slices.Clone(p.refused)
	p.mu.Unlock()
	if len(accepted) == 0 {
		return run, errors.New("pacerbench: learn: the provider accepted no call")
	}
	at := start.Add(change)
	end := at.Add(after)
	if os.Getenv("LEARN_DEBUG") != "" {
		var ref, sec []string
		for _, t := range refused {
			ref = append(ref, fmt.Sprintf("%.2f", t.Sub(start).Seconds()))
		}
		for i := 0; i < int((change+after)/time.Second); i++ {
			sec = append(sec, fmt.Sprint(countBetween(accepted, start.Add(time.Duration(i)*time.Second), start.Add(time.Duration(i+1)*time.Second))))
		}
		fmt.Fprintln(os.Stderr, "refused at", ref, "\naccepted per second", sec)
		if os.Getenv("LEARN_DEBUG") == "2" {
			for _, r := range refused {
				var near []string
				for _, a := range accepted {
					if d := r.Sub(a); d > 0 && d < 700*time.Millisecond {
						near = append(near, fmt.Sprintf("%.3f", a.Sub(start).Seconds()))
					}
				}
				fmt.Fprintf(os.Stderr, "refused %.3f after %v\n", r.Sub(start).Seconds(), near)
			}
		}
	}
	run.ColdReach = reachedAfter(accepted, start, 0.9*learnL)
	run.LowReach = reachedAfter(accepted, at, 0.9*learnL*learnLowered)
	run.ColdRefused = countBetween(refused, start, at)
	run.ColdCalls = countBetween(accepted, start, at) + run.ColdRefused
	run.LowRefused = countBetween(refused, at, end)
	run.LowCalls = countBetween(accepted, at, end) + run.LowRefused
	run.ColdHeld = float64(countBetween(accepted, start.Add(change/2), at)) / (change / 2).Seconds()
	run.LowHeld = float64(countBetween(accepted, at.Add(after/2), end)) / (after / 2).Seconds()
	return run, nil
}

// reachedAfter returns how long after begin the sorted accepted calls
// first numbered at least n in the second before one of them, counting only
// calls after begin; -1: never.
func reachedAfter(calls []time.Time, begin time.Time, n float64) time.Duration {
	i := 0
	for j, t := range calls {
		for t.Sub(calls[i]) >= time.Second {
			i++
		}
		if t.After(begin) && calls[i].After(begin) && float64(j-i+1) >= n {
			return t.Sub(begin)
		}
	}
	return -1
}

// countBetween counts the sorted times in [from, to).
func countBetween(times []time.Time, from, to time.Time) int {
	i, _ := slices.BinarySearchFunc(times, from, time.Time.Compare)
	j, _ := slices.BinarySearchFunc(times, to, time.Time.Compare)
	return j - i
}

func (r learnRun) header() string {
	if r.RetryAfter {
		return "`Retry-After: 1`"
	}
	return "no Retry-After"
}

func reachString(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", d.Seconds())
}

func refusedOf(n, of int) string {
	return fmt.Sprintf("%d of %s (%.2f%%)", n, thousands(float64(of)), 100*float64(n)/float64(max(1, of)))
}

// figures is one run's figures, for progress.
func (r learnRun) figures() string {
	learnL := r.L
	return fmt.Sprintf("L %-3g %-16s cold: 90%% of %g after %s, refused %s, held %.1f/s; lowered to %g: 90%% after %s, refused %s, held %.1f/s; steal %s",
		learnL, r.header(), learnL, reachString(r.ColdReach), refusedOf(r.ColdRefused, r.ColdCalls), r.ColdHeld,
		learnL*learnLowered, reachString(r.LowReach), refusedOf(r.LowRefused, r.LowCalls), r.LowHeld, dur(r.Steal))
}

func (r *learnResults) tables() string {
	first := r.Runs[0]
	t := table{
		title: "Learning a limit nobody publishes (pacehttp, Options.Adaptive)",
		intro: fmt.Sprintf("A provider as nginx's `limit_req` without burst (a leaky bucket at L calls/s, a millisecond clock, one call "+
			"of tolerance; internal/provider.Leaky) that publishes nothing and answers 429 with `Retry-After: 1`, or with no "+
			"Retry-After. %d `reserve.New` on clients built as the README's quick start builds them, each with a `pacehttp.Transport` "+
			"whose `Adaptive` sets only Start L/10, Min 1 and Max 10 L, and %d goroutines each calling without pause. "+
			"The run starts cold; after %s the provider lowers its limit to %g L and the run goes on %s. \"90%% after\" is when the "+
			"accepted calls first numbered 90%% of the limit in one second wholly after the start (or the change); refused counts "+
			"the provider's 429s over the part; held is the accepted calls per second over the part's second half.",
			learnProcs, learnGoroutines, dur(first.Change), learnLowered, dur(first.After)),
		header: []string{"L", "the 429 says", "cold: 90% of L after", "refused", "held", "lowered: 90% after", "refused", "held", "steal"},
	}
	for _, run := range r.Runs {
		t.rows = append(t.rows, []string{fmt.Sprintf("%g/s", run.L), run.header(), reachString(run.ColdReach), refusedOf(run.ColdRefused, run.ColdCalls),
			fmt.Sprintf("%.1f/s", run.ColdHeld), reachString(run.LowReach), refusedOf(run.LowRefused, run.LowCalls),
			fmt.Sprintf("%.1f/s", run.LowHeld), dur(run.Steal)})
	}
	return t.markdown()
}

// pastRunEnd reports whether err is a call's refusal because its slot lies
// past its context's deadline: the run's end, at the rate the key has now.
// The caller pauses (pauseRetry) before it calls again: the rate may rise
// meanwhile (the adaptive rate of the learn and adaptive phases), and its
// slot come before the end. Called again at once, each such call was
// refused again, and the callers spun: the learn phase's 48 callers made
// about 800,000 refusals in the last seconds of a quick run, 1.6 CPUs for
// 14 s, beside the fleet it measures.
func pastRunEnd(err error) bool {
	var wt *reserve.WaitTooLongError
	return errors.As(err, &wt) && wt.Deadline
}

// retryPause is how long a caller refused by pastRunEnd pauses.
const retryPause = 100 * time.Millisecond

// pauseRetry pauses for retryPause, or until ctx ends.
func pauseRetry(ctx context.Context) {
	t := time.NewTimer(retryPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
