package main

// The inflight phase measures in-flight bands (reserve.Band.InFlight, issue
// 41) against internal/provider's Concurrency provider, which answers 429
// to any call beyond N open per host (arrival to response end). Every
// Limiter is built as README's quick start builds it:
// reserve.New(redis.NewClient(&redis.Options{Addr: addr}),
// reserve.Options{}), with Metrics to count its Redis calls and its
// switches to local pacing (quickStartLimiter). Four measurements:
//
//   - Hand-off: one seat (N = 1) shared by this process and a child
//     process, each looping Acquire, a call to the provider (held 2 ms),
//     Done; each waits while the other holds the seat. Every grant that
//     follows a release by the other process is a cross-process hand-off:
//     its delay is the grant's time less the release's (one machine, one
//     clock). Redis calls per admission by operation, both processes.
//   - No cost when not binding (River's case, riverqueue/river#1145): 40
//     workers in one process calling the provider (each call held 20 ms),
//     with no pacer, with Wait on a bucket that never binds (one Redis
//     call per call: the cost of pacing at all), with Acquire on an
//     in-flight band of 40 (binding at exactly the workers' count) and of
//     1000: calls per second.
//   - Together with rate: an in-flight band, a bucket and a window in one
//     policy, 16 workers over two Limiters, three runs, each bound by one
//     of the bands: no band over its limit (the provider's refusals and
//     most open; the slots in any second and in each window), and the
//     calls per second against what the binding band allows.
//   - Crash: a child process holds N = 2 seats, each mid-call (the
//     provider holds its calls for an hour), and this process's 2 waiters
//     queue; the child is SIGKILLed at a random point of a heartbeat
//     interval; the time from the kill to each waiter's seat.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/granted"
	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
)

// inflightSizes are the phase's sizes.
type inflightSizes struct {
	Handoff     time.Duration // the hand-off run
	HandoffHold time.Duration // each hand-off call's hold at the provider
	Workers     int           // no cost: workers
	WorkerHold  time.Duration // no cost: each call's hold
	NoCost      time.Duration // no cost: each run
	Rounds      int           // no cost: rounds of the three runs
	Together    time.Duration // together with rate: each run
	TogetherW   int           // together: workers (over two Limiters)
	Crashes     int           // crash runs
}

func inflightSizesFor(c config) inflightSizes {
	s := inflightSizes{Handoff: 5 * time.Second, HandoffHold: 2 * time.Millisecond, Workers: 40, WorkerHold: 20 * time.Millisecond,
		NoCost: 2500 * time.Millisecond, Rounds: 4, Together: 6 * time.Second, TogetherW: 16, Crashes: 3}
	if c.Quick {
		s.Handoff, s.NoCost, s.Rounds, s.Together, s.Crashes = max(c.Phase, 500*time.Millisecond), max(c.Phase/2, 300*time.Millisecond), 1, 1500*time.Millisecond, 1
	}
	return s
}

// handoffResult is the hand-off measurement.
type handoffResult struct {
	Delays     []time.Duration // cross-process hand-offs, sorted
	Admissions int64
	HandedOff  int64            // of the admissions, seats a Done handed over
	Ops        map[string]int64 // both processes' Redis calls by operation
	Refused    int
	Fallbacks  int64 // switches to local pacing, both processes
	Seconds    float64
}

// noCostRun is one run of the no-cost measurement.
type noCostRun struct {
	Name     string
	Calls    int
	Seconds  float64
	RedisCPU float64 // seconds of Redis CPU in the measured runs
	Usec     int64   // the scripts' µs as Redis counts them (commandstats: EVALSHA and the like)
}

// togetherRun is one run of the together-with-rate measurement.
type togetherRun struct {
	Binds      string // the band meant to bind
	N          int
	Rate       float64
	Burst      int
	WinN       int
	WinLen     time.Duration
	Hold       time.Duration
	Calls      int     // slots in the measured span
	PerSecond  float64 // calls per second in the measured span (its last 2/3)
	Allowed    float64 // what the binding band allows per second
	MeanHeld   time.Duration
	Refused    int // provider: refused over N
	MaxOpen    int // provider: most open at once
	Busiest1s  int // the most slots in any second
	BusiestWin int // the most slots in one of the window band's windows
	Fallbacks  int64
	Moved      int64 // slots Sleep moved (woken too late: a loaded machine; or a pause)
}

// crashRun is one crash run.
type crashRun struct {
	KillAfterBeat time.Duration   // the kill's offset after the child's "held"
	Back          []time.Duration // from the kill to each waiter's seat
	Refused       int             // the provider's refusals in the run
	Fallbacks     int64           // the waiters' Limiter's switches to local pacing
}

// inflightResults is the inflight phase.
type inflightResults struct {
	Sizes    inflightSizes
	Handoff  handoffResult
	NoCost   []noCostRun // summed over the rounds, by name
	Together []togetherRun
	Crashes  []crashRun
	Steal    time.Duration
}

// runInflight runs the inflight phase.
func (b *bench) runInflight(ctx context.Context, progress func(string, ...any)) (*inflightResults, error) {
	cpu := readMachineCPU()
	res := &inflightResults{Sizes: inflightSizesFor(b.cfg)}
	var err error
	if res.Handoff, err = b.inflightHandoff(ctx, res.Sizes); err != nil {
		return nil, fmt.Errorf("inflight, hand-off: %w", err)
	}
	h := res.Handoff
	if len(h.Delays) > 0 {
		progress("inflight    hand-off across processes: p50 %s p99 %s over %d hand-offs, %.2f Redis calls per admission", dur(pct(h.Delays, 0.5)), dur(pct(h.Delays, 0.99)), len(h.Delays), h.perAdmission(false))
	}
	if res.NoCost, err = b.inflightNoCost(ctx, res.Sizes); err != nil {
		return nil, fmt.Errorf("inflight, no cost: %w", err)
	}
	for _, r := range res.NoCost {
		progress("inflight    %d workers, %-22s %7.1f calls/s", res.Sizes.Workers, r.Name+":", float64(r.Calls)/r.Seconds)
	}
	for _, t := range togetherRuns() {
		r, err := b.inflightTogether(ctx, res.Sizes, t)
		if err != nil {
			return nil, fmt.Errorf("inflight, together (%s binds): %w", t.Binds, err)
		}
		progress("inflight    together, %s binds: %.1f/s of %.1f/s allowed, refused %d, most open %d of %d, busiest 1 s %d, busiest window %d of %d",
			r.Binds, r.PerSecond, r.Allowed, r.Refused, r.MaxOpen, r.N, r.Busiest1s, r.BusiestWin, r.WinN)
		res.Together = append(res.Together, r)
	}
	for i := range res.Sizes.Crashes {
		r, err := b.inflightCrash(ctx, int64(i))
		if err != nil {
			return nil, fmt.Errorf("inflight, crash %d: %w", i+1, err)
		}
		progress("inflight    crash %d: seats back after %v", i+1, r.Back)
		res.Crashes = append(res.Crashes, r)
	}
	res.Steal = stealSince(cpu)
	return res, nil
}

// perAdmission is Redis calls per admission: the seats operation alone,
// or every operation but the heartbeat's.
func (h handoffResult) perAdmission(seatsOnly bool) float64 {
	if h.Admissions == 0 {
		return 0
	}
	var n int64
	for op, c := range h.Ops {
		if seatsOnly && op != "seats" || op == "heartbeat" {
			continue
		}
		n += c
	}
	return float64(n) / float64(h.Admissions)
}

// inflightHandoff runs the hand-off measurement: this process and one
// child on one seat.
func (b *bench) inflightHandoff(ctx context.Context, s inflightSizes) (handoffResult, error) {
	if err := b.flush(ctx); err != nil {
		return handoffResult{}, err
	}
	p, err := provider.StartConcurrency(provider.ConcurrencyOptions{N: 1})
	if err != nil {
		return handoffResult{}, err
	}
	defer p.Close()
	j := inflightJob{Mode: inflightHandoff, RedisURL: b.url, ProviderURL: p.URL(), Key: "handoff", N: 1, Hold: s.HandoffHold}
	cctx, kill := context.WithCancel(ctx)
	defer kill()
	f, err := fleetproc.Start(cctx, fleetproc.Options{Env: inflightChildEnv, Procs: 1, Stdin: true, Spec: j})
	if err != nil {
		return handoffResult{}, err
	}
	if err := awaitReady(cctx, f); err != nil {
		kill()
		f.Wait()
		return handoffResult{}, err
	}
	m := newSeatCounts()
	l, closeL, err := quickStartLimiter(b.url, m, b.log)
	if err != nil {
		kill()
		f.Wait()
		return handoffResult{}, err
	}
	defer closeL()
	hc := providerClient()
	warm := j
	warm.Key = "handoff:warm"
	if _, err := handoffLoop(l, hc, warm, time.Now().Add(100*time.Millisecond), func(byte, int64) {}); err != nil {
		kill()
		f.Wait()
		return handoffResult{}, err
	}
	m.take()
	start, end := beginRun(f, s.Handoff)
	time.Sleep(time.Until(start))
	type event struct {
		kind byte
		at   int64
		proc int
	}
	var events []event
	refused, lerr := handoffLoop(l, hc, j, end, func(kind byte, ns int64) { events = append(events, event{kind, ns, 0}) })
	ops, taken, handed := m.take()
	werr := f.Wait()
	if err := errors.Join(lerr, werr); err != nil {
		return handoffResult{}, err
	}
	r := handoffResult{Ops: ops, Admissions: taken, HandedOff: handed, Refused: refused, Seconds: s.Handoff.Seconds()}
	for _, line := range f.Children()[0].Lines() {
		fs := strings.Fields(line)
		if len(fs) < 2 {
			continue
		}
		at, _ := strconv.ParseInt(fs[1], 10, 64)
		switch fs[0] {
		case "g", "r":
			events = append(events, event{fs[0][0], at, 1})
		case "o":
			n, _ := strconv.ParseInt(fs[3], 10, 64)
			r.Ops[fs[2]] += n
		case "h":
			t, _ := strconv.ParseInt(fs[2], 10, 64)
			h, _ := strconv.ParseInt(fs[3], 10, 64)
			ref, _ := strconv.Atoi(fs[4])
			fb, _ := strconv.ParseInt(fs[5], 10, 64)
			r.Fallbacks += fb
			r.Admissions += t
			r.HandedOff += h
			r.Refused += ref
		}
	}
	r.Fallbacks += m.fallbacks.Load()
	slices.SortStableFunc(events, func(a, b event) int { return int(a.at - b.at) })
	last := event{proc: -1}
	for _, e := range events {
		switch e.kind {
		case 'r':
			last = e
		case 'g':
			if last.proc >= 0 && last.proc != e.proc {
				r.Delays = append(r.Delays, time.Duration(e.at-last.at))
			}
			last = event{proc: -1}
		}
	}
	slices.Sort(r.Delays)
	pst, _ := p.Stats()
	r.Refused = max(r.Refused, pst.Refused)
	return r, nil
}

// inflightNoCost runs the no-cost measurement: the workers with no pacer,
// with an in-flight band of exactly their number, and of 1000.
func (b *bench) inflightNoCost(ctx context.Context, s inflightSizes) ([]noCostRun, error) {
	p, err := provider.StartConcurrency(provider.ConcurrencyOptions{N: s.Workers})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	names := []string{"no pacer", "a bucket never binding (Wait)", fmt.Sprintf("in flight %d (binding)", s.Workers), "in flight 1000"}
	ns := []int{0, -1, s.Workers, 1000}
	sums := make([]noCostRun, len(names))
	for round := range s.Rounds {
		for i, n := range ns {
			if err := b.flush(ctx); err != nil {
				return nil, err
			}
			r, err := b.noCostRun(ctx, p, s, n, fmt.Sprintf("nocost%d", round))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", names[i], err)
			}
			sums[i].Name = names[i]
			sums[i].Calls += r.Calls
			sums[i].Seconds += r.Seconds
			sums[i].RedisCPU += r.RedisCPU
			sums[i].Usec += r.Usec
		}
	}
	if st, _ := p.Stats(); st.Refused > 0 {
		return nil, fmt.Errorf("the provider refused %d calls over %d open", st.Refused, s.Workers)
	}
	return sums, nil
}

// noCostRun runs the workers for s.NoCost, through an in-flight band of n
// (0: no pacer; -1: Wait on a bucket of 1,000,000/s, burst 1000, instead),
// and returns the calls made, the seconds and what Redis spent.
func (b *bench) noCostRun(ctx context.Context, p *provider.Concurrency, s inflightSizes, n int, key string) (noCostRun, error) {
	var l *reserve.Limiter
	if n != 0 {
		lim, closeL, err := quickStartLimiter(b.url, newSeatCounts(), b.log)
		if err != nil {
			return noCostRun{}, err
		}
		defer closeL()
		l = lim
	}
	hc := providerClient()
	req := reserve.Request{Key: key, Policy: inflightPolicy(max(n, 1)), Cost: oneRequest}
	bucket := reserve.Limit{Rate: 1e6, Burst: 1000}
	call := func() error {
		if n < 0 {
			if err := l.Wait(ctx, key, bucket); err != nil {
				return err
			}
		} else if l != nil {
			r, err := l.Acquire(ctx, req)
			if err != nil {
				return err
			}
			defer r.Done()
		}
		code, err := providerCall(ctx, hc, p.URL(), "nocost.test", s.WorkerHold)
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("provider answered %d", code)
		}
		return err
	}
	// Warm: a call per worker, so every connection is dialled.
	var wg sync.WaitGroup
	errs := make([]error, s.Workers)
	for i := range s.Workers {
		wg.Go(func() { errs[i] = call() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return noCostRun{}, err
	}
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return noCostRun{}, err
	}
	counts := make([]int, s.Workers)
	start := time.Now()
	end := start.Add(s.NoCost)
	for i := range s.Workers {
		wg.Go(func() {
			for time.Now().Before(end) {
				if errs[i] = call(); errs[i] != nil {
					return
				}
				counts[i]++
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if err := errors.Join(errs...); err != nil {
		return noCostRun{}, err
	}
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return noCostRun{}, err
	}
	r := noCostRun{Seconds: secs, RedisCPU: u.CPU}
	for name, st := range u.Stats {
		if outer[name] { // pacer's calls are scripts
			r.Usec += st.Usec
		}
	}
	for _, c := range counts {
		r.Calls += c
	}
	return r, nil
}

// togetherRuns are the together-with-rate runs, each bound by one band.
func togetherRuns() []togetherRun {
	return []togetherRun{
		{Binds: "in flight", N: 4, Rate: 200, Burst: 4, WinN: 150, WinLen: 500 * time.Millisecond, Hold: 50 * time.Millisecond},
		{Binds: "bucket", N: 16, Rate: 100, Burst: 2, WinN: 80, WinLen: 500 * time.Millisecond, Hold: 50 * time.Millisecond},
		{Binds: "window", N: 16, Rate: 400, Burst: 10, WinN: 40, WinLen: 500 * time.Millisecond, Hold: 50 * time.Millisecond},
	}
}

// inflightTogether runs t: s.TogetherW workers over two Limiters.
func (b *bench) inflightTogether(ctx context.Context, s inflightSizes, t togetherRun) (togetherRun, error) {
	if err := b.flush(ctx); err != nil {
		return t, err
	}
	p, err := provider.StartConcurrency(provider.ConcurrencyOptions{N: t.N})
	if err != nil {
		return t, err
	}
	defer p.Close()
	pol := reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: t.N},
		{Name: "rate", Unit: "requests", Limit: reserve.Limit{Rate: t.Rate, Burst: t.Burst}},
		{Name: "quota", Unit: "requests", Window: reserve.Window{N: float64(t.WinN), Length: t.WinLen}},
	}
	req := reserve.Request{Key: "together", Policy: pol, Cost: oneRequest}
	ms := []*seatCounts{newSeatCounts(), newSeatCounts()}
	var lims []*reserve.Limiter
	for _, m := range ms {
		l, closeL, err := quickStartLimiter(b.url, m, b.log)
		if err != nil {
			return t, err
		}
		defer closeL()
		lims = append(lims, l)
	}
	hc := providerClient()
	type call struct {
		slot time.Time
		held time.Duration
	}
	var mu sync.Mutex
	var calls []call
	var wg sync.WaitGroup
	errs := make([]error, s.TogetherW)
	start := time.Now()
	end := start.Add(s.Together)
	for i := range s.TogetherW {
		l := lims[i%2]
		wg.Go(func() {
			for time.Now().Before(end) {
				r, err := l.Acquire(ctx, req)
				if err != nil {
					errs[i] = err
					return
				}
				at := time.Now()
				_, err = providerCall(ctx, hc, p.URL(), "together.test", t.Hold)
				held := time.Since(at)
				r.Done()
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				ns, _ := granted.Slot(r)
				calls = append(calls, call{time.Unix(0, ns), held})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return t, err
	}
	// The measured span: the run's last 2/3, past the first burst, in
	// whole windows of the window band (a window cut by the span's edge
	// may have spent its quota outside it); calls by their slot on the
	// server's clock, which the band's windows are on (granted.Slot: the
	// slot placed on this process's clock, Time, falls after a window's
	// end by the clock estimate's error: beside a CPU hog a window of 40
	// read 41).
	from := start.Add(s.Together / 3)
	if w := int64(t.WinLen); end.Sub(from) >= 2*t.WinLen {
		from = time.Unix(0, (from.UnixNano()+w-1)/w*w)
		end = time.Unix(0, end.UnixNano()/w*w)
	}
	var slots []time.Time
	var held time.Duration
	wins := map[int64]int{}
	for _, c := range calls {
		slots = append(slots, c.slot)
		held += c.held
		wins[c.slot.UnixNano()/int64(t.WinLen)]++
		if !c.slot.Before(from) && c.slot.Before(end) {
			t.Calls++
		}
	}
	if len(calls) > 0 {
		t.MeanHeld = held / time.Duration(len(calls))
	}
	span := end.Sub(from).Seconds()
	t.PerSecond = float64(t.Calls) / span
	switch t.Binds {
	case "in flight":
		t.Allowed = float64(t.N) / t.MeanHeld.Seconds()
	case "bucket":
		t.Allowed = t.Rate
	case "window":
		t.Allowed = float64(t.WinN) / t.WinLen.Seconds()
	}
	t.Busiest1s = provider.Busiest(slots, time.Second)
	for _, n := range wins {
		t.BusiestWin = max(t.BusiestWin, n)
	}
	st, _ := p.Stats()
	t.Refused, t.MaxOpen = st.Refused, st.MaxOpen
	t.Fallbacks = ms[0].fallbacks.Load() + ms[1].fallbacks.Load()
	t.Moved = ms[0].moved.Load() + ms[1].moved.Load()
	return t, nil
}

// inflightCrash runs one crash run: a child holds 2 seats mid-call, this
// process's 2 waiters queue, the child is SIGKILLed.
func (b *bench) inflightCrash(ctx context.Context, seed int64) (crashRun, error) {
	const n = 2
	if err := b.flush(ctx); err != nil {
		return crashRun{}, err
	}
	p, err := provider.StartConcurrency(provider.ConcurrencyOptions{N: n})
	if err != nil {
		return crashRun{}, err
	}
	defer p.Close()
	j := inflightJob{Mode: inflightHolder, RedisURL: b.url, ProviderURL: p.URL(), Key: "crash", N: n, Seats: n}
	cctx, kill := context.WithCancel(ctx)
	defer kill()
	f, err := fleetproc.Start(cctx, fleetproc.Options{Env: inflightChildEnv, Procs: 1, Spec: j})
	if err != nil {
		return crashRun{}, err
	}
	defer func() { kill(); f.Wait() }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	if line, err := f.Children()[0].FirstLine(wctx); err != nil || line != "held" {
		return crashRun{}, fmt.Errorf("holder: %q, %v", line, err)
	}
	for {
		if st, _ := p.Stats(); st.Open == n {
			break
		}
		if wctx.Err() != nil {
			return crashRun{}, errors.New("the holder's calls never reached the provider")
		}
		time.Sleep(time.Millisecond)
	}
	m := newSeatCounts()
	l, closeL, err := quickStartLimiter(b.url, m, b.log)
	if err != nil {
		return crashRun{}, err
	}
	defer closeL()
	hc := providerClient()
	req := reserve.Request{Key: "crash", Policy: inflightPolicy(n), Cost: oneRequest}
	got := make([]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			r, err := l.Acquire(wctx, req)
			if err != nil {
				errs[i] = err
				return
			}
			got[i] = time.Now()
			defer r.Done()
			if code, err := providerCall(wctx, hc, p.URL(), "crash.test", 10*time.Millisecond); err != nil || code != http.StatusOK {
				errs[i] = fmt.Errorf("the waiter's call: %d, %v", code, err)
			}
		})
	}
	for m.waiters.Load() < n && wctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
	// Kill at a random point of a heartbeat interval.
	after := time.Duration(rand.New(rand.NewPCG(uint64(seed), 41)).Int64N(int64(heartbeatEvery)))
	time.Sleep(after)
	killed := time.Now()
	kill()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return crashRun{}, err
	}
	r := crashRun{KillAfterBeat: after, Fallbacks: m.fallbacks.Load()}
	for _, g := range got {
		r.Back = append(r.Back, g.Sub(killed).Round(time.Millisecond))
	}
	slices.Sort(r.Back)
	st, _ := p.Stats()
	r.Refused = st.Refused
	return r, nil
}

// tables returns the inflight phase's tables, in Markdown.
func (r *inflightResults) tables() string {
	var b strings.Builder
	s := r.Sizes
	h := r.Handoff
	fmt.Fprintf(&b, "\n### In flight: seats handed off, their cost, beside rate bands, after a crash\n\n")
	fmt.Fprintf(&b, "Every Limiter as README's quick start builds it (without `RequireRedis`: switches to local pacing are counted instead); the provider is `internal/provider`'s Concurrency "+
		"(429 to any call beyond N open per host, open from arrival to response end). Steal over the phase: %s.\n\n", dur(r.Steal))
	fmt.Fprintf(&b, "Hand-off: one seat (N = 1), this process and a child process each looping Acquire, a call held %s at the provider, Done, for %s. ", dur(s.HandoffHold), dur(s.Handoff))
	if len(h.Delays) > 0 {
		fmt.Fprintf(&b, "From a release in one process to the grant in the other: p50 %s, p99 %s, max %s over %d hand-offs; ",
			dur(pct(h.Delays, 0.5)), dur(pct(h.Delays, 0.99)), dur(h.Delays[len(h.Delays)-1]), len(h.Delays))
	} else {
		b.WriteString("No cross-process hand-off was seen; ")
	}
	var ops []string
	for _, op := range slices.Sorted(maps.Keys(h.Ops)) {
		ops = append(ops, fmt.Sprintf("%s %.3f", op, float64(h.Ops[op])/float64(max(h.Admissions, 1))))
	}
	fmt.Fprintf(&b, "%d admissions (%d handed off by a Done), Redis calls per admission: %.2f of op seats, %.2f of every op but heartbeat (%s); provider refusals %d; fallbacks %d.\n\n",
		h.Admissions, h.HandedOff, h.perAdmission(true), h.perAdmission(false), strings.Join(ops, ", "), h.Refused, h.Fallbacks)

	fmt.Fprintf(&b, "No cost when not binding: %d workers in one process, each call held %s at the provider (N = %d there), %d round(s) of %s per row:\n\n",
		s.Workers, dur(s.WorkerHold), s.Workers, s.Rounds, dur(s.NoCost))
	b.WriteString("| run | calls/s | of no pacer's | Redis CPU µs per call | scripts' µs per call (commandstats) |\n|---|---:|---:|---:|---:|\n")
	var base float64
	for i, n := range r.NoCost {
		rate := float64(n.Calls) / n.Seconds
		if i == 0 {
			base = rate
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f%% | %.1f | %.1f |\n", n.Name, rate, 100*rate/base,
			n.RedisCPU*1e6/float64(max(n.Calls, 1)), float64(n.Usec)/float64(max(n.Calls, 1)))
	}
	fmt.Fprintf(&b, "\nTogether with rate: one policy of an in-flight band, a bucket and a window (1 request each), %d workers over two Limiters, %s per run, "+
		"calls per second by their slots over its last 2/3, in whole windows; the provider judges N:\n\n", s.TogetherW, dur(s.Together))
	b.WriteString("| binds | policy | calls/s | allowed by the binding band | of it | provider refused | most open | busiest 1 s (bucket allows) | busiest window | slots moved | fallbacks |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Together {
		allow := t.Burst + int(t.Rate)
		fmt.Fprintf(&b, "| %s | N %d (held %s, mean %s), %g/s burst %d, %d per %s | %.1f | %.1f | %.1f%% | %d | %d of %d | %d (%d) | %d of %d | %d | %d |\n",
			t.Binds, t.N, dur(t.Hold), dur(t.MeanHeld), t.Rate, t.Burst, t.WinN, dur(t.WinLen), t.PerSecond, t.Allowed, 100*t.PerSecond/t.Allowed,
			t.Refused, t.MaxOpen, t.N, t.Busiest1s, allow, t.BusiestWin, t.WinN, t.Moved, t.Fallbacks)
	}
	fmt.Fprintf(&b, "\nCrash: a child process holds both seats of N = 2, each mid-call (the provider holds them an hour), two waiters of this process queue, "+
		"and the child is SIGKILLed (heartbeat every %s, the default):\n\n", dur(heartbeatEvery))
	b.WriteString("| run | killed after the waiters queued | seats back to the waiters after | provider refused | fallbacks |\n|---|---:|---|---:|---:|\n")
	for i, c := range r.Crashes {
		var back []string
		for _, d := range c.Back {
			back = append(back, dur(d))
		}
		fmt.Fprintf(&b, "| %d | %s | %s | %d | %d |\n", i+1, dur(c.KillAfterBeat), strings.Join(back, ", "), c.Refused, c.Fallbacks)
	}
	return b.String()
}
