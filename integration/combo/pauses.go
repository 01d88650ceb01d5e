package combo

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// The pause check: no call's slot lies inside a pause its process was told
// of. A pause is made by a fleet process that got a 429 with Retry-After d
// (Limiter.Pause, called at start and returned at ret: no slot before
// start + d at least), or by the operator (admin.Client.Pause). A slot in
// [ret + pauseLead, start + d) is inside it; an operator's Resume ends
// every pause of the key at the moment it was asked for.
//
// Who must honour it:
//   - the process that made it, always: it knows, whichever engine made it;
//   - every other process, when the pause reached Redis (made on Redis with
//     no fault in force), while the process is on Redis (it reads the key
//     before each slot) and Redis has not been restarted empty since (the
//     pause is gone). A process pacing locally cannot learn it.
//   - A pause made on the local engine (its maker paced locally, or a
//     fault was in force) reaches Redis when its maker is back: its
//     handback passes the pauses on before the "back on Redis" switch
//     (DESIGN.md: a pause is honoured by every sleeper, whether Redis or
//     the local engine made it). From then on, the other processes must
//     honour it as one made on Redis. Unless a fault still held at the
//     switch (on a Cluster the probe answered while the key's master was
//     frozen; a Redis refusing writes): the key's handback then failed,
//     and the pause reaches Redis with its maker's next call on the key
//     (docs/design.md, "Local pacing"), which the verdict does not see
//     (Cluster seed 16: a call 60 ms after the key's master thawed).
//
// A call through pacehttp (KeyHTTP) is judged twice: on its slot, and on
// the moment it was sent (its Fire, with fireLead for the check before
// it): the Transport waits for the provider's count after its slot, and a
// request must not reach the provider inside a pause either.
//
// Calls inside a pause that their process could not learn are counted in
// Figures.Unjudged.

// pauseSpan is one pause as the verdict sees it.
type pauseSpan struct {
	key        string
	maker      string // the child that made it; "" for the operator
	start, ret int64  // the call's start and return (Unix ns)
	end        int64  // start + d, or when a Resume was asked for
	full       int64  // start + d, resumed or not
	resumed    int64  // when the Resume that ended it returned; 0 if none
	onRedis    bool   // it reached Redis
	what       string
}

// pauses returns key's pauses.
func (r *run) pauseSpans(key string) []pauseSpan {
	var out []pauseSpan
	for _, n := range r.res.Notes {
		if n.Type != notePause || n.Key != key || n.Err != "" {
			continue
		}
		// A Pause that met a fault may have been made on the local engine
		// only, even before the process switched (a single failed call).
		onRedis := !r.localDuring(n.Child, n.At, n.End) && !r.faultDuring(n.At-int64(300*time.Millisecond), n.End+int64(50*time.Millisecond))
		out = append(out, pauseSpan{key: key, maker: n.Child, start: n.At, ret: n.End, end: n.At + n.D, full: n.At + n.D, onRedis: onRedis,
			what: fmt.Sprintf("child %s's pause of %v (a 429)", n.Child, time.Duration(n.D).Round(time.Millisecond))})
	}
	for _, a := range r.res.Actions {
		if a.Kind == OpPause && a.Key == key && a.Err == "" {
			out = append(out, pauseSpan{key: key, start: a.At, ret: a.End, end: a.At + int64(a.For), full: a.At + int64(a.For), onRedis: true,
				what: fmt.Sprintf("the operator's pause of %v", a.For.Round(time.Millisecond))})
		}
	}
	for _, a := range r.res.Actions {
		if a.Kind != OpResume || a.Key != key {
			continue
		}
		for i := range out {
			// A resume that may have run after the pause ends it.
			if out[i].start < a.End && a.At < out[i].end {
				out[i].end, out[i].resumed = a.At, a.End
			}
		}
	}
	return out
}

// pauses judges key's calls against its pauses; it returns the violations
// (one per call, naming the pause it lies deepest in) and how many calls
// inside a pause were not judged.
func (r *run) pauses(key string) ([]Violation, int) {
	spans := r.pauseSpans(key)
	var out []Violation
	unjudged := 0
	lead := int64(pauseLead)
	for i := range r.calls[key] {
		c := &r.calls[key][i]
		worst, inside := r.deepest(spans, c, c.Lo, c.Hi, lead)
		what, at := r.slotText(c), c.Lo
		if worst == nil && c.Kind == kindHTTP && c.Fire != 0 {
			var sent bool
			if worst, sent = r.deepest(spans, c, c.Fire, c.Fire, int64(fireLead)); worst != nil {
				what, at = "sent at "+r.rel(c.Fire)+" on its slot at "+r.rel(c.Lo)+",", c.Fire
			}
			inside = inside || sent
		}
		switch {
		case worst != nil:
			out = append(out, Violation{Kind: VPause, Key: key, At: at, Msg: fmt.Sprintf(
				"call %s (%s, %s, child %s) %s is %s into %s, made [%s, %s], in force until %s%s",
				c.ID, c.Kind, origin(*c), c.Child, what, ms(at-worst.ret), worst.what,
				r.rel(worst.start), r.rel(worst.ret), r.rel(worst.end), r.modeText(c))})
		case inside:
			unjudged++
		}
	}
	return out, unjudged
}

// fireLead is pauseLead for a send: pacehttp's last look at the pause and
// the send are a few steps apart, which a loaded machine may run some
// time apart.
const fireLead = 250 * time.Millisecond

// deepest returns the pause of spans that c's [lo, hi] lies deepest in
// among those its process must honour (nil if none), and whether it lies
// inside any.
func (r *run) deepest(spans []pauseSpan, c *Call, lo, hi, lead int64) (*pauseSpan, bool) {
	var worst *pauseSpan
	inside := false
	for j := range spans {
		p := &spans[j]
		end := p.end
		if c.Local {
			// A local slot and the pause's end are on the process's
			// estimate of the server's clock, the note's end on its own
			// clock: they may differ by slotEps, as for windows.
			end -= int64(slotEps)
		}
		if lo < p.ret+lead || hi >= end {
			continue
		}
		inside = true
		if r.mustHonour(*p, c, lo, hi) && (worst == nil || lo-p.ret > lo-worst.ret) {
			worst = p
		}
	}
	return worst, inside
}

// mustHonour reports whether c's process could have known pause p when it
// checked [lo, hi] (its slot, or its send).
func (r *run) mustHonour(p pauseSpan, c *Call, lo, hi int64) bool {
	if c.Child == p.maker {
		return true
	}
	known := p.start // on Redis from then
	if !p.onRedis {
		back := r.backOnRedis(p.maker, p.ret)
		if back == 0 || lo < back+int64(pauseLead) || r.faultDuring(back, back) {
			return false
		}
		known = back
	}
	if r.restartBetween(known, hi) {
		return false
	}
	check := lo - int64(pauseLead)
	return !r.localDuring(c.Child, check, hi) && !r.faultDuring(check, hi)
}

// backOnRedis returns when child was first back on Redis after t (its
// switch note, logged once its handback was done), or 0.
func (r *run) backOnRedis(child string, t int64) int64 {
	for _, n := range r.modes[child] {
		if n.At > t && n.To == "redis" {
			return n.At
		}
	}
	return 0
}

func (r *run) slotText(c *Call) string {
	if c.Lo != c.Hi {
		return fmt.Sprintf("with its slot in [%s, %s]", r.rel(c.Lo), r.rel(c.Hi))
	}
	return "with its slot at " + r.rel(c.Lo)
}

// modeText says how c's process paced around its slot.
func (r *run) modeText(c *Call) string {
	var sw []string
	for _, n := range r.modes[c.Child] {
		if n.At < c.Lo+int64(2*time.Second) && n.At > c.Lo-int64(5*time.Second) {
			sw = append(sw, fmt.Sprintf("%s at %s", n.To, r.rel(n.At)))
		}
	}
	if len(sw) == 0 {
		return ""
	}
	return "; child " + c.Child + " switched " + strings.Join(slices.Compact(sw), ", ")
}
