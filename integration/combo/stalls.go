package combo

import (
	"fmt"
	"slices"
	"time"
)

// The stall check: on a key whose demand stays above its limit
// (keyDef.throughput), calls keep coming. From the warm-up, in the time
// clear of the key's pauses (every pause a process noted, for its
// Retry-After in whole seconds, every 429, every operator's pause until a
// resume that worked: learnedCuts, with learnedRecovery), Redis faults
// (and faultRecovery after them), CPU hogs (and hogRecovery) and the spans
// when no fleet process runs (and procGap after), no stallSpan passes
// without a call reaching the provider. A resume frees the key at once
// (DESIGN.md, "Where features meet"), and no limit the runner stores is
// slow enough to leave such a gap: the slowest is a window of 14 calls in
// 2 s, and every key's queue holds one call per calling goroutine.
const stallSpan = 3 * time.Second

// stalls judges key's calls against stallSpan and returns the longest gap
// judged.
func (r *run) stalls(key string) ([]Violation, time.Duration) {
	start := r.res.Start.Add(warmup).UnixNano()
	end := r.res.End.UnixNano() - int64(livenessEnd)
	cuts := r.learnedCuts(key)
	for _, f := range r.faults {
		cuts = append(cuts, [2]int64{f.At, f.End + int64(faultRecovery)})
	}
	for _, a := range r.res.Actions {
		if a.Kind == FaultHog {
			cuts = append(cuts, [2]int64{a.At, max(a.End, a.At) + int64(hogRecovery)})
		}
	}
	cuts = append(cuts, r.noneRunning(key)...)
	var arrived []int64
	for _, c := range r.calls[key] {
		arrived = append(arrived, c.Arrive)
	}
	slices.Sort(arrived)
	var out []Violation
	var most time.Duration
	for _, s := range outside(start, end, cuts) {
		if s[1]-s[0] < int64(stallSpan) {
			continue
		}
		i, _ := slices.BinarySearch(arrived, s[0])
		j, _ := slices.BinarySearch(arrived, s[1])
		points := append(append([]int64{s[0]}, arrived[i:j]...), s[1])
		for k := 1; k < len(points); k++ {
			gap := points[k] - points[k-1]
			most = max(most, time.Duration(gap))
			if gap >= int64(stallSpan) {
				out = append(out, Violation{Kind: VStall, Key: key, At: points[k-1], Msg: fmt.Sprintf(
					"no call reached the provider in [%s, %s] (%s), clear of pauses, Redis faults and CPU hogs from %s to %s",
					r.rel(points[k-1]), r.rel(points[k]), ms(gap), r.rel(s[0]), r.rel(s[1]))})
			}
		}
	}
	return out, most
}

// noneRunning returns the spans in which no fleet process that calls key
// ran (all killed or closed), each with procGap after. The Python
// processes call only the keys pythonCalls lists: while only they run,
// nobody calls the others (the combination runner's seed 38: its one Go
// process killed for 2.3 s, judged for the adaptive key's liveness beside
// a Python process).
func (r *run) noneRunning(key string) [][2]int64 {
	if len(r.res.Lives) == 0 {
		return nil
	}
	type edge struct {
		at int64
		d  int
	}
	var edges []edge
	for _, l := range r.res.Lives {
		if l.Python && !pythonCalls(key) {
			continue
		}
		edges = append(edges, edge{l.From, 1}, edge{l.To, -1})
	}
	if len(edges) == 0 {
		return [][2]int64{{r.res.Start.UnixNano(), r.res.End.UnixNano() + int64(procGap)}}
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			return cmpInt(a.at, b.at)
		}
		return b.d - a.d // starts first
	})
	var out [][2]int64
	n := 0
	var from int64
	for _, e := range edges {
		n += e.d
		switch {
		case n == 0 && e.d < 0:
			from = e.at
		case n == 1 && e.d > 0 && from != 0:
			out = append(out, [2]int64{from, e.at + int64(procGap)})
			from = 0
		}
	}
	return out
}
