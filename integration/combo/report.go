package combo

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// ReplayCommand is the command that replays seed, from the repository's
// root; cluster: a run on a Cluster (Config.Cluster).
func ReplayCommand(seed uint64, cluster bool) string {
	if cluster {
		return fmt.Sprintf("go run ./integration/cmd/pacercombo -cluster -seed %d -v", seed)
	}
	return fmt.Sprintf("go run ./integration/cmd/pacercombo -seed %d -v", seed)
}

// Progress is one line about a run: seed, events, calls, violations,
// duration, and the throughput figures.
func (res *Result) Progress() string {
	v := res.Verdict
	calls := len(res.Calls)
	var tp, py []string
	for _, key := range Keys {
		if f, ok := v.Figures.Throughput[key]; ok {
			tp = append(tp, fmt.Sprintf("%s %.2f", key, f))
		} else if keyDefs[key].throughput {
			tp = append(tp, key+" n/a")
		}
	}
	for _, key := range Keys {
		if l, ok := v.Figures.Learned[key]; ok {
			// Not judged: the fraction of the true limit used in the
			// time clear of faults and pauses, and of calls refused.
			tp = append(tp, fmt.Sprintf("%s learned %.2f, refused %s", key, l.Fraction, l.refusedText()))
		}
	}
	for _, l := range res.Lives {
		if l.Python {
			py = append(py, l.ID)
		}
	}
	tp = append(tp, "http "+res.Scenario.dialectOf()+" body "+res.Scenario.bodyOf())
	if s := v.Figures.Seats; s.Policy != "" {
		tp = append(tp, s.short(res.Scenario.Seats.N))
	}
	switch {
	case res.PythonSkipped != "":
		tp = append(tp, "python skipped")
	case len(py) > 0:
		tp = append(tp, "python "+strings.Join(py, ","))
	}
	if m := res.Scenario.Masters; m > 0 {
		tp = append(tp, fmt.Sprintf("cluster of %d masters, %d replicas each", m, res.Scenario.Replicas))
	}
	status := "ok"
	if v.Failed() {
		status = "FAIL " + countText(v.Count())
	}
	return fmt.Sprintf("seed %d: %d events, %d calls, %d violations, %.1fs (throughput %s; %d local, 429s %s, arrival-over %d) %s",
		res.Scenario.Seed, len(res.Scenario.Events), calls, len(v.Violations), res.Duration.Seconds(),
		strings.Join(tp, ", "), v.Figures.Local, countText(v.Figures.Refused), v.Figures.ArrivalOver, status)
}

// WriteReport writes every violation of a run, each with what happened
// around it, and with verbose the timeline and the figures first.
func (res *Result) WriteReport(w io.Writer, verbose bool) {
	r := index(res)
	if verbose {
		fmt.Fprintf(w, "seed %d: prefix %s, %d fleet processes, %v\n", res.Scenario.Seed, res.Prefix, res.Scenario.Procs, res.Scenario.Length)
		if res.Scenario.FleetFormat != "" {
			fmt.Fprintf(w, "  fleet   format %s set before the start (the heartbeat's indexes)\n", res.Scenario.FleetFormat)
		}
		if m := res.Scenario.Masters; m > 0 {
			replicas := "no replicas"
			if res.Scenario.Replicas > 0 {
				replicas = fmt.Sprintf("%d replica each", res.Scenario.Replicas)
			}
			fmt.Fprintf(w, "  redis   a Cluster of %d masters, %s; a Redis fault strikes the master it names\n", m, replicas)
			for _, line := range placementText(res.Placement, m) {
				fmt.Fprintf(w, "          %s\n", line)
			}
		}
		if len(res.Scenario.Python) > 0 {
			fmt.Fprintf(w, "  python  %s (processes started in them run clients/python)\n", slotsText(res.Scenario.Python))
		}
		if res.PythonSkipped != "" {
			fmt.Fprintf(w, "  %s\n", res.PythonSkipped)
		}
		fmt.Fprintf(w, "  http    %s's dialect for %s's counts, %s body in its 429s\n", res.Scenario.dialectOf(), KeyHTTP, res.Scenario.bodyOf())
		for _, e := range res.Scenario.Events {
			fmt.Fprintf(w, "  planned %s\n", e)
		}
		for _, a := range res.Actions {
			fmt.Fprintf(w, "  done    %s\n", describeAction(res.Start, a))
		}
		for _, n := range res.Notes {
			if n.Type == noteDone {
				var parts []string
				for _, k := range sortedCounts(n.Counts) {
					parts = append(parts, fmt.Sprintf("%s=%d", k, n.Counts[k]))
				}
				fmt.Fprintf(w, "  child %s: %s\n", n.Child, strings.Join(parts, " "))
			}
		}
		f := res.Verdict.Figures
		for _, k := range Keys {
			if u := f.Used[k]; u != "" {
				fmt.Fprintf(w, "  throughput %s: %s\n", k, u)
			}
		}
		for _, k := range Keys {
			if l, ok := f.Learned[k]; ok {
				fmt.Fprintf(w, "  learned %s: %d calls, refused %s, unsent %s; %d accepted in %.1fs clear of faults and pauses, %.2f of the true %g/s; liveness judged %.1fs (longest gap %v); rate %d samples in [%.2f, %.2f], mean %.2f\n",
					k, l.Calls, l.refusedText(), countText(l.Unsent), l.Accepted, l.Clear.Seconds(), l.Fraction, keyDefs[k].limit.Rate,
					l.Live.Seconds(), l.Gap.Round(time.Millisecond), l.Samples, l.RateMin, l.RateMax, l.RateMean)
			}
		}
		fmt.Fprintf(w, "  figures: calls %v, local %d, switches to local %d, provider 429s %s, arrival-over %d, unjudged in pauses %d, most early %v, not exact %d\n",
			f.Calls, f.Local, f.Switches, countText(f.Refused), f.ArrivalOver, f.Unjudged, f.MostEarly, f.NotExact)
		var gaps []string
		for _, k := range Keys {
			if g, ok := f.Gaps[k]; ok {
				gaps = append(gaps, fmt.Sprintf("%s %v", k, g.Round(time.Millisecond)))
			}
		}
		fmt.Fprintf(w, "  figures: longest gap judged %s; sends through pacehttp after their slots p50 %v, max %v; stored limits not judged %d\n",
			strings.Join(gaps, ", "), f.LateP50.Round(time.Millisecond), f.LateMost.Round(time.Millisecond), f.StoredUnjudged)
		for _, st := range res.Stored {
			fmt.Fprintf(w, "  stored limit read at %.3fs: %s %q shadow %v %s\n", time.Duration(st.At-res.Start.UnixNano()).Seconds(), st.Key, st.Limit, st.Shadow, st.Err)
		}
		if s := f.Seats; s.Policy != "" {
			fmt.Fprintf(w, "  seats %s %s: %d calls, max open %d, mean open %.2f, full %.2f of the run; refused over N %d, by the rate %d; ended by the caller's connection closing %d; seats handed off %d, found free %d, local %d; left in Redis at the end by killed processes %d\n",
				KeySeats, s.Policy, s.Calls, s.MaxOpen, s.MeanOpen, s.Full, s.Refused, s.Limit, s.Gone, s.Handed, s.Free, s.LocalTaken, s.LeftKilled)
			for _, k := range s.Kills {
				fault := ""
				if k.Fault {
					fault = " (a Redis fault in between)"
				}
				fmt.Fprintf(w, "  seats: child %s killed at %s holding %d seats in Redis: freed after %s%s, a ticket of the others waiting then (of %d) held seats after %s\n",
					k.Child, r.rel(k.At), k.Held, durText(k.Freed), fault, k.Waiting, durText(k.Handed))
			}
			for _, st := range s.Stops {
				fault := ""
				if st.Fault {
					fault = " (a Redis fault in between)"
				}
				fmt.Fprintf(w, "  seats: child %s stopped at %s for %v holding %d seats in Redis: at least %d kept while stopped%s\n",
					st.Child, r.rel(st.At), st.For.Round(time.Millisecond), st.Held, st.Least, fault)
			}
		}
		fmt.Fprintf(w, "  fair %s: heavy tenants' actual tokens %s in %s calls (%d starved, not counted); light waits p50 %v, max %v, refused %d\n",
			KeyFair, fmtFloats(f.Fair.Tokens), fmtInts(f.Fair.Calls), f.Fair.Starved, f.Fair.LightP50.Round(time.Millisecond), f.Fair.LightMax.Round(time.Millisecond), f.Fair.LightRefused)
		fmt.Fprintf(w, "  fair %s: the crowd's calls %s\n", KeyCrowd, fmtInts(f.Fair.Crowd))
	}
	var last []string
	for _, v := range res.Verdict.Violations {
		fmt.Fprintf(w, "  VIOLATION %s at %s: %s %s\n", v.Kind, r.rel(v.At), v.Key, v.Msg)
		around := r.around(v.At)
		if slices.Equal(around, last) {
			fmt.Fprintf(w, "      around: the same\n")
			continue
		}
		for _, line := range around {
			fmt.Fprintf(w, "      around: %s\n", line)
		}
		last = around
	}
}

// around lists the actions and switches within 1.5 s of t.
func (r *run) around(t int64) []string {
	near := int64(1500 * time.Millisecond)
	var out []string
	for _, a := range r.res.Actions {
		if a.At <= t+near && t-near <= max(a.End, a.At) {
			out = append(out, describeAction(r.res.Start, a))
		}
	}
	var sw []string
	for _, n := range r.res.Notes {
		if n.Type == noteSwitch && n.At >= t-near && n.At <= t+near {
			sw = append(sw, fmt.Sprintf("%s→%s@%s", n.Child, n.To, r.rel(n.At)))
		}
	}
	if len(sw) > 0 {
		out = append(out, "switches "+strings.Join(sw, " "))
	}
	return out
}

// describeAction formats an action relative to start.
func describeAction(start time.Time, a Action) string {
	rel := func(t int64) string { return fmt.Sprintf("%.3fs", time.Duration(t-start.UnixNano()).Seconds()) }
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", rel(a.At), a.Kind)
	if a.Key != "" {
		fmt.Fprintf(&b, " %s", a.Key)
	}
	if a.Child != "" {
		fmt.Fprintf(&b, " child %s", a.Child)
	}
	if a.Node > 0 {
		fmt.Fprintf(&b, " master %d", a.Node)
	}
	if a.For > 0 {
		fmt.Fprintf(&b, " for %v", a.For.Round(time.Millisecond))
	}
	if a.Stored != nil {
		fmt.Fprintf(&b, " to %s", a.Stored)
	}
	if a.Kind == OpFormat {
		fmt.Fprintf(&b, " to %d", a.Format)
	}
	if a.Moved != "" {
		fmt.Fprintf(&b, ": %s", a.Moved)
	}
	fmt.Fprintf(&b, " (until %s)", rel(a.End))
	if a.Err != "" {
		exp := ""
		if a.Expected {
			exp = " (expected)"
		}
		fmt.Fprintf(&b, ": %s%s", a.Err, exp)
	}
	return b.String()
}

func (r *runner) describe(a Action) string { return describeAction(r.res.Start, a) }

// countText formats counts as "a=1 b=2", sorted by name.
func countText(n map[string]int) string {
	keys := make([]string, 0, len(n))
	for k := range n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// Summary sums up many runs.
type Summary struct {
	Cluster    bool // the seeds ran on a Cluster (Config.Cluster)
	Seeds      int
	Events     map[Kind]int
	Calls      int
	Violations map[string]int
	Failing    []uint64 // seeds that broke a promise
	Broken     []string // seeds that could not be run, with the reason
	Fractions  map[string][]float64
	// Learned: per learned key, each seed's fraction of the true limit
	// used, and its calls and refusals at the provider.
	Learned                      map[string][]float64
	LearnedCalls, LearnedRefused map[string]int
}

// Add counts res.
func (s *Summary) Add(res *Result) {
	if s.Events == nil {
		s.Events, s.Violations, s.Fractions = map[Kind]int{}, map[string]int{}, map[string][]float64{}
		s.Learned, s.LearnedCalls, s.LearnedRefused = map[string][]float64{}, map[string]int{}, map[string]int{}
	}
	s.Seeds++
	for _, e := range res.Scenario.Events {
		s.Events[e.Kind]++
	}
	s.Calls += len(res.Calls)
	for k, n := range res.Verdict.Count() {
		s.Violations[k] += n
	}
	if res.Verdict.Failed() {
		s.Failing = append(s.Failing, res.Scenario.Seed)
	}
	for k, f := range res.Verdict.Figures.Throughput {
		s.Fractions[k] = append(s.Fractions[k], f)
	}
	for k, l := range res.Verdict.Figures.Learned {
		if l.Clear > 0 {
			s.Learned[k] = append(s.Learned[k], l.Fraction)
		}
		s.LearnedCalls[k] += l.Calls
		s.LearnedRefused[k] += l.Refused
	}
}

// AddBroken counts a seed whose run could not be made.
func (s *Summary) AddBroken(seed uint64, err error) {
	s.Seeds++
	s.Broken = append(s.Broken, fmt.Sprintf("seed %d: %v", seed, err))
}

// Write prints the summary.
func (s *Summary) Write(w io.Writer) {
	fmt.Fprintf(w, "\n%d seeds, %d calls\n", s.Seeds, s.Calls)
	var ev []string
	for _, k := range Kinds {
		if s.Events[k] > 0 {
			ev = append(ev, fmt.Sprintf("%s=%d", k, s.Events[k]))
		}
	}
	fmt.Fprintf(w, "events: %s\n", strings.Join(ev, " "))
	var vi []string
	for _, k := range VKinds {
		if s.Violations[k] > 0 {
			vi = append(vi, fmt.Sprintf("%s=%d", k, s.Violations[k]))
		}
	}
	if len(vi) == 0 {
		vi = []string{"none"}
	}
	fmt.Fprintf(w, "violations: %s\n", strings.Join(vi, " "))
	for _, k := range Keys {
		if fs := s.Fractions[k]; len(fs) > 0 {
			fmt.Fprintf(w, "throughput %s: min %.2f, mean %.2f over %d seeds\n", k, slices.Min(fs), mean(fs), len(fs))
		}
	}
	for _, k := range Keys {
		if fs := s.Learned[k]; len(fs) > 0 {
			fmt.Fprintf(w, "learned %s (not judged): min %.2f, mean %.2f of the true limit used over %d seeds; the provider refused %d of %d calls\n",
				k, slices.Min(fs), mean(fs), len(fs), s.LearnedRefused[k], s.LearnedCalls[k])
		}
	}
	for _, b := range s.Broken {
		fmt.Fprintf(w, "could not run %s\n", b)
	}
	if len(s.Failing) > 0 {
		fmt.Fprintf(w, "%d failing seeds:\n", len(s.Failing))
		for _, seed := range s.Failing {
			fmt.Fprintf(w, "  %s\n", ReplayCommand(seed, s.Cluster))
		}
	}
}

func mean(fs []float64) float64 {
	t := 0.0
	for _, f := range fs {
		t += f
	}
	return t / float64(len(fs))
}

// refusedText formats the provider's refusals on a learned key: the
// fraction of its calls, and how many.
func (l Learned) refusedText() string {
	if l.Calls == 0 {
		return "0 of 0"
	}
	return fmt.Sprintf("%.2f, %d of %d", float64(l.Refused)/float64(l.Calls), l.Refused, l.Calls)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func fmtFloats(m map[string]float64) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%.0f", k, m[k]))
	}
	return strings.Join(parts, " ")
}

func fmtInts(m map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}
