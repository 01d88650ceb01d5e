package combo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/reserve"
)

// The stored-limit check: after each time Redis came back empty
// (storedAfter) and once the run is over, each key's stored limit is what
// the operator last did to it (DESIGN.md: a stored limit is the
// operator's; docs/design.md, "Back from an outage, in order": the
// Limiters put back what Redis lost, and an operator's unset is never
// undone).
//
// The operator's last change to a key (a set, in shadow or not, or an
// unset; one whose error leaves its effect unknown is not judged, nor one
// made while another change of the key was under way) must be what Status
// reads: the policy set and its mode, or nothing after an unset. When Redis
// restarted empty after that change (its stop returned after the change
// began: a stop asked for just before may come after the write), the Limiters put
// back what they last saw; they can only know of the change from a reply
// that came after it, so the check holds only when every process alive
// both at the change and at the first restart after it was granted a slot
// by Redis on the key in between. Then an unset must still be an unset;
// a set may be lost (no Limiter puts back a key that something recreated
// first), so it must read as that set or as nothing, never as an older
// limit.

// StoredRead is a key's stored limit as Status read it: storedAfter after
// each time Redis came back empty, and once the run was over.
type StoredRead struct {
	Key    string `json:"key"`
	Limit  string `json:"limit,omitempty"` // the stored limit (KeyStatus.StoredLimit), "" for none
	Shadow bool   `json:"shadow,omitempty"`
	Err    string `json:"err,omitempty"` // Status's error (Redis knowing nothing of the key is no error)
	At     int64  `json:"at"`            // when Status returned
	// Started is when Status was called (0 in dumps made before it was
	// recorded): a change that ended after it ran beside the read.
	Started int64 `json:"started,omitempty"`
}

// storedAfter is how long after Redis came back empty the stored limits
// are read: every process has probed it by then (ProbeInterval, 1 s, +25%)
// and put back what it last saw before its calls go to Redis.
const storedAfter = 3 * time.Second

// changedKeys returns the keys sc sets or unsets, in order.
func changedKeys(sc Scenario) []string {
	var keys []string
	for _, e := range sc.Events {
		if (e.Kind == OpSet || e.Kind == OpShadow || e.Kind == OpUnset) && !slices.Contains(keys, e.Key) {
			keys = append(keys, e.Key)
		}
	}
	return keys
}

// readStored reads the stored limit of keys.
func (o *operator) readStored(keys []string) []StoredRead {
	var out []StoredRead
	for _, key := range keys {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		started := time.Now().UnixNano()
		st, err := o.admin.Status(ctx, key)
		cancel()
		read := StoredRead{Key: key, At: time.Now().UnixNano(), Started: started}
		switch {
		case errors.Is(err, admin.ErrUnknownKey):
		case err != nil:
			read.Err = err.Error()
		default:
			read.Limit, read.Shadow = st.StoredLimit, st.Shadow
		}
		out = append(out, read)
	}
	return out
}

// normStored is pol as a stored limit reads back (admin stores its text).
func normStored(pol reserve.Policy) string {
	text, err := pol.MarshalText()
	if err != nil {
		return pol.String()
	}
	var back reserve.Policy
	if err := back.UnmarshalText(text); err != nil {
		return pol.String()
	}
	return back.String()
}

// stored judges every read of a stored limit; it returns the violations
// and how many reads it could not judge.
func (r *run) stored() ([]Violation, int) {
	var out []Violation
	unjudged := 0
	for _, read := range r.res.Stored {
		var changes []Action
		for _, a := range r.res.Actions {
			if a.Key == read.Key && a.At < read.At && (a.Kind == OpSet || a.Kind == OpShadow || a.Kind == OpUnset) {
				changes = append(changes, a)
			}
		}
		if len(changes) == 0 {
			continue
		}
		slices.SortStableFunc(changes, func(a, b Action) int { return cmpInt(a.At, b.At) })
		last := changes[len(changes)-1]
		known := last.Err == "" || last.Kind == OpUnset && last.Expected && isNotStored(last.Err)
		// A change that ended after the read began ran beside it: the
		// read may come before its write (combination runner, seed 29: a
		// read queued behind a frozen Redis with a set, returned 0.2 ms
		// after the set did, and showed the limit before it).
		began := read.At
		if read.Started != 0 {
			began = read.Started
		}
		concurrent := len(changes) > 1 && changes[len(changes)-2].End >= last.At || last.End >= began
		if read.Err != "" || !known || concurrent {
			unjudged++
			continue
		}
		want, wantShadow := "", false
		if last.Kind != OpUnset {
			want, wantShadow = normStored(last.Stored), last.Kind == OpShadow
		}
		got := read.Limit
		// A restart whose stop returned after the change began may have
		// lost what the change wrote, even one asked for before it.
		restart := r.firstStopAfter(last.At)
		if restart > read.At {
			restart = 0
		}
		ok := got == want && (want == "" || read.Shadow == wantShadow)
		if restart != 0 {
			if !r.sawChange(read.Key, last.End, restart) {
				unjudged++
				continue
			}
			ok = ok || want != "" && got == "" // a set lost with Redis's data
		}
		if ok {
			continue
		}
		what := "unset it"
		if want != "" {
			what = fmt.Sprintf("set %s (shadow %v)", want, wantShadow)
		}
		after := ""
		if restart != 0 {
			after = fmt.Sprintf(", and every process alive then was granted a slot by Redis on it before Redis restarted empty at %s", r.rel(restart))
		}
		gotText := "no stored limit"
		if got != "" {
			gotText = fmt.Sprintf("%s (shadow %v)", got, read.Shadow)
		}
		out = append(out, Violation{Kind: VStored, Key: read.Key, At: read.At, Msg: fmt.Sprintf(
			"read at %s, the key has %s; the operator's last change %s at %s%s", r.rel(read.At), gotText, what, r.rel(last.At), after)})
	}
	return out, unjudged
}

// isNotStored reports whether an unset's error says nothing was stored.
func isNotStored(msg string) bool { return strings.Contains(msg, admin.ErrNotStored.Error()) }

// firstStopAfter returns when the first stop of Redis to restart empty
// that returned after t returned, or 0.
func (r *run) firstStopAfter(t int64) int64 {
	for _, at := range r.stops {
		if at > t {
			return at
		}
	}
	return 0
}

// sawChange reports whether every fleet process alive at from and at to
// was granted a slot by Redis on key in between (its reply came after
// from).
func (r *run) sawChange(key string, from, to int64) bool {
	for _, l := range r.res.Lives {
		if l.From > from || l.To < to {
			continue
		}
		if !slices.ContainsFunc(r.calls[key], func(c Call) bool {
			return c.Child == l.ID && c.Seq > 0 && !c.Local && c.Grant > from && c.Arrive < to
		}) {
			return false
		}
	}
	return true
}
