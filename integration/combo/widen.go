package combo

import (
	"math/rand/v2"
	"time"
)

// The wider draws: what the first draws never made, each from a random
// stream of its own (seeded by the seed and a constant of its own), so that
// a seed's first timeline (generateBase) stays as it was and gains events.
// An event that would break the timeline's rules (fits) is left out.
//
//   - early: a Redis fault (restarted empty, frozen, out of memory, CLIENT
//     PAUSE) in the first seconds after the fleet started, and at times a
//     second one just after it (an outage while the processes still learn
//     the fleet from their first heartbeats);
//   - together: two or three fleet processes killed and started again
//     together, and a Redis fault in the first seconds after;
//   - unset: the operator's set, then unset, on a key, then Redis restarted
//     empty (the verdict reads the stored limits at the end: stored.go);
//   - resume: a long operator's pause (9-13 s) resumed within about a second,
//     on a key whose calls are all fair (KeyFair) or partly, and at times a
//     Redis fault just after the resume;
//   - close: a fleet process, or the whole fleet, told to Close while it
//     paces locally (in a Redis fault), and a process started in each
//     slot right after the fault;
//   - local pause: a fleet process's own Limiter.Pause made in a Redis
//     fault (on its local engine), lasting past the fault;
//   - hog: CPU hogs beside the fleet, three or four processes spinning per
//     CPU, for 2-5 s, from the fleet's start (its first calls dial Redis
//     and load the scripts) or later, with Redis healthy or not;
//   - stall: a fleet process stopped with SIGSTOP for 0.3-1.2 s;
//   - http: more pauses of KeyHTTP, the operator's and the provider's;
//   - crowd: an operator's pause of KeyCrowd (1-3 s), at times resumed
//     before its end, with Redis healthy.
func (sc *Scenario) widen() {
	stream := func(k uint64) *rand.Rand { return rand.New(rand.NewPCG(sc.Seed, k)) }
	last := sc.Length - settle
	redisKinds := []Kind{FaultRestart, FaultRestart, FaultFreeze, FaultFreeze, FaultOOM, FaultCPause}

	// unset: a set, an unset, then Redis restarted empty. The set and the
	// unset are made with Redis healthy (a few tries to find room), so
	// that they take.
	if rng := stream(0x0e5e); rng.Float64() < 0.5 {
		key := Keys[pick(rng, []int{0, 1, 2}, []int{45, 45, 10})]
		kind := OpSet
		if rng.IntN(10) < 3 {
			kind = OpShadow
		}
		stored := drawStored(rng, key)
		for range 12 {
			at := between2(rng, 300*time.Millisecond, last-6*time.Second)
			set := Event{At: at, Kind: kind, Key: key, Stored: stored}
			unset := Event{At: at + between2(rng, 700*time.Millisecond, 2*time.Second), Kind: OpUnset, Key: key}
			restart := Event{At: unset.At + between2(rng, 1500*time.Millisecond, 3*time.Second), Kind: FaultRestart,
				For: between2(rng, time.Second, 2500*time.Millisecond)}
			if sc.redisFaultIn(set.At-500*time.Millisecond, restart.At) || !sc.addFitting(set, unset, restart) {
				continue
			}
			sc.quiet = append(sc.quiet, [2]time.Duration{set.At - 500*time.Millisecond, unset.At + 500*time.Millisecond})
			break
		}
	}
	// early: Redis faults in the first seconds.
	// A few tries, each shorter, to find room before the first draws'
	// faults (from warmup on).
	if rng := stream(0xea71); rng.Float64() < 0.6 {
		second := rng.Float64() < 0.5
		kinds := []Kind{redisKinds[rng.IntN(len(redisKinds))], redisKinds[rng.IntN(len(redisKinds))]}
		longest := 3 * time.Second
		for range 6 {
			first := Event{At: between2(rng, 200*time.Millisecond, 3*time.Second), Kind: kinds[0], For: between2(rng, 800*time.Millisecond, longest)}
			then := Event{At: first.At + first.For + between2(rng, faultGap, 1500*time.Millisecond), Kind: kinds[1],
				For: between2(rng, 800*time.Millisecond, longest)}
			if second && sc.addFitting(first, then) || sc.addFitting(first) {
				break
			}
			longest = max(longest*3/4, time.Second)
		}
	}
	// together: processes killed and started again together, then a
	// Redis fault.
	if rng := stream(0x6b11); rng.Float64() < 0.3 {
		n := 2 + rng.IntN(2)
		slots := rng.Perm(procs)[:n]
		at := between2(rng, warmup, last-5500*time.Millisecond)
		d := between2(rng, 500*time.Millisecond, 2*time.Second)
		var kills []Event
		for _, s := range slots {
			kills = append(kills, Event{At: at, Kind: FaultKill, For: d, Child: s})
		}
		kind := redisKinds[rng.IntN(len(redisKinds))]
		added := false
		for range 4 {
			f := Event{At: at + d + between2(rng, 300*time.Millisecond, 2500*time.Millisecond), Kind: kind,
				For: between2(rng, 800*time.Millisecond, 3*time.Second)}
			if added = sc.addFitting(append(kills, f)...); added {
				break
			}
		}
		if !added {
			sc.addFitting(kills...)
		}
	}
	// resume: a long pause resumed soon, both with Redis healthy, at times
	// a Redis fault after the resume.
	if rng := stream(0x9a05); rng.Float64() < 0.4 {
		key := []string{KeySliding, KeyPolicy, KeyFair, KeyFair}[rng.IntN(4)]
		// Long enough that a key held to the old end stalls for seconds
		// after the fault and its recovery (stalls.go).
		d := between2(rng, 9*time.Second, 13*time.Second)
		then := rng.Float64() < 0.5
		for range 6 {
			at := between2(rng, warmup, sc.Length-9*time.Second)
			resume := Event{At: at + between2(rng, 400*time.Millisecond, 1200*time.Millisecond), Kind: OpResume, Key: key}
			if sc.redisFaultIn(at-300*time.Millisecond, resume.At+300*time.Millisecond) ||
				!sc.addFitting(Event{At: at, Kind: OpPause, Key: key, For: d}, resume) {
				continue
			}
			sc.quiet = append(sc.quiet, [2]time.Duration{at - 300*time.Millisecond, resume.At + 300*time.Millisecond})
			if then {
				sc.addFitting(Event{At: resume.At + between2(rng, 200*time.Millisecond, 800*time.Millisecond),
					Kind: redisKinds[rng.IntN(len(redisKinds))], For: between2(rng, 800*time.Millisecond, 1500*time.Millisecond)})
			}
			break
		}
	}
	// close: a process closed while it paces locally, another started in
	// its slot right after the fault (or restartGap after a restart).
	// Half the time the whole fleet closes, and a new fleet starts.
	if rng := stream(0xc105e); rng.Float64() < 0.35 {
		if f, ok := sc.pickFault(rng, 1500*time.Millisecond); ok {
			at := f.At + between2(rng, time.Second, f.For-300*time.Millisecond)
			back := f.At + f.For + between2(rng, 50*time.Millisecond, 400*time.Millisecond)
			if f.Kind == FaultRestart {
				back = f.At + f.For + restartGap + between2(rng, 0, 300*time.Millisecond)
			}
			slots := []int{rng.IntN(procs)}
			if rng.IntN(2) == 0 {
				slots = []int{0, 1, 2}
			}
			var evs []Event
			for _, s := range slots {
				evs = append(evs, Event{At: at, Kind: FaultClose, For: back - at, Child: s})
			}
			sc.addFitting(evs...)
		}
	}
	// local pause: a process's own pause made in a Redis fault, near its
	// end, lasting past it.
	if rng := stream(0x1ba05e); rng.Float64() < 0.4 {
		if f, ok := sc.pickFault(rng, 1200*time.Millisecond); ok {
			end := f.At + f.For
			at := end - between2(rng, 100*time.Millisecond, min(f.For-800*time.Millisecond, time.Second))
			key := []string{KeySliding, KeyPolicy, KeyHot, KeyFair}[rng.IntN(4)]
			sc.addFitting(Event{At: at, Kind: LocalPause, Key: key, For: end - at + between2(rng, 800*time.Millisecond, 2500*time.Millisecond),
				Child: rng.IntN(procs)})
		}
	}
	// hog: CPU hogs beside the fleet.
	if rng := stream(0xc9); rng.Float64() < 0.4 {
		d := between2(rng, 2*time.Second, 5*time.Second)
		hogs := 3
		if rng.IntN(10) < 4 {
			hogs = 4
		}
		// Four in ten from the fleet's start: its processes' first calls
		// dial Redis and load the scripts.
		at := time.Duration(0)
		if rng.IntN(10) >= 4 {
			at = between2(rng, 500*time.Millisecond, sc.Length-1500*time.Millisecond-d)
		}
		sc.addFitting(Event{At: at, Kind: FaultHog, For: d, Hogs: hogs})
	}
	// stall: a process stopped for a moment.
	if rng := stream(0x57a1); rng.Float64() < 0.25 {
		sc.addFitting(Event{At: between2(rng, warmup, last-1200*time.Millisecond), Kind: FaultStall,
			For: between2(rng, 300*time.Millisecond, 1200*time.Millisecond), Child: rng.IntN(procs)})
	}
	// http: more pauses of the key whose window the fleet learns from the
	// provider's counts.
	rng := stream(0x4775)
	for range rng.IntN(3) {
		e := Event{At: between2(rng, warmup, sc.Length-time.Second), Kind: ProviderPause, Key: KeyHTTP,
			For: between2(rng, 300*time.Millisecond, 2*time.Second)}
		if rng.IntN(2) == 0 {
			e.Kind = OpPause
		}
		sc.addFitting(e)
	}
	// crowd: a pause of KeyCrowd, whose pumps carry some of their queues
	// only, and at times its resume.
	if rng := stream(0xc90d); rng.Float64() < 0.5 {
		d := between2(rng, time.Second, 3*time.Second)
		resume := rng.Float64() < 0.5
		for range 6 {
			at := between2(rng, warmup, last-d)
			evs := []Event{{At: at, Kind: OpPause, Key: KeyCrowd, For: d}}
			if resume {
				evs = append(evs, Event{At: at + between2(rng, 300*time.Millisecond, d-200*time.Millisecond), Kind: OpResume, Key: KeyCrowd})
			}
			if sc.redisFaultIn(at-300*time.Millisecond, at+d+300*time.Millisecond) || !sc.addFitting(evs...) {
				continue
			}
			break
		}
	}
}

// pickFault draws one of sc's Redis faults that lasts at least d.
func (sc *Scenario) pickFault(rng *rand.Rand, d time.Duration) (Event, bool) {
	var fs []Event
	for _, e := range sc.Events {
		if e.Kind.IsRedisFault() && e.For >= d {
			fs = append(fs, e)
		}
	}
	if len(fs) == 0 {
		return Event{}, false
	}
	return fs[rng.IntN(len(fs))], true
}

// addFitting adds evs to sc if, with them, sc keeps the timeline's rules
// (fits) and no Redis fault falls in a span an earlier draw keeps quiet,
// and reports whether it did.
func (sc *Scenario) addFitting(evs ...Event) bool {
	for _, e := range evs {
		for _, q := range sc.quiet {
			if e.Kind.IsRedisFault() && e.At < q[1] && q[0] < e.At+e.For {
				return false
			}
		}
	}
	all := append(append([]Event(nil), sc.Events...), evs...)
	if !fits(all, sc.Length) {
		return false
	}
	sc.Events = append(sc.Events, evs...)
	return true
}

// redisFaultIn reports whether one of sc's Redis faults is in force at any
// time in [a, b].
func (sc *Scenario) redisFaultIn(a, b time.Duration) bool {
	for _, e := range sc.Events {
		if e.Kind.IsRedisFault() && e.At <= b && a <= e.At+e.For {
			return true
		}
	}
	return false
}

// The rules' margins: Redis faults are apart by faultGap; a fleet slot's
// process is left alone procGap after it started.
const (
	faultGap = 800 * time.Millisecond
	procGap  = 2 * time.Second
)

// fits reports whether events keep the timeline's rules: every fault starts
// after 200 ms and a fault of Redis or of a process is over settle before
// the end; Redis faults never overlap (one at a time, faultGap apart); no
// fleet process is started within restartGap after Redis restarted empty
// (restartBefore before it); a slot's process faults (kill, stall, close)
// are apart, procGap after its process started again; a local pause is
// made by a live process.
func fits(events []Event, length time.Duration) bool {
	last := length - settle
	var redis, restarts [][2]time.Duration
	slots := map[int][][2]time.Duration{}
	for _, e := range events {
		end := e.At + e.For
		switch {
		case e.Kind.IsFault() && e.Kind != FaultHog && e.At < 200*time.Millisecond:
			return false
		case (e.Kind.IsRedisFault() || e.Kind.IsProcFault()) && end > last:
			return false
		case e.Kind == FaultHog && end > length:
			return false
		}
		if e.Kind.IsRedisFault() {
			redis = append(redis, [2]time.Duration{e.At, end + faultGap})
			if e.Kind == FaultRestart {
				restarts = append(restarts, [2]time.Duration{end - restartBefore, end + restartGap})
			}
		}
		if e.Kind.IsProcFault() {
			busy := end
			if e.Kind != FaultStall {
				busy += procGap // started again then
			}
			slots[e.Child] = append(slots[e.Child], [2]time.Duration{e.At, busy})
		}
	}
	if overlapping(redis) {
		return false
	}
	for _, ss := range slots {
		if overlapping(ss) {
			return false
		}
	}
	for _, e := range events {
		started := e.At + e.For
		if e.Kind == FaultKill || e.Kind == FaultClose {
			for _, r := range restarts {
				if started > r[0] && started < r[1] {
					return false
				}
			}
		}
		if e.Kind == LocalPause {
			for _, s := range slots[e.Child] {
				if e.At >= s[0] && e.At < s[1] {
					return false
				}
			}
		}
	}
	return true
}

// overlapping reports whether any two of spans overlap.
func overlapping(spans [][2]time.Duration) bool {
	for i := range spans {
		for j := range i {
			if spans[i][0] < spans[j][1] && spans[j][0] < spans[i][1] {
				return true
			}
		}
	}
	return false
}
