package combo

import (
	"fmt"
	"slices"
	"time"
)

// The resume check: a resume frees the key at once (DESIGN.md, "Where
// features meet"). After the operator resumed a pause of a key at R, long
// before its end E, no call on the key may be held to E: a call that
// fires within resumeSlack of E, stallSpan or more after both R and its
// own call, broke it (it slept to the old end, or a stale floor held the
// key there), unless another pause of the key (learnedCuts, without the
// resumed one), a Redis fault or local pacing of its process explains the
// wait at its fire, or its process paced locally from when the call was
// asked for (a slot the local fallback granted at the process's share of
// the fleet, which may lie seconds ahead: the combination runner's seed 1,
// a Python process born during an outage that held five members, its
// local slots granted at 6.9-7.1 s lying at 13.9-14.8 s, one within
// resumeSlack of a resumed pause's old end). Nothing else the runner does makes a wait of seconds
// (stalls.go), let alone one that ends at E. A call asked for after the
// resume can only be held to E with the key (a floor, a pause state), so
// it broke it only if the key was idle before it (no call on the key
// fired in the resumeIdle before it): one that queued behind a backlog
// (callers that waited out an outage, a fair queue) fires among others.
// So can a fair call, whenever it was asked for: it is booked only within
// its horizon of its slot, so it never sleeps on a slot booked in the
// pause; its tenant's backlog may hold it for seconds (the combination
// runner's seed 4: a fair call asked for at 0.01 s fired at 13.7 s among
// the key's other fair calls, 0.47 s before a resumed pause's old end).
const (
	resumeSlack = 500 * time.Millisecond
	resumeIdle  = stallSpan / 2
)

// resumed returns the violations.
func (r *run) resumed() []Violation {
	var out []Violation
	for _, p := range r.res.Actions {
		if p.Kind != OpPause || p.Err != "" {
			continue
		}
		end := p.At + int64(p.For)
		var res *Action
		for i, a := range r.res.Actions {
			if a.Kind == OpResume && a.Key == p.Key && a.Err == "" && a.At > p.End && a.End < end-int64(stallSpan) {
				res = &r.res.Actions[i]
				break
			}
		}
		if res == nil {
			continue
		}
		// The key's other pauses: its processes', the 429s', the
		// operator's others.
		var cuts [][2]int64
		for _, c := range r.learnedCuts(p.Key) {
			if !(c[0] == p.At) {
				cuts = append(cuts, c)
			}
		}
		for _, c := range r.calls[p.Key] {
			if c.Fire < end-int64(resumeSlack) || c.Fire > end+int64(resumeSlack) || c.Fire-max(res.End, c.Grant) < int64(stallSpan) {
				continue
			}
			if (c.Grant > res.End || c.fair()) && r.firedIn(p.Key, c.Fire-int64(resumeIdle), c.Fire) {
				continue
			}
			a, b := c.Fire-int64(learnedRecovery), c.Fire
			if slices.ContainsFunc(cuts, func(x [2]int64) bool { return x[0] <= b && a <= x[1] }) ||
				r.faultDuring(a, b) || r.localDuring(c.Child, min(a, c.Grant), b) {
				continue
			}
			out = append(out, Violation{Kind: VResume, Key: p.Key, At: c.Fire, Msg: fmt.Sprintf(
				"call %s (%s, %s, child %s), asked for at %s, fired at %s, at the end of %s's pause made at %s though it was resumed at %s (%v before)",
				c.ID, c.Kind, origin(c), c.Child, r.rel(c.Grant), r.rel(c.Fire), "the operator", r.rel(p.At), r.rel(res.At),
				time.Duration(end-res.At).Round(time.Millisecond))})
		}
	}
	return out
}

// firedIn reports whether a call on key fired in [a, b).
func (r *run) firedIn(key string, a, b int64) bool {
	return slices.ContainsFunc(r.calls[key], func(c Call) bool { return a <= c.Fire && c.Fire < b })
}
