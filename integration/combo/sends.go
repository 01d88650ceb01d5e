package combo

import (
	"fmt"
	"slices"
	"time"
)

// The sends check: a call through pacehttp's Transport (KeyHTTP) reserves
// its slot, sleeps until it, and then may wait for the provider's count
// (the fleet's count of the window it learns from the provider's answers)
// before it is sent. What the provider feels is the send, so the bands
// the fleet is told of (httpFleet's rps) are judged on the sends too: no
// interval T holds more than burst + rate × (T + sendEps) sends (DESIGN.md,
// "One schedule, whatever serves it": the window invariant is judged over
// every window of a run; a late caller never fires together with the
// callers that are on time). A send is stamped on its process's clock just
// before the request goes out; sendEps allows for a sender a moment late
// (with 20 ms, seed 1 under -race on a quiet machine once found 4 sends in
// 10.6 ms against 3.92 allowed, their slots 100 ms apart: one sender 90 ms
// late, which a goroutine scheduled late can be; the bunching the check is
// for, sends held for the provider's count and released together, is 7 in
// 44 ms, over 5.8 with 50 ms).
// Judged outside Redis faults (and faultRecovery after them), CPU hogs and
// stops of a process (and hogRecovery after them), and the first
// sendSettle of a process (its first sends wait for connections and
// scripts to load): there every caller is late, and the slots are what is
// judged.
const (
	sendEps    = 50 * time.Millisecond
	sendSettle = time.Second
)

// sends judges KeyHTTP's sends, and returns the median and the longest
// wait from a slot to its send (figures).
func (r *run) sends() ([]Violation, time.Duration, time.Duration) {
	var items []item
	var late []time.Duration
	for i := range r.calls[KeyHTTP] {
		c := &r.calls[KeyHTTP][i]
		if c.Kind != kindHTTP || c.Fire == 0 {
			continue
		}
		if c.Slot != 0 {
			late = append(late, time.Duration(c.Fire-c.Slot))
		}
		items = append(items, item{lo: c.Fire, hi: c.Fire, units: c.Cost[unitRequests], grant: c.Grant, proc: r.procs[c.Child], call: c})
	}
	var out []Violation
	for _, b := range bandsOf(httpFleet) {
		for _, e := range overBucket(items, b, int64(sendEps)) {
			if r.faultDuring(e.from-int64(faultRecovery), e.to) || r.loadedDuring("", e.from-int64(hogRecovery), e.to) ||
				r.startedDuring(e.from-int64(sendSettle), e.to) {
				continue
			}
			out = append(out, Violation{Kind: VSend, Key: KeyHTTP, At: e.from, Msg: fmt.Sprintf(
				"band %s: %g sends in [%s, %s] (%s), allowed %.2f (burst %g + %g/s × (T + %v)); calls sent %s",
				b.name, e.units, r.rel(e.from), r.rel(e.to), ms(e.to-e.from), e.bound, b.burst, b.rate, sendEps, describeSends(e.members, r))})
		}
	}
	var p50, most time.Duration
	if len(late) > 0 {
		slices.Sort(late)
		p50, most = late[len(late)/2], late[len(late)-1]
	}
	return out, p50, most
}

// describeSends lists sends (at most 8): ID, send, slot.
func describeSends(its []*item, r *run) string {
	s := ""
	for i, it := range its {
		if i == 8 {
			return s + fmt.Sprintf(" ... %d in all", len(its))
		}
		c := it.call
		s += fmt.Sprintf(" %s(@%s, slot %s %s)", c.ID, r.rel(c.Fire), r.rel(c.Slot), origin(*c))
	}
	return s
}

// startedDuring reports whether a fleet process started in [a, b].
func (r *run) startedDuring(a, b int64) bool {
	for _, l := range r.res.Lives {
		if l.From >= a && l.From <= b {
			return true
		}
	}
	return false
}
