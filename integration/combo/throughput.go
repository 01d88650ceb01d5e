package combo

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The throughput check: on a key whose demand stays well above its limit,
// the fleet must use at least minFraction of what the limit allowed. It is
// judged outside the pauses (and pauseRecovery after them; after a
// resumed one, after the latest its queue may restart: resumedRestart), outside
// Redis faults (and faultRecovery after them, counted from when the
// members the fault sent to local pacing were back: backAfter) and while no fleet process
// runs (and procGap after), from the warm-up to the end,
// against the limit in force: the true limit, or an enforced stored limit
// below it (from the moment it was asked for until the next change was
// done). A key's fraction is its busiest band's: the band that binds is
// used fully, the others less. A call counts what its band spent on it:
// its cost reserved, or the actual if it was more.

// minJudged is the least time outside pauses and faults worth judging.
const minJudged = 3 * time.Second

// throughput returns key's fraction, NaN if there was too little time to
// judge, and a violation if it is below minFraction.
func (r *run) throughput(key string) (float64, string, *Violation) {
	segs := r.judgedTime(key)
	var total int64
	for _, s := range segs {
		total += s[1] - s[0]
	}
	if total < int64(minJudged) {
		return math.NaN(), fmt.Sprintf("not judged: %.1fs outside pauses and faults", time.Duration(total).Seconds()), nil
	}
	best, bestBand := 0.0, ""
	var detail []string
	for _, b := range bandsOf(keyDefs[key].pol) {
		allowed := r.allowed(key, b, segs)
		used := 0.0
		for _, it := range r.items(key, b, false) {
			if inSegs(segs, it.hi) {
				// What the band spent: a settle that lowers the
				// estimate gives back only what the queue has not built
				// on, which under this demand is nothing.
				used += max(it.units, it.call.Cost[b.unit])
			}
		}
		f := used / allowed
		detail = append(detail, fmt.Sprintf("%s %.0f of %.0f %s", b.name, used, allowed, b.unit))
		if f > best {
			best, bestBand = f, b.name
		}
	}
	var seen []string
	for _, s := range segs {
		seen = append(seen, fmt.Sprintf("[%s, %s]", r.rel(s[0]), r.rel(s[1])))
	}
	used := strings.Join(detail, ", ") + " in " + strings.Join(seen, " ")
	if best >= minFraction {
		return best, used, nil
	}
	return best, used, &Violation{Kind: VThroughput, Key: key, At: segs[0][0], Msg: fmt.Sprintf(
		"used %.2f of what the limit allowed (want >= %.2f; busiest band %s) over %.1fs outside pauses and faults: %s",
		best, minFraction, bestBand, time.Duration(total).Seconds(), used)}
}

// judgedTime returns the intervals of the run judged for key's throughput,
// sorted and disjoint.
func (r *run) judgedTime(key string) [][2]int64 {
	from := r.res.Start.Add(warmup).UnixNano()
	to := r.res.End.Add(-500 * time.Millisecond).UnixNano()
	var cut [][2]int64
	for _, p := range r.pauseSpans(key) {
		cut = append(cut, [2]int64{p.start, max(p.end, r.resumedRestart(key, p)) + int64(pauseRecovery)})
	}
	if key == KeyHTTP && r.res.Scenario.Body != bodyGoogle {
		// A 429 tells pacehttp's Transport its Retry-After, whole seconds
		// rounded up, and the Transport pauses the key for all of it; the
		// child's own pause (above) is the exact Retry. (With Google's
		// body alone the Transport reads the body's RetryInfo, which is
		// that pause: body.go.)
		cut = append(cut, r.retryAfterCuts(key, int64(pauseRecovery))...)
	}
	for _, f := range r.faults {
		cut = append(cut, [2]int64{f.At, r.backAfter(f) + int64(faultRecovery)})
	}
	// No demand while no fleet process runs (all killed or closed), and
	// procGap after (stalls.go's noneRunning).
	cut = append(cut, r.noneRunning(key)...)
	for _, a := range r.res.Actions {
		if a.Kind == FaultHog {
			// A loaded machine serves its callers late: the promise is
			// that it is no outage (outage.go), not a rate.
			cut = append(cut, [2]int64{a.At, max(a.End, a.At) + int64(hogRecovery)})
		}
	}
	return outside(from, to, cut)
}

// resumedRestart returns the latest time at which pause p, ended by an
// operator's resume, may leave key carrying nothing: resume.lua moves the
// reservations granted during the pause (and so every call asked for after
// the resume, which queues behind them) earlier by d, and each window band
// bounds d (docs/protocol.md, "Resume"). A band's queue moves by whole
// windows, into none before the one after the window holding the latest
// slot granted before the pause (the state's "~w"), and within the window
// the pause ends in only while the queue stays in that window. A queue
// that may reach the next window moves by whole windows alone: its first
// slot may lie as late as the pause's end less k windows of length L,
//
//	k = min(⌊(end - max(resume, pre-pause slot)) / L⌋, W(end) - W(pre-pause slot) - 1)
//
// (W: a window's index), pauseRecovery before the first slot's spacing
// after it. The combination runner's seed 28: an 11.7 s pause made at
// 2.79 s, resumed at 3.62 s, slots granted before it up to 3.0 s, the
// policy key's 2 s window band: the key carried nothing until 6.56 s (the
// queue moved four windows) or 4.83 s (its queue in one window, moved to
// the start of the window after the pre-pause one) in runs whose window
// boundaries lay so, from 0.06 s after the resume in others; judged from
// 3.82 s, 0.26 of what the limit allowed. It returns p.end for a pause
// that was not resumed, or when no window band bounds d.
//
// The end is the latest Redis can have had (the pause counted from its
// call's return); the latest pre-pause slot is the latest slot first given
// before the end to a reservation asked for before the pause returned (not
// a fair one: it is booked at its turn, maybe seconds after it was asked
// for; a Wait's slot is not known, and one that fired before the pause
// returned lay before it), or that return. The queue may reach the next
// window when the fleet's callers, one reservation each, would at the
// band's rate. Not modelled: a window band not in force at the resume (a
// stored limit without it: resume.lua moves nothing) and a lattice's
// periods (members held: the move rounds down to them).
func (r *run) resumedRestart(key string, p pauseSpan) int64 {
	if p.resumed == 0 {
		return p.end
	}
	end := p.ret + (p.full - p.start)
	pre := p.ret
	for _, c := range r.calls[key] {
		switch c.Kind {
		case "reserve", "reservep", "try", "tryp":
		default:
			continue // a Wait's slot is not known, nor when it was granted
		}
		if c.fair() {
			continue // booked at its turn, maybe long after it was asked for
		}
		first := c.First
		if first == 0 {
			first = c.Slot
		}
		if c.Grant < p.ret && first != 0 && first < end {
			pre = max(pre, first)
		}
	}
	from := max(p.resumed, pre) // the move is at most end - from
	restart := p.end
	for _, b := range bandsOf(keyDefs[key].fleetPol()) {
		if b.bucket || from >= end {
			continue
		}
		l := int64(b.length)
		shift := end - from
		wp := windowIndex(end, b.length)
		k := min(shift/l, wp-windowIndex(pre, b.length)-1)
		d := max(k, 0) * l
		queue := float64(procs*(slidingGoroutines+policyGoroutines)) / b.n * float64(l)
		if windowIndex(end+int64(queue), b.length) == wp {
			// The queue stays in the end's window: it may move within it.
			d += min(end-wp*l, shift-d)
		}
		restart = max(restart, end-d)
	}
	return restart
}

// lateBack bounds how long after a Redis fault's end a member it sent to
// local pacing may take to come back before the throughput check counts
// the time: a probe a ProbeInterval (±25%) apart, then the fleet's view, on
// a loaded machine (the combination runner's seed 3 beside other work: a
// member back 2.4 s after an out-of-memory fault ended, judged from 2 s
// on at 0.30-0.39).
const lateBack = 5 * time.Second

// backAfter is when the members pacing locally at fault f's end were all
// back on Redis: f's end, or the last return after it, lateBack at most.
func (r *run) backAfter(f Action) int64 {
	limit := f.End + int64(lateBack)
	back := f.End
	for _, ns := range r.modes {
		local, ret := false, int64(0)
		for _, n := range ns {
			if n.At <= f.End {
				local = n.To == "local"
			} else if local && n.To == "redis" {
				ret = n.At
				break
			}
		}
		switch {
		case local && (ret == 0 || ret > limit):
			back = limit
		case local:
			back = max(back, ret)
		}
	}
	return back
}

// allowed integrates band b's rate in force over segs.
func (r *run) allowed(key string, b band, segs [][2]int64) float64 {
	trueRate := b.rate
	if !b.bucket {
		trueRate = b.n / b.length.Seconds()
	}
	// Each enforced stored limit naming b may be in force from when it was
	// asked for until the next change on the key (or a restart) was done,
	// and its queue drains after that: the slots granted under it keep
	// their places (at most one per caller, a window ahead).
	type lowered struct {
		from, to int64
		rate     float64
	}
	var lows []lowered
	var changes []Action
	for _, a := range r.res.Actions {
		if a.Key == key && (a.Kind == OpSet || a.Kind == OpShadow || a.Kind == OpUnset) || a.Kind == FaultRestart {
			changes = append(changes, a)
		}
	}
	for i, a := range changes {
		if a.Kind != OpSet || a.Key != key {
			continue
		}
		to := r.res.End.UnixNano()
		if i+1 < len(changes) {
			to = changes[i+1].End
		}
		for _, sb := range bandsOf(a.Stored) {
			if sb.name != b.name {
				continue
			}
			rate := sb.rate
			if !sb.bucket {
				rate = sb.n / sb.length.Seconds()
			}
			drain := float64(procs*(slidingGoroutines+policyGoroutines))/rate*1e9 + float64(sb.length)
			lows = append(lows, lowered{a.At, to + int64(drain), rate})
		}
	}
	total := 0.0
	for _, s := range segs {
		points := []int64{s[0], s[1]}
		for _, l := range lows {
			for _, t := range []int64{l.from, l.to} {
				if t > s[0] && t < s[1] {
					points = append(points, t)
				}
			}
		}
		slices.Sort(points)
		for i := 0; i+1 < len(points); i++ {
			mid := (points[i] + points[i+1]) / 2
			rate := trueRate
			for _, l := range lows {
				if l.from <= mid && mid < l.to {
					rate = min(rate, l.rate)
				}
			}
			total += rate * float64(points[i+1]-points[i]) / 1e9
		}
	}
	return total
}

func inSegs(segs [][2]int64, t int64) bool {
	for _, s := range segs {
		if t >= s[0] && t < s[1] {
			return true
		}
	}
	return false
}
