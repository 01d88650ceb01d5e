package combo

import (
	"container/heap"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// The window check: for every band of a key's true limit, no interval of
// the run holds more units than the band allows, judged on the slots the
// calls' reservations gave them (what the limiter promises), over every
// interval that starts and ends at a slot.
//
// A bucket band (rate r, burst b) allows b + r × (T + slotEps) in an
// interval of length T, plus one allowance the design documents: raises run
// ahead. A settle that raises a cost is paid by the reservations granted
// after it, so the interval may hold the raises of its calls settled after
// the last of them was granted (Settle's doc). Slots the local fallback
// granted get no allowance: the processes' local shares add up to the limit
// (bursts split by rank, a lattice of slots shared out by rank when the
// burst is under the fleet's size).
//
// A window band allows N per window, plus the same raises.
//
// A Wait tells no slot, only that it lies in [Lo, Hi]: it is counted in an
// interval only when that whole range lies inside.

// item is one call's units on one band.
type item struct {
	lo, hi  int64 // the slot (lo == hi when known)
	units   float64
	raise   float64 // the actual cost over the reserved one, if more
	grant   int64   // no later than when it was granted
	settled int64   // when its settle returned; MaxInt64 if never
	proc    int
	local   bool // granted by the local fallback (or may have been)
	call    *Call
}

// items returns the fired calls of key as items of band b, on their slots
// (or their arrivals, with arrival).
func (r *run) items(key string, b band, arrival bool) []item {
	calls := r.calls[key]
	out := make([]item, 0, len(calls))
	for i := range calls {
		c := &calls[i]
		it := item{lo: c.Lo, hi: c.Hi, grant: c.Grant, settled: math.MaxInt64, proc: r.procs[c.Child], local: c.Local, call: c}
		if arrival {
			it.lo, it.hi = c.Arrive, c.Arrive
		}
		if c.Lo != c.Hi && r.localDuring(c.Child, c.Lo, c.Hi) {
			it.local = true // a Wait that may have been served locally
		}
		reserved := c.Cost[b.unit]
		it.units = reserved
		if b.unit == unitTokens && c.Settle && c.Status == 200 {
			it.units = c.Actual
			if s, ok := r.settles[c.ID]; ok {
				it.settled = s.End
			}
			it.raise = max(0, c.Actual-reserved)
		}
		if it.units > 0 {
			out = append(out, it)
		}
	}
	return out
}

// localBurst is what each process with local slots in an interval adds to
// a bucket band's bound: nothing (see the top of the file). The verdict
// still names those processes, to tell a local breach from one on Redis.
func localBurst(band) float64 { return 0 }

// excess is one interval over a band's limit.
type excess struct {
	from, to int64
	units    float64
	bound    float64
	over     float64
	members  []*item
	detail   string
}

// windows judges key's band b on the slots.
func (r *run) windows(key string, b band) []Violation {
	var found []excess
	if b.bucket {
		found = overBucket(r.items(key, b, false), b, int64(slotEps))
	} else {
		found = overWindow(r.items(key, b, false), b)
	}
	out := make([]Violation, 0, len(found))
	for _, e := range found {
		out = append(out, Violation{Kind: VWindow, Key: key, At: e.from, Msg: fmt.Sprintf("band %s: %g %s in [%s, %s] (%s), allowed %.2f (%s); calls %s",
			b.name, e.units, b.unit, r.rel(e.from), r.rel(e.to), ms(e.to-e.from), e.bound, e.detail, describeItems(e.members, r))})
	}
	return out
}

// arrivalOver counts the intervals over band b's limit on arrivals.
func (r *run) arrivalOver(key string, b band) int {
	if b.bucket {
		return len(overBucket(r.items(key, b, true), b, int64(arrivalEps)))
	}
	return 0 // a window's boundary moves with the jitter: not a figure worth having
}

// overBucket returns the intervals, at most a few dozen and none
// overlapping, where items exceed bucket band b.
func overBucket(items []item, b band, eps int64) []excess {
	var certain, unsure []*item
	for i := range items {
		if items[i].lo == items[i].hi {
			certain = append(certain, &items[i])
		} else {
			unsure = append(unsure, &items[i])
		}
	}
	slices.SortStableFunc(certain, func(x, y *item) int { return cmpInt(x.lo, y.lo) })
	slices.SortStableFunc(unsure, func(x, y *item) int { return cmpInt(x.hi, y.hi) })
	lb := localBurst(b)
	var found []excess
	for i, first := range certain {
		a := first.lo
		var acc accum
		u := 0
		best := excess{}
		for j := i; j < len(certain); j++ {
			end := certain[j].lo
			acc.add(certain[j])
			for u < len(unsure) && unsure[u].hi <= end {
				if unsure[u].lo >= a {
					acc.add(unsure[u])
				}
				u++
			}
			local := float64(bits.OnesCount64(acc.mask)) * lb
			bound := b.burst + b.rate*float64(end-a+eps)/1e9 + local + acc.raises
			if over := acc.units - bound; over > 1e-6 && over > best.over {
				best = excess{from: a, to: end, units: acc.units, bound: bound, over: over,
					detail: fmt.Sprintf("burst %g + %g/s × T + local %g + raises %g", b.burst, b.rate, local, acc.raises)}
			}
		}
		if best.over > 0 {
			found = append(found, best)
		}
	}
	kept := distinct(found)
	for i := range kept {
		for j := range items {
			if it := &items[j]; it.lo >= kept[i].from && it.hi <= kept[i].to {
				kept[i].members = append(kept[i].members, it)
			}
		}
		slices.SortStableFunc(kept[i].members, func(x, y *item) int { return cmpInt(x.lo, y.lo) })
	}
	return kept
}

// overWindow returns the windows where items exceed window band b.
func overWindow(items []item, b band) []excess {
	byWin := map[int64][]*item{}
	for i := range items {
		it := &items[i]
		w := windowIndex(it.lo, b.length)
		if windowIndex(it.hi, b.length) != w {
			continue // a Wait that may lie in either window
		}
		byWin[w] = append(byWin[w], it)
	}
	var found []excess
	for w, its := range byWin {
		slices.SortStableFunc(its, func(x, y *item) int { return cmpInt(x.grant, y.grant) })
		var acc accum
		for _, it := range its {
			acc.add(it)
		}
		slices.SortStableFunc(its, func(x, y *item) int { return cmpInt(x.lo, y.lo) })
		bound := b.n + acc.raises
		if over := acc.units - bound; over > 1e-6 {
			from := w * int64(b.length)
			found = append(found, excess{from: from, to: from + int64(b.length), units: acc.units, bound: bound, over: over,
				members: its, detail: fmt.Sprintf("N %g per %v + raises %g", b.n, b.length, acc.raises)})
		}
	}
	slices.SortStableFunc(found, func(x, y excess) int { return cmpInt(x.from, y.from) })
	return found
}

// accum sums the items of an interval: units, the processes with local
// slots, and the raises settled after the latest grant.
type accum struct {
	units, raises float64
	mask          uint64
	latest        int64 // the latest grant
	pending       raiseHeap
}

func (a *accum) add(it *item) {
	a.units += it.units
	if it.local {
		a.mask |= 1 << (it.proc % 64)
	}
	if it.grant > a.latest {
		a.latest = it.grant
		for len(a.pending) > 0 && a.pending[0].settled <= a.latest {
			a.raises -= heap.Pop(&a.pending).(*item).raise
		}
	}
	if it.raise > 0 && it.settled > a.latest {
		heap.Push(&a.pending, it)
		a.raises += it.raise
	}
}

// raiseHeap orders raised items by when they were settled.
type raiseHeap []*item

func (h raiseHeap) Len() int           { return len(h) }
func (h raiseHeap) Less(i, j int) bool { return h[i].settled < h[j].settled }
func (h raiseHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *raiseHeap) Push(x any)        { *h = append(*h, x.(*item)) }
func (h *raiseHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// distinct keeps the worst intervals that do not overlap, at most 30.
func distinct(found []excess) []excess {
	slices.SortStableFunc(found, func(x, y excess) int {
		if x.over != y.over {
			if x.over > y.over {
				return -1
			}
			return 1
		}
		return cmpInt(x.from, y.from)
	})
	var kept []excess
	for _, e := range found {
		if len(kept) == 30 {
			break
		}
		if !slices.ContainsFunc(kept, func(k excess) bool { return e.from <= k.to && k.from <= e.to }) {
			kept = append(kept, e)
		}
	}
	slices.SortStableFunc(kept, func(x, y excess) int { return cmpInt(x.from, y.from) })
	return kept
}

// describeItems lists an interval's calls (at most 8): ID, origin, slot.
func describeItems(its []*item, r *run) string {
	var parts []string
	for i, it := range its {
		if i == 8 {
			parts = append(parts, fmt.Sprintf("... %d in all", len(its)))
			break
		}
		c := it.call
		p := fmt.Sprintf("%s(%s %s", c.ID, c.Kind, origin(*c))
		if it.lo != it.hi {
			p += fmt.Sprintf(" in [%s, %s]", r.rel(it.lo), r.rel(it.hi))
		} else {
			p += " @" + r.rel(it.lo)
		}
		if it.units != 1 {
			p += fmt.Sprintf(" ×%g", it.units)
		}
		parts = append(parts, p+")")
	}
	return strings.Join(parts, " ")
}

// rel formats t relative to the run's start, in seconds.
func (r *run) rel(t int64) string {
	return fmt.Sprintf("%.4fs", time.Duration(t-r.res.Start.UnixNano()).Seconds())
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
