package combo

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The two rules that bound local pacing (DESIGN.md, "Redis down"):
//
//   - An outage is never an error to a caller who can wait: a call with no
//     maximum wait and no deadline of its own (only the run's end, seconds
//     away: canWait) that fails with ErrUnavailable breaks it, whatever
//     the refusal's reason (no share yet after joining, Redis never
//     reached). The child notes each (noteUnavail); a run of them on one
//     key in one process, none more than unavailGap from the next, is one
//     violation.
//   - A slow process is not an outage: a switch to local pacing needs
//     evidence that Redis is gone. A switch while no Redis fault is in
//     force (from its injection to switchLag after it was mended) breaks
//     it, whatever else loads the machine (CPU hogs, a process stopped and
//     continued).
const (
	unavailGap = time.Second
	// switchLag: a call that failed while Redis was broken may be counted
	// a little after the fault was mended (its timeout, the log's
	// scheduling).
	switchLag = time.Second
)

// unavailable returns the violations of the first rule.
func (r *run) unavailable() []Violation {
	type runOf struct {
		child, key  string
		first, last Note
		n           int
		kinds       []string
	}
	var runs []*runOf
	open := map[string]*runOf{}
	notes := slices.Clone(r.res.Notes)
	slices.SortStableFunc(notes, func(a, b Note) int { return cmpInt(a.At, b.At) })
	for _, n := range notes {
		if n.Type != noteUnavail {
			continue
		}
		id := n.Child + "/" + n.Key
		if o := open[id]; o != nil && n.At-o.last.At <= int64(unavailGap) {
			o.last, o.n = n, o.n+1
			if !slices.Contains(o.kinds, n.Op) {
				o.kinds = append(o.kinds, n.Op)
			}
			continue
		}
		o := &runOf{child: n.Child, key: n.Key, first: n, last: n, n: 1, kinds: []string{n.Op}}
		open[id] = o
		runs = append(runs, o)
	}
	var out []Violation
	for _, o := range runs {
		out = append(out, Violation{Kind: VUnavailable, Key: o.key, At: o.first.At, Msg: fmt.Sprintf(
			"child %s: %d calls that could wait (%s, no maximum wait, no deadline of their own) failed with ErrUnavailable in [%s, %s]: %s",
			o.child, o.n, strings.Join(o.kinds, ", "), r.rel(o.first.At), r.rel(o.last.At), o.first.Err)})
	}
	return out
}

// switches returns the violations of the second rule.
func (r *run) switches() []Violation {
	var out []Violation
	for _, n := range r.res.Notes {
		if n.Type != noteSwitch || n.To != "local" {
			continue
		}
		if r.faultDuring(n.At-int64(switchLag), n.At) {
			continue
		}
		var load []string
		for _, a := range r.res.Actions {
			if (a.Kind == FaultHog || a.Kind == FaultStall) && a.At <= n.At && n.At <= max(a.End, a.At)+int64(switchLag) {
				load = append(load, describeAction(r.res.Start, a))
			}
		}
		why := "no Redis fault in force"
		if len(load) > 0 {
			why += "; beside " + strings.Join(load, ", ")
		}
		out = append(out, Violation{Kind: VSwitch, At: n.At, Msg: fmt.Sprintf(
			"child %s switched to local pacing at %s with Redis healthy (%s): a slow process is not an outage", n.Child, r.rel(n.At), why)})
	}
	return out
}
