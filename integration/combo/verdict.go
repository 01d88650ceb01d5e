package combo

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// The kinds of violations.
const (
	VWindow     = "window"     // an interval over a band's limit, on the slots
	VPause      = "pause"      // a call whose slot lies inside a pause it was told of
	VThroughput = "throughput" // less than minFraction of what the limit allowed
	VError      = "error"      // an error from the limiter, or a process that failed
	VEarly      = "early"      // a call fired more than MaxEarly before its slot
	VHarness    = "harness"    // the runner could not do what the scenario says
	// A learned key's (learned.go):
	VTwice    = "twice"    // a request the provider saw twice, or one pacehttp had failed before sending it
	VRate     = "rate"     // a learned rate outside the Config's [Min, Max]
	VLiveness = "liveness" // a stretch clear of faults and pauses with no call accepted
	// The wider judgments':
	VUnavailable = "unavailable" // an outage was an error to a caller who could wait (outage.go)
	VSwitch      = "switch"      // a switch to local pacing with Redis healthy (outage.go)
	VSend        = "send"        // calls through pacehttp sent beyond the rate the fleet is told of (sends.go)
	VStored      = "stored"      // a stored limit that is not the operator's last change (stored.go)
	VFair        = "fair"        // tenants of equal weight far from equal shares, or a fair refusal with nothing in the way (fairness.go)
	VStall       = "stall"       // a throughput key with no call for stallSpan, clear of pauses, faults and load (stalls.go)
	VResume      = "resume"      // a call held to the end of a pause the operator had resumed (resume.go)
)

// VKinds lists the kinds of violations in report order.
var VKinds = []string{VWindow, VPause, VThroughput, VError, VEarly, VHarness, VTwice, VRate, VLiveness,
	VUnavailable, VSwitch, VSend, VStored, VFair, VStall, VResume, VSeats}

// Violation is one breach of a promise, At (Unix ns) in the run.
type Violation struct {
	Kind string
	Key  string
	At   int64
	Msg  string
}

// Verdict is what Judge found.
type Verdict struct {
	Violations []Violation
	Figures    Figures
}

// Failed reports whether the run broke any promise.
func (v Verdict) Failed() bool { return len(v.Violations) > 0 }

// Count returns the violations of each kind.
func (v Verdict) Count() map[string]int {
	n := map[string]int{}
	for _, x := range v.Violations {
		n[x.Kind]++
	}
	return n
}

// Figures are what the verdict measured but does not judge.
type Figures struct {
	Calls      map[string]int     // calls the provider saw, per key
	Local      int                // calls on slots the local fallback granted
	Refused    map[string]int     // the provider's 429s by reason: limit, pause, announced
	Throughput map[string]float64 // per judged key: the fraction of the limit used (absent: too little time to judge)
	Used       map[string]string  // per judged key: each band's units used and allowed, or why not judged
	// ArrivalOver counts the intervals over a band's limit judged on the
	// calls' arrival at the provider, with arrivalEps of jitter allowed.
	ArrivalOver int
	// Unjudged counts calls inside a pause that their process could not
	// have learned (it paced locally, or Redis lost the pause).
	Unjudged  int
	Switches  int // to local pacing, all processes
	NotExact  int // reservations whose server slot could not be read (Time stood in)
	MostEarly time.Duration
	// Learned: per learned key, what learned.go measured.
	Learned map[string]Learned
	// LateP50, LateMost: the median and longest time from a slot to its
	// send through pacehttp (sends.go); StoredUnjudged: the reads of a
	// stored limit that could not be judged (stored.go); Gaps: per
	// throughput key, the longest time judged without a call (stalls.go);
	// Fair: the fair key's shares and light waits (fairness.go).
	LateP50, LateMost time.Duration
	StoredUnjudged    int
	Gaps              map[string]time.Duration
	Fair              FairFigures
	// Seats: KeySeats's (seatjudge.go).
	Seats SeatFigures
}

// The verdict's tolerances.
const (
	// slotEps is how far apart the slots of Redis (its TIME, in µs) and of
	// the local fallback (this host's clock) may be placed for the same
	// instant: the window bound is burst + rate × (T + slotEps).
	slotEps = 200 * time.Microsecond
	// arrivalEps is the jitter allowed when the same bound is judged on
	// arrivals, reported and not judged.
	arrivalEps = 20 * time.Millisecond
	// pauseLead: a sleeper checks for pauses PreciseWake (2 ms) and a
	// round trip (on loopback, well under 1 ms) before its slot, through
	// a read shared for 500 µs; a slot within pauseLead of the pause's
	// making may have been checked before it.
	pauseLead = 10 * time.Millisecond
	// minFraction of what the limit allowed must be used where the demand
	// is above it (outside pauses, and faults and faultRecovery after them).
	minFraction   = 0.4
	faultRecovery = 2 * time.Second
	pauseRecovery = 200 * time.Millisecond
)

// run is a Result indexed for judging.
type run struct {
	res      *Result
	calls    map[string][]Call // by key, fired (every status)
	settles  map[string]Note   // settle notes by call ID
	modes    map[string][]Note // switch notes by child, in time order
	faults   []Action          // Redis faults, mended
	restarts []int64           // when Redis was stopped to come back empty
	stops    []int64           // when those stops returned (the data gone), in the same order
	procs    map[string]int    // child ID -> index, for bitmasks
}

// Judge judges a run.
func Judge(res *Result) Verdict {
	r := index(res)
	var v Verdict
	v.Figures = Figures{Calls: map[string]int{}, Refused: map[string]int{}, Throughput: map[string]float64{}, Used: map[string]string{},
		Learned: map[string]Learned{}, Gaps: map[string]time.Duration{}}
	for _, c := range res.Calls {
		v.Figures.Calls[c.Key]++
		if c.Local && c.Kind != "wait" && c.Kind != "waitp" {
			v.Figures.Local++
		}
		if c.Why != "" {
			v.Figures.Refused[c.Key+"/"+c.Why]++
		}
		if !c.Exact && c.Slot != 0 {
			v.Figures.NotExact++
		}
	}
	for _, n := range res.Notes {
		if n.Type == noteSwitch && n.To == "local" {
			v.Figures.Switches++
		}
	}
	for _, key := range Keys {
		def := keyDefs[key]
		for _, b := range bandsOf(def.fleetPol()) {
			v.Violations = append(v.Violations, r.windows(key, b)...)
			v.Figures.ArrivalOver += r.arrivalOver(key, b)
		}
		v.Violations = append(v.Violations, r.unpublished(key)...)
		pv, unjudged := r.pauses(key)
		v.Violations = append(v.Violations, pv...)
		v.Figures.Unjudged += unjudged
		if def.learned {
			lv, fig := r.learned(key)
			v.Violations = append(v.Violations, lv...)
			v.Figures.Learned[key] = fig
		}
		if def.throughput {
			f, used, viol := r.throughput(key)
			if !math.IsNaN(f) {
				v.Figures.Throughput[key] = f
			}
			v.Figures.Used[key] = used
			if viol != nil {
				v.Violations = append(v.Violations, *viol)
			}
			sv, gap := r.stalls(key)
			v.Violations = append(v.Violations, sv...)
			v.Figures.Gaps[key] = gap
		}
	}
	v.Violations = append(v.Violations, r.errors()...)
	v.Violations = append(v.Violations, r.longWaits()...)
	v.Violations = append(v.Violations, r.resumed()...)
	v.Violations = append(v.Violations, r.unavailable()...)
	v.Violations = append(v.Violations, r.switches()...)
	sv, p50, most := r.sends()
	v.Violations = append(v.Violations, sv...)
	v.Figures.LateP50, v.Figures.LateMost = p50, most
	stv, unjudged := r.stored()
	v.Violations = append(v.Violations, stv...)
	v.Figures.StoredUnjudged = unjudged
	fv, fair := r.fairness()
	v.Violations = append(v.Violations, fv...)
	v.Figures.Fair = fair
	sv2, seats := r.seats()
	v.Violations = append(v.Violations, sv2...)
	v.Figures.Seats = seats
	early, most := r.early()
	v.Violations = append(v.Violations, early...)
	v.Figures.MostEarly = most
	slices.SortStableFunc(v.Violations, func(a, b Violation) int { return int(a.At - b.At) })
	return v
}

func index(res *Result) *run {
	r := &run{res: res, calls: map[string][]Call{}, settles: map[string]Note{}, modes: map[string][]Note{}, procs: map[string]int{}}
	for _, c := range res.Calls {
		r.calls[c.Key] = append(r.calls[c.Key], c)
		if _, ok := r.procs[c.Child]; !ok {
			r.procs[c.Child] = len(r.procs)
		}
	}
	for _, n := range res.Notes {
		switch n.Type {
		case noteSettle:
			r.settles[n.ID] = n
		case noteSwitch:
			r.modes[n.Child] = append(r.modes[n.Child], n)
		}
	}
	for _, m := range r.modes {
		sort.SliceStable(m, func(i, j int) bool { return m[i].At < m[j].At })
	}
	for _, a := range res.Actions {
		if a.Kind.IsRedisFault() {
			r.faults = append(r.faults, a)
			if a.Kind == FaultRestart {
				r.restarts = append(r.restarts, a.At)
				r.stops = append(r.stops, cmp.Or(a.Stopped, a.At))
			}
		}
	}
	return r
}

// localDuring reports whether child paced locally at any time in [a, b].
func (r *run) localDuring(child string, a, b int64) bool {
	local := false // on Redis from its start
	for _, n := range r.modes[child] {
		if n.At > b {
			break
		}
		if n.At <= a {
			local = n.To == "local" // its mode at a
		} else if n.To == "local" {
			return true
		}
	}
	return local
}

// faultDuring reports whether a Redis fault was in force at any time in
// [a, b].
func (r *run) faultDuring(a, b int64) bool {
	for _, f := range r.faults {
		if f.At <= b && a <= f.End {
			return true
		}
	}
	return false
}

// restartBetween reports whether Redis was restarted empty in (a, b].
func (r *run) restartBetween(a, b int64) bool {
	for _, t := range r.restarts {
		if a < t && t <= b {
			return true
		}
	}
	return false
}

// unpublished judges the bands of key's true limit that the fleet is not
// told of (KeyHTTP's window, which pacehttp learns from the provider's
// counts) on the provider's view: no call refused over such a band, after
// the warm-up (the first answers bring the first count), outside Redis
// faults and faultRecovery after them, and unless a process paced locally
// during the band's window before the refusal. The count is kept in Redis:
// a process that cannot reach it paces by what it was told (docs/http.md),
// and a restart loses it.
func (r *run) unpublished(key string) []Violation {
	def := keyDefs[key]
	if def.fleet == nil {
		return nil
	}
	told := map[string]bool{}
	for _, b := range def.fleet {
		told[b.Name] = true
	}
	length := map[string]int64{}
	for _, b := range bandsOf(def.pol) {
		length[b.name] = int64(b.length)
	}
	from := r.res.Start.Add(warmup).UnixNano()
	var out []Violation
	for _, c := range r.calls[key] {
		if c.Why != "limit" || told[c.Band] || c.Arrive < from || r.faultDuring(c.Arrive-int64(faultRecovery), c.Arrive) ||
			r.anyLocal(c.Arrive-length[c.Band], c.Arrive) {
			continue
		}
		out = append(out, Violation{Kind: VWindow, Key: key, At: c.Arrive, Msg: fmt.Sprintf(
			"the provider refused call %s (child %s) over band %s, which the fleet learns from its counts only", c.ID, c.Child, c.Band)})
	}
	return out
}

// anyLocal reports whether any process paced locally at any time in [a, b].
func (r *run) anyLocal(a, b int64) bool {
	for child := range r.modes {
		if r.localDuring(child, a, b) {
			return true
		}
	}
	return false
}

// errors turns the processes' error notes, their failed exits and the
// runner's unexpected failures into violations.
func (r *run) errors() []Violation {
	var out []Violation
	for _, n := range r.res.Notes {
		if n.Type == noteErr {
			out = append(out, Violation{Kind: VError, Key: n.Key, At: n.At, Msg: fmt.Sprintf("child %s %s: %s", n.Child, n.Op, n.Err)})
		}
	}
	for id, e := range r.res.Exits {
		out = append(out, Violation{Kind: VError, At: r.res.End.UnixNano(), Msg: fmt.Sprintf("child %s exited: %s", id, e)})
	}
	for _, a := range r.res.Actions {
		switch {
		case a.Err == "" || a.Expected || (!a.Kind.IsFault() && r.faultDuring(a.At, a.End)):
			// What the operator meets while Redis is broken.
		case a.Kind.IsFault():
			out = append(out, Violation{Kind: VHarness, At: a.At, Msg: fmt.Sprintf("%s: %s", a.Kind, a.Err)})
		default:
			out = append(out, Violation{Kind: VError, Key: a.Key, At: a.At, Msg: fmt.Sprintf("operator %s: %s", a.Kind, a.Err)})
		}
	}
	return out
}

// early finds calls that fired more than MaxEarly before their slot.
func (r *run) early() ([]Violation, time.Duration) {
	var out []Violation
	var most time.Duration
	for _, c := range r.res.Calls {
		if c.Slot == 0 || !c.Exact {
			continue
		}
		e := time.Duration(c.Slot - c.Fire)
		most = max(most, e)
		if e > reserve.MaxEarly {
			out = append(out, Violation{Kind: VEarly, Key: c.Key, At: c.Fire,
				Msg: fmt.Sprintf("call %s (%s, %s) fired %v before its slot", c.ID, c.Kind, origin(c), e)})
		}
	}
	return out, most
}

// origin says where a call's slot came from.
func origin(c Call) string {
	switch {
	case c.Kind == "wait" || c.Kind == "waitp":
		return "wait"
	case c.Local:
		return "local"
	}
	return "redis"
}

// ms formats a duration in ms with one decimal.
func ms(ns int64) string { return fmt.Sprintf("%.1fms", float64(ns)/1e6) }
