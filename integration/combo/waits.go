package combo

import (
	"fmt"
	"slices"
	"time"
)

// The long-wait check: a call whose only deadline is the run's end, more
// than 5 s away, refused because its wait would pass it (the child's
// noteTooLong), claims a wait of seconds. Nothing the runner does makes
// one that long but a pause of the key: a refusal at a time when no pause
// of the key can be in force (learnedCuts: every pause a process noted,
// every 429, the operator's pauses until a resume that worked), nor a
// Redis fault (and faultRecovery after it), nor local pacing of its
// process, is an error (before the runner's long pauses, every such
// refusal was one). A resume frees the key at once (DESIGN.md, "Where
// features meet"): a wait that still runs to the old pause's end after it
// breaks that.
func (r *run) longWaits() []Violation {
	var out []Violation
	for _, n := range r.res.Notes {
		if n.Type != noteTooLong {
			continue
		}
		a, b := n.At-int64(learnedRecovery), n.At
		cuts := r.learnedCuts(n.Key)
		if slices.ContainsFunc(cuts, func(c [2]int64) bool { return c[0] <= b && a <= c[1] }) ||
			r.faultDuring(a-int64(faultRecovery), b) || r.localDuring(n.Child, a, b) {
			continue
		}
		out = append(out, Violation{Kind: VError, Key: n.Key, At: n.At, Msg: fmt.Sprintf(
			"child %s %s: refused at %s for a wait of %v with no pause of the key in force: %s",
			n.Child, n.Op, r.rel(n.At), time.Duration(n.D).Round(time.Millisecond), n.Err)})
	}
	return out
}
