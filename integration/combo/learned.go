package combo

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"
)

// The checks of a key whose rate the fleet learns (KeyAdaptive, called
// through pacehttp with Options.Adaptive). The fleet is told nothing of its
// true limit, so the provider's 429s are how it learns, not violations.
// Judged exactly, beside the errors and the pauses every key gets
// (errors(), pauses()):
//
//   - sentOnce: the provider never saw a request twice (one call ID and
//     attempt), nor one that pacehttp failed before sending it (a
//     *reserve.WaitTooLongError for its deadline, its deadline passing in
//     the gate, any other error of reserving: the child notes each);
//   - rates: every sample of the learned rate (each process Peeks every
//     rateEvery) lies within the Config's [Min, Max];
//   - liveness: from the warm-up, in the time clear of Redis faults (and
//     faultRecovery after them) and of pauses (and learnedRecovery after
//     them), no span of livenessSpan passes without a call the provider
//     accepted. Such a stretch has no 429 in it (each one cuts it), every
//     process is back on Redis, and the learned rate is at least Min: a
//     slot every 500 ms, which every process's gate asks for within its
//     poll (500 ms).
//
// Not judged: a bound on the slots. The slots cannot keep the Max bucket
// (Max, the Config's burst) exactly, for a rate that changes:
//   - a bucket's state is the time z its balance is zero, and a
//     reservation at rate r spends 1/r of it; the balance at another rate
//     r' is (now - z) × r', capped at the burst. With a burst b > 1, credit
//     left by a slot at a low rate is worth more permits at a higher one:
//     at Min 2/s and b 2, one slot leaves z half a second back, and two
//     callers at 80/s then take two more slots at the same instant, three
//     where the Max bucket allows two. With b 1 the slots of one state stay
//     1/Max apart, but
//   - a Cancel gives back what later reservations have not built on
//     counted at the canceller's rate (lua/adjust.lua): a reservation at
//     20/s cancelled under one at 35/s gives back more than the later one
//     left, and the next slot lands closer than 1/Max to it; and
//   - each process pacing locally keeps its share of the rate it last read,
//     its slots on a lattice of that rate's spacing: processes that read
//     different rates have lattices that cross, their slots as close as
//     they come.
//
// (Its calls do bring the slots they were sent on, as KeyHTTP's do, which
// pauses() and early() judge.) And the operator stores no limit on the key
// (scenario.go): one replaces the learned rate, with no exact bound on the
// slots to judge it by.
//
// Figures, not judged: the provider's refusals on the key, the calls
// pacehttp refused, the calls it accepted over the time clear of faults and
// pauses as a fraction of the true limit, and the learned rate's range.

// The liveness check's spans: in the time clear of pauses and faults no
// span of livenessSpan may pass without an accepted call. At Min (2/s) a
// slot comes every 500 ms; a request waiting in pacehttp's gate asks again
// within 500 ms (its gatePoll), also after a pause ends: the first call
// after a pause comes within about 1 s.
const (
	livenessSpan = 2 * time.Second
	// learnedRecovery: a pause cut from a 429's arrival ends up to a
	// round trip later (the Transport pauses when the answer comes).
	learnedRecovery = 500 * time.Millisecond
	// livenessEnd: calls stop at the run's end, and those whose slot
	// would come after it are refused.
	livenessEnd = 250 * time.Millisecond
)

// Learned is what the verdict measured on a learned key.
type Learned struct {
	Calls, Refused int            // the provider's calls on the key, and its 429s
	Unsent         map[string]int // calls pacehttp failed before sending them, by reason
	// Accepted calls in Clear, the time from the warm-up clear of Redis
	// faults and pauses (with their recoveries), and Fraction: Accepted
	// over what the true limit allowed in it (0 if Clear is 0).
	Accepted int
	Clear    time.Duration
	Fraction float64
	// The learned rate's samples.
	Samples                    int
	RateMin, RateMean, RateMax float64
	// Live is the part of Clear in stretches of at least livenessSpan,
	// and Gap the longest time in them without an accepted call.
	Live, Gap time.Duration
}

// learned judges learned key key and measures it.
func (r *run) learned(key string) ([]Violation, Learned) {
	var out []Violation
	fig := Learned{Unsent: map[string]int{}}
	for _, c := range r.calls[key] {
		fig.Calls++
		if c.Status == 429 {
			fig.Refused++
		}
	}
	out = append(out, r.sentOnce(key, &fig)...)
	out = append(out, r.rates(key, &fig)...)
	out = append(out, r.liveness(key, &fig)...)
	return out, fig
}

// sentOnce finds requests the provider saw twice, and requests it saw that
// pacehttp had failed before sending them.
func (r *run) sentOnce(key string, fig *Learned) []Violation {
	unsent := map[string]Note{}
	for _, n := range r.res.Notes {
		if n.Type == noteUnsent && n.Key == key {
			unsent[n.ID] = n
			fig.Unsent[n.Op]++
		}
	}
	var out []Violation
	seen := map[string]Call{}
	for _, c := range r.calls[key] {
		id := fmt.Sprintf("%s/%d", c.ID, c.Attempt)
		if first, ok := seen[id]; ok {
			out = append(out, Violation{Kind: VTwice, Key: key, At: c.Arrive, Msg: fmt.Sprintf(
				"call %s (attempt %d, child %s) reached the provider twice, at %s and %s", c.ID, c.Attempt, c.Child, r.rel(first.Arrive), r.rel(c.Arrive))})
		} else {
			seen[id] = c
		}
		if n, ok := unsent[c.ID]; ok {
			out = append(out, Violation{Kind: VTwice, Key: key, At: c.Arrive, Msg: fmt.Sprintf(
				"call %s (child %s) reached the provider at %s, though pacehttp failed it (%s) at %s before sending it", c.ID, c.Child, r.rel(c.Arrive), n.Op, r.rel(n.At))})
		}
	}
	return out
}

// rates checks every sample of key's learned rate against [Min, Max].
func (r *run) rates(key string, fig *Learned) []Violation {
	cfg := adaptiveConfig
	var out []Violation
	sum := 0.0
	for _, n := range r.res.Notes {
		if n.Type != noteRate || n.Key != key {
			continue
		}
		if fig.Samples == 0 || n.Rate < fig.RateMin {
			fig.RateMin = n.Rate
		}
		fig.RateMax = max(fig.RateMax, n.Rate)
		fig.Samples++
		sum += n.Rate
		if !(n.Rate >= cfg.Min && n.Rate <= cfg.Max) {
			out = append(out, Violation{Kind: VRate, Key: key, At: n.At, Msg: fmt.Sprintf(
				"child %s read a learned rate of %g/s, outside [%g, %g]", n.Child, n.Rate, cfg.Min, cfg.Max)})
		}
	}
	if fig.Samples > 0 {
		fig.RateMean = sum / float64(fig.Samples)
	}
	return out
}

// liveness checks that no span of livenessSpan, in the time from the
// warm-up clear of Redis faults and key's pauses (with their recoveries)
// and of spans in which no fleet process ran,
// passes without a call the provider accepted; and measures the accepted
// calls in that time.
func (r *run) liveness(key string, fig *Learned) []Violation {
	start := r.res.Start.Add(warmup).UnixNano()
	end := r.res.End.UnixNano() - int64(livenessEnd)
	cuts := r.learnedCuts(key)
	var accepted []int64
	for _, c := range r.calls[key] {
		if c.Status == 200 {
			accepted = append(accepted, c.Arrive)
		}
	}
	slices.Sort(accepted)
	in := func(a, b int64) int {
		i, _ := slices.BinarySearch(accepted, a)
		j, _ := slices.BinarySearch(accepted, b)
		return j - i
	}

	// From the warm-up, outside Redis faults (and faultRecovery after
	// them) and pauses.
	for _, f := range r.faults {
		cuts = append(cuts, [2]int64{f.At, f.End + int64(faultRecovery)})
	}
	// And while no fleet process runs (all killed: nobody calls).
	cuts = append(cuts, r.noneRunning(key)...)
	clearTime := outside(start, end, cuts)
	for _, s := range clearTime {
		fig.Clear += time.Duration(s[1] - s[0])
		fig.Accepted += in(s[0], s[1])
	}
	if fig.Clear > 0 {
		fig.Fraction = float64(fig.Accepted) / (keyDefs[key].limit.Rate * fig.Clear.Seconds())
	}

	var out []Violation
	for _, s := range clearTime {
		if s[1]-s[0] < int64(livenessSpan) {
			continue
		}
		fig.Live += time.Duration(s[1] - s[0])
		// The gaps between the stretch's ends and the accepted calls in it.
		i, _ := slices.BinarySearch(accepted, s[0])
		j, _ := slices.BinarySearch(accepted, s[1])
		points := append(append([]int64{s[0]}, accepted[i:j]...), s[1])
		for k := 1; k < len(points); k++ {
			gap := points[k] - points[k-1]
			fig.Gap = max(fig.Gap, time.Duration(gap))
			if gap >= int64(livenessSpan) {
				out = append(out, Violation{Kind: VLiveness, Key: key, At: points[k-1], Msg: fmt.Sprintf(
					"the provider accepted no call in [%s, %s] (%s), clear of Redis faults and pauses from %s to %s",
					r.rel(points[k-1]), r.rel(points[k]), ms(gap), r.rel(s[0]), r.rel(s[1]))})
			}
		}
	}
	return out
}

// learnedCuts returns the spans in which key's calls may rightly stop, each
// with learnedRecovery after it: every pause of the key, whether or not its
// maker saw it succeed (pacehttp's Transport pauses the key itself on a
// 429, for its Retry-After in whole seconds, before the child's own pause
// of the exact Retry), to its length after its call returned (the latest
// Redis can have run it); every operator's pause, until a resume that
// succeeded; and the provider's own pauses, from every 429 it answered.
func (r *run) learnedCuts(key string) [][2]int64 {
	rec := int64(learnedRecovery)
	var cuts [][2]int64
	for _, n := range r.res.Notes {
		if n.Type == notePause && n.Key == key {
			// Its length counts from when Redis ran it: as late as the
			// call's return (a CLIENT PAUSE or a stall held it; seed 28:
			// a pause sent at 10.42 s ran at 11.40 s).
			cuts = append(cuts, [2]int64{n.At, max(n.At, n.End) + wholeSeconds(n.D) + rec})
		}
	}
	cuts = append(cuts, r.retryAfterCuts(key, rec)...)
	for _, a := range r.res.Actions {
		if a.Kind != OpPause || a.Key != key {
			continue
		}
		end := a.At + int64(a.For)
		for _, x := range r.res.Actions {
			if x.Kind == OpResume && x.Key == key && x.Err == "" && x.At >= a.At && x.End < end {
				end = x.End
			}
		}
		cuts = append(cuts, [2]int64{a.At, end + rec})
	}
	return cuts
}

// retryAfterCuts returns, for each 429 the provider answered on key, the
// time from its arrival to its Retry-After (whole seconds, rounded up, as
// the provider sends it) and rec more: the pause the Transport makes of it.
func (r *run) retryAfterCuts(key string, rec int64) [][2]int64 {
	var cuts [][2]int64
	for _, c := range r.calls[key] {
		if c.Status == http.StatusTooManyRequests {
			cuts = append(cuts, [2]int64{c.Arrive, c.Arrive + wholeSeconds(c.Retry) + rec})
		}
	}
	return cuts
}

// wholeSeconds returns d rounded up to whole seconds, as Retry-After gives
// it.
func wholeSeconds(d int64) int64 {
	return int64(math.Ceil(time.Duration(d).Seconds())) * int64(time.Second)
}

// outside returns [from, to] less cuts: sorted, disjoint, non-empty.
func outside(from, to int64, cuts [][2]int64) [][2]int64 {
	slices.SortFunc(cuts, func(a, b [2]int64) int { return cmpInt(a[0], b[0]) })
	var out [][2]int64
	at := from
	for _, c := range cuts {
		if c[0] > at {
			out = append(out, [2]int64{at, min(c[0], to)})
		}
		at = max(at, c[1])
		if at >= to {
			break
		}
	}
	if at < to {
		out = append(out, [2]int64{at, to})
	}
	return slices.DeleteFunc(out, func(s [2]int64) bool { return s[1] <= s[0] })
}
