package main

// The outage phase: a fleet through Redis failing, as the issue measured
// it, judged as the provider and the callers see it. Each scenario's fleet
// is this program re-run (outage_child.go), each process making its
// Limiter as README's quick start does at the run's start, together, and
// its goroutines calling Wait on one key at 200/s, burst 1, on a
// redis-server of the phase's own that the parent stops, restarts empty,
// freezes (SIGSTOP) and thaws on a schedule:
//
//   - A: 2 processes; Redis stopped at +3 s, restarted empty at +6 s,
//     frozen at +9 s, thawed at +12 s, the end at +15 s;
//   - B: 3 processes; Redis restarted empty at +3 s, the end at +9 s;
//   - C1, C2, C3: 4 processes, A's sequence from +1 s, +2 s or +3 s.
//
// Each scenario runs -outage-runs times, after a run of the reference on
// the same schedule: x/time/rate in each process at rate/processes, no
// Redis and no coordination, which shows what the machine's scheduling
// does to "every second within the limit" with nothing to coordinate.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/redisproc"
)

// Steps of an outage schedule.
const (
	stepStop    = "stop"    // redisproc.Server.Stop: SIGKILL, connections refused
	stepRestart = "restart" // Restart: a new, empty server on the port, answering
	stepFreeze  = "freeze"  // Freeze: SIGSTOP
	stepThaw    = "thaw"    // Thaw: SIGCONT
)

// outageScenario is one fleet and fault schedule.
type outageScenario struct {
	Name  string
	Procs int
	// Lead is the time from the start to the first fault.
	Lead time.Duration
	// Sequence: stop at Lead, restart empty a Seg later, freeze a Seg
	// after that, thaw a Seg later, end a Seg after the thaw. Otherwise
	// Redis is restarted empty at Lead, and the run ends two Segs later.
	Sequence bool
}

// outageScenarios are the phase's scenarios, in order.
var outageScenarios = []outageScenario{
	{Name: "A", Procs: 2, Lead: 3 * time.Second, Sequence: true},
	{Name: "B", Procs: 3, Lead: 3 * time.Second},
	{Name: "C1", Procs: 4, Lead: time.Second, Sequence: true},
	{Name: "C2", Procs: 4, Lead: 2 * time.Second, Sequence: true},
	{Name: "C3", Procs: 4, Lead: 3 * time.Second, Sequence: true},
}

// outageStep is a step of a schedule, at an offset from the start.
type outageStep struct {
	At time.Duration
	Do string
}

// steps returns s's schedule with faults seg long, and the run's length.
func (s outageScenario) steps(seg time.Duration) ([]outageStep, time.Duration) {
	if !s.Sequence {
		return []outageStep{{s.Lead, stepRestart}}, s.Lead + 2*seg
	}
	return []outageStep{{s.Lead, stepStop}, {s.Lead + seg, stepRestart}, {s.Lead + 2*seg, stepFreeze}, {s.Lead + 3*seg, stepThaw}},
		s.Lead + 4*seg
}

// describe says what s does, for the report.
func (s outageScenario) describe(seg time.Duration) string {
	steps, length := s.steps(seg)
	var parts []string
	for _, st := range steps {
		parts = append(parts, fmt.Sprintf("%s at +%v", st.Do, st.At))
	}
	return fmt.Sprintf("%d processes; %s; end at +%v", s.Procs, strings.Join(parts, ", "), length)
}

// outageConfig is the phase's sizes.
type outageConfig struct {
	Runs       int           // runs of each scenario (and one of the reference)
	Seg        time.Duration // each fault's length, and the time after each heal
	Rate       float64       // the fleet's limit, burst 1
	Goroutines int           // per process
	ErrPause   time.Duration // a goroutine's pause after a failed Wait
	Scenarios  []outageScenario
}

// outageSizes returns the phase's sizes for c.
func outageSizes(c config) outageConfig {
	oc := outageConfig{Runs: c.OutageRuns, Seg: c.OutageSeg, Rate: 200, Goroutines: 8, ErrPause: 10 * time.Millisecond}
	for _, s := range outageScenarios {
		if c.OutageScenarios == "" || slices.Contains(strings.Split(c.OutageScenarios, ","), s.Name) {
			oc.Scenarios = append(oc.Scenarios, s)
		}
	}
	return oc
}

// outagePhase is a stretch of a run between two steps.
type outagePhase struct {
	Name     string
	From, To time.Duration // from the start
	Calls    int
}

func (p outagePhase) rate() float64 { return float64(p.Calls) / (p.To - p.From).Seconds() }

// outageHeal is the time a heal (a restart or a thaw) took to give the
// fleet its rate back.
type outageHeal struct {
	Name string
	At   time.Duration // from the start: Restart returned, or SIGCONT was sent
	// Recovery is the time from the heal to the first 1 s window (on a
	// 10 ms grid) holding at least 0.9 x rate calls, ending before the
	// next fault or the run's end; -1: none.
	Recovery time.Duration
}

// outageTrial is one run of a scenario.
type outageTrial struct {
	Scenario string
	Run      int // 1, 2, ...; 0 for the reference
	Procs    int
	Length   time.Duration
	Calls    int // Waits that returned nil within the run
	Errors   int
	// ProcErrors is each process's failed Waits.
	ProcErrors []int
	// FirstErr is the earliest failed Wait's text, FirstErrAt when (from
	// the start), FirstErrProc its process (from 0, in start order);
	// Texts the distinct texts, the most frequent first.
	FirstErr     string
	FirstErrAt   time.Duration
	FirstErrProc int
	Texts        []textCount
	// Busiest is the most calls returned in any window [t, t+1 s),
	// BusiestAt its t from the start.
	Busiest   int
	BusiestAt time.Duration
	// Stall is the longest time no Wait returned nil (the run's start and
	// end count as bounds), StallAt when it began.
	Stall, StallAt time.Duration
	Phases         []outagePhase
	Heals          []outageHeal
	Switches       int // Metrics.Fallback(true), over the fleet
	Backs          int // Metrics.Fallback(false)
	Local          int // reservations the local fallback granted
	// MadeSpread is the time between the first and the last process's
	// New returning; MakeMax the longest New.
	MadeSpread, MakeMax time.Duration
	Steal               time.Duration
	LoadStart, LoadEnd  string
}

// textCount is an error's text and how many calls failed with it.
type textCount struct {
	Text string
	N    int
}

// outageResults is the outage phase.
type outageResults struct {
	Cfg  outageConfig
	Runs []outageTrial
}

// runOutage runs the outage phase.
func (b *bench) runOutage(ctx context.Context, progress func(string, ...any)) (*outageResults, error) {
	oc := outageSizes(b.cfg)
	res := &outageResults{Cfg: oc}
	for _, s := range oc.Scenarios {
		for run := 0; run <= oc.Runs; run++ {
			r, err := outageOnce(ctx, oc, s, run)
			if err != nil {
				return nil, fmt.Errorf("outage, %s, run %d: %w", s.Name, run, err)
			}
			progress("outage      %s", r.progressLine())
			res.Runs = append(res.Runs, r)
		}
	}
	return res, nil
}

// outageOnce runs scenario s once: the reference for run 0, pacer else.
func outageOnce(ctx context.Context, oc outageConfig, s outageScenario, run int) (outageTrial, error) {
	srv, err := redisproc.Start(redisproc.Spec{})
	if err != nil {
		return outageTrial{}, err
	}
	defer srv.Close()
	steps, length := s.steps(oc.Seg)
	job := outageJob{Variant: outagePacer, RedisURL: srv.URL(), Key: "api", Rate: oc.Rate, Procs: s.Procs,
		Goroutines: oc.Goroutines, ErrPause: oc.ErrPause}
	if run == 0 {
		job.Variant = outageRef
	}
	ctx, kill := context.WithCancel(ctx)
	defer kill() // kills children left behind by an error
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: outageChildEnv, Procs: s.Procs, Stdin: true, Spec: job})
	if err != nil {
		return outageTrial{}, err
	}
	if err := awaitReady(ctx, f); err != nil {
		return outageTrial{}, fmt.Errorf("fleet %w", err)
	}
	r := outageTrial{Scenario: s.Name, Run: run, Procs: s.Procs, Length: length, LoadStart: loadAverage()}
	start, end := beginRun(f, length)
	time.Sleep(time.Until(start))
	cpu := readMachineCPU()

	// The steps, each at its time; at[i] is when step i began, done[i]
	// when it had taken effect.
	at := make([]time.Time, len(steps))
	done := make([]time.Time, len(steps))
	var stepErr error
	for i, st := range steps {
		time.Sleep(time.Until(start.Add(st.At)))
		at[i] = time.Now()
		var err error
		switch st.Do {
		case stepStop:
			srv.Stop()
		case stepRestart:
			err = srv.Restart()
		case stepFreeze:
			err = srv.Freeze()
		case stepThaw:
			err = srv.Thaw()
		}
		done[i] = time.Now()
		if err != nil {
			stepErr = fmt.Errorf("%s: %w", st.Do, err)
			break
		}
	}
	time.Sleep(time.Until(end))
	r.Steal = stealSince(cpu)
	r.LoadEnd = loadAverage()
	if err := errors.Join(stepErr, f.Wait()); err != nil {
		return outageTrial{}, err
	}
	var procs []outageProc
	for _, ch := range f.Children() {
		p, err := readOutageChild(ch.Lines())
		if err != nil {
			return outageTrial{}, fmt.Errorf("process %d: %w\n%s", ch.Index, err, strings.TrimSpace(ch.Stderr()))
		}
		procs = append(procs, p)
	}
	r.measure(procs, start, end, steps, at, done, oc.Rate)
	return r, nil
}

// measure computes r's figures from what the processes printed.
func (r *outageTrial) measure(procs []outageProc, start, end time.Time, steps []outageStep, at, done []time.Time, rate float64) {
	s0, e0 := start.UnixNano(), end.UnixNano()
	in := func(t int64) bool { return t >= s0 && t < e0 }
	since := func(t int64) time.Duration { return time.Duration(t - s0) }
	var calls []int64
	texts := map[string]int{}
	var first outageErr
	made := []int64{}
	for i, p := range procs {
		for _, c := range p.Calls {
			if in(c) {
				calls = append(calls, c)
			}
		}
		n := 0
		for _, e := range p.Errors {
			if !in(e.At) {
				continue
			}
			n++
			texts[e.Text]++
			if first.At == 0 || e.At < first.At {
				first, r.FirstErrProc = e, i
			}
		}
		r.ProcErrors = append(r.ProcErrors, n)
		r.Errors += n
		for _, s := range p.Switches {
			switch {
			case !in(s.At):
			case s.What == "1":
				r.Switches++
			default:
				r.Backs++
			}
		}
		for _, l := range p.Local {
			if in(l) {
				r.Local++
			}
		}
		made = append(made, p.Made)
		r.MakeMax = max(r.MakeMax, time.Duration(p.MakeTook))
	}
	if len(made) > 0 {
		r.MadeSpread = time.Duration(slices.Max(made) - slices.Min(made))
	}
	if r.Errors > 0 {
		r.FirstErr, r.FirstErrAt = first.Text, since(first.At)
		for text, n := range texts {
			r.Texts = append(r.Texts, textCount{text, n})
		}
		slices.SortFunc(r.Texts, func(a, b textCount) int { return cmp.Or(b.N-a.N, strings.Compare(a.Text, b.Text)) })
	}
	slices.Sort(calls)
	r.Calls = len(calls)
	var t int64
	r.Busiest, t = busiestAt(calls, time.Second)
	r.BusiestAt = since(t)
	prev := s0
	for _, c := range append(calls[:len(calls):len(calls)], e0) {
		if d := time.Duration(c - prev); d > r.Stall {
			r.Stall, r.StallAt = d, since(prev)
		}
		prev = c
	}

	// Phases: before the first step, then between each step's effect and
	// the next step's beginning.
	count := func(a, b time.Time) int { return len(between(calls, a, b)) }
	names := map[string]string{stepStop: "stopped", stepRestart: "after restart", stepFreeze: "frozen", stepThaw: "after thaw"}
	from := start
	name := "before"
	for i, st := range steps {
		r.Phases = append(r.Phases, outagePhase{name, since(from.UnixNano()), since(at[i].UnixNano()), count(from, at[i])})
		from, name = done[i], names[st.Do]
	}
	r.Phases = append(r.Phases, outagePhase{name, since(from.UnixNano()), since(e0), count(from, end)})

	want := int(math.Ceil(0.9 * rate))
	for i, st := range steps {
		if st.Do != stepRestart && st.Do != stepThaw {
			continue
		}
		limit := end
		if i+1 < len(steps) {
			limit = at[i+1]
		}
		r.Heals = append(r.Heals, outageHeal{Name: st.Do, At: since(done[i].UnixNano()), Recovery: recovery(calls, done[i], limit, want)})
	}
}

// recovery returns the time from heal to the first window [heal+d,
// heal+d+1 s), d on a 10 ms grid, that holds at least want of sorted (Unix
// ns) and ends by limit; -1 if none does.
func recovery(sorted []int64, heal, limit time.Time, want int) time.Duration {
	for d := time.Duration(0); !heal.Add(d + time.Second).After(limit); d += 10 * time.Millisecond {
		if len(between(sorted, heal.Add(d), heal.Add(d+time.Second))) >= want {
			return d
		}
	}
	return -1
}

// heal returns r's heal named name, if it has one.
func (r outageTrial) heal(name string) (outageHeal, bool) {
	for _, h := range r.Heals {
		if h.Name == name {
			return h, true
		}
	}
	return outageHeal{}, false
}

// phase returns r's phase named name, if it has one.
func (r outageTrial) phase(name string) (outagePhase, bool) {
	for _, p := range r.Phases {
		if p.Name == name {
			return p, true
		}
	}
	return outagePhase{}, false
}

// limiter names r's limiter.
func (r outageTrial) limiter() string {
	if r.Run == 0 {
		return "x/time/rate, rate/procs per process (reference)"
	}
	return fmt.Sprintf("pacer, run %d", r.Run)
}

// progressLine is r in one line.
func (r outageTrial) progressLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-3s %-48s calls %5d, errors %5d %v, busiest 1 s %d, longest stall %v", r.Scenario, r.limiter(), r.Calls, r.Errors,
		r.ProcErrors, r.Busiest, r.Stall.Round(time.Millisecond))
	for _, p := range r.Phases {
		fmt.Fprintf(&b, ", %s %.1f/s", p.Name, p.rate())
	}
	for _, h := range r.Heals {
		fmt.Fprintf(&b, ", %s to 0.9 x rate %s", h.Name, recoveryCell(h.Recovery))
	}
	fmt.Fprintf(&b, ", switches to local %d, steal %s", r.Switches, stealCell(r.Steal))
	return b.String()
}

// recoveryCell formats a recovery time.
func recoveryCell(d time.Duration) string {
	switch {
	case d < 0:
		return "never"
	case d == 0:
		return "0 s" // the first window after the heal
	}
	return dur(d)
}

// outageScenarioNames are the names -outage-scenarios takes.
func outageScenarioNames() []string {
	var names []string
	for _, s := range outageScenarios {
		names = append(names, s.Name)
	}
	return names
}
