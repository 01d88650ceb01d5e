package combo

import (
	"reflect"
	"slices"
	"testing"
	"time"

	iprovider "github.com/pacer-go/pacer/internal/provider"
)

func TestGenerate(t *testing.T) {
	if !reflect.DeepEqual(Generate(7), Generate(7)) {
		t.Fatal("Generate(7) differs between two calls: a seed must replay")
	}
	if reflect.DeepEqual(Generate(7).Events, Generate(8).Events) {
		t.Error("Generate(7) and Generate(8) drew the same events")
	}
	seen := map[Kind]int{}
	for seed := uint64(1); seed <= 2000; seed++ {
		sc := Generate(seed)
		// The first draws' timeline is kept: the wider draws only add.
		base := generateBase(seed)
		for i, j := 0, 0; i < len(base.Events); i++ {
			for j < len(sc.Events) && !reflect.DeepEqual(sc.Events[j], base.Events[i]) {
				j++
			}
			if j == len(sc.Events) {
				t.Fatalf("seed %d: the first draws' %v is not in the widened timeline", seed, base.Events[i])
			}
			j++
			if e := base.Events[i]; e.At < warmup {
				t.Errorf("seed %d: first draws' %v in the warm-up (%v)", seed, e, warmup)
			}
		}
		// The slow Redis, drawn last, adds itself only: every other event
		// is as the seed drew it before.
		unslowed := generate(seed, false)
		if others := slices.DeleteFunc(slices.Clone(sc.Events), func(e Event) bool { return e.Kind == FaultSlow }); !reflect.DeepEqual(others, unslowed.Events) {
			t.Fatalf("seed %d: drawing the slow Redis changed the other events", seed)
		}
		var faultEnd time.Duration
		slotBusy := map[int]time.Duration{}
		for i, e := range sc.Events {
			seen[e.Kind]++
			if i > 0 && e.At < sc.Events[i-1].At {
				t.Fatalf("seed %d: events out of order at %d: %v", seed, i, sc.Events)
			}
			if e.At < 200*time.Millisecond && e.Kind != FaultHog || e.At > sc.Length {
				t.Errorf("seed %d: %v outside the run (from 200 ms, length %v)", seed, e, sc.Length)
			}
			shortest, longest := time.Second, 4*time.Second
			switch e.Kind {
			case FaultKill:
				shortest, longest = 500*time.Millisecond, longest+restartBefore+restartGap // moved clear of a restart
			case FaultRestart, FaultFreeze, FaultOOM, FaultCPause:
				shortest = 800 * time.Millisecond
			case FaultStall:
				// The wider draws' 0.3-1.2 s, and the seats key's holder
				// stopped 1.5-3.5 s (seats.go).
				shortest, longest = 300*time.Millisecond, 3500*time.Millisecond
			case FaultClose:
				shortest, longest = 300*time.Millisecond, 3*time.Second+restartGap+300*time.Millisecond
			case FaultHog:
				shortest, longest = 2*time.Second, 5*time.Second
			case FaultSlow:
				shortest, longest = 1200*time.Millisecond, 3500*time.Millisecond
				if !slices.Contains(slowLatencies, e.Latency) {
					t.Errorf("seed %d: %v: a latency not drawn from %v", seed, e, slowLatencies)
				}
				if e.One && (e.Child < 0 || e.Child >= sc.Procs) {
					t.Errorf("seed %d: %v: a slow link of no fleet slot", seed, e)
				}
			}
			end := sc.Length - settle
			if e.Kind == FaultHog {
				end = sc.Length
			}
			if e.Kind.IsFault() && (e.At+e.For > end || e.For < shortest || e.For > longest) {
				t.Errorf("seed %d: %v: a %s lasts %v-%v and ends by %v", seed, e, e.Kind, shortest, longest, end)
			}
			if e.Kind == FaultKill || e.Kind == FaultClose {
				for _, r := range sc.Events {
					if end := r.At + r.For; r.Kind == FaultRestart && e.At+e.For > end-restartBefore && e.At+e.For < end+restartGap {
						t.Errorf("seed %d: %v starts its process again within %v of the restart %v", seed, e, restartGap, r)
					}
				}
			}
			if e.Kind.IsProcFault() {
				if e.At < slotBusy[e.Child] {
					t.Errorf("seed %d: %v while its slot's process is stopped or not started again", seed, e)
				}
				slotBusy[e.Child] = e.At + e.For
			}
			if e.Kind == LocalPause && e.At < slotBusy[e.Child] {
				t.Errorf("seed %d: %v while its slot's process is stopped or not started again", seed, e)
			}
			if e.Kind == FaultClose || e.Kind == LocalPause {
				// Made while Redis is broken: the process paces locally.
				if !slices.ContainsFunc(sc.Events, func(f Event) bool { return f.Kind.IsRedisFault() && f.At < e.At && e.At < f.At+f.For }) {
					t.Errorf("seed %d: %v outside every Redis fault", seed, e)
				}
			}
			if e.Kind.IsRedisFault() {
				if e.At < faultEnd {
					t.Errorf("seed %d: %v overlaps the Redis fault before it", seed, e)
				}
				faultEnd = e.At + e.For
			}
			if e.Stored != nil {
				checkStored(t, seed, e)
			}
			if keyDefs[e.Key].learned && (e.Kind == OpSet || e.Kind == OpShadow || e.Kind == OpUnset) {
				t.Errorf("seed %d: %v: no limit is stored on a learned key (a stored one replaces the learned rate)", seed, e)
			}
		}
	}
	for _, k := range Kinds {
		if seen[k] == 0 && k != FaultReshard && k != FaultFailover { // drawn on a Cluster only (TestForCluster)
			t.Errorf("2000 seeds never drew %q", k)
		}
	}
}

// checkStored checks that a stored limit is at or below the key's true
// limit, band by band, and names only bands the key has.
func checkStored(t *testing.T, seed uint64, e Event) {
	t.Helper()
	truth := map[string]band{}
	for _, b := range bandsOf(keyDefs[e.Key].pol) {
		truth[b.name] = b
	}
	for _, b := range bandsOf(e.Stored) {
		tb, ok := truth[b.name]
		switch {
		case !ok || tb.unit != b.unit || tb.bucket != b.bucket:
			t.Errorf("seed %d: %v: band %q is not one of the key's", seed, e, b.name)
		case b.bucket && (b.rate > tb.rate || b.burst > tb.burst):
			t.Errorf("seed %d: %v: band %q above the true %g/s burst %g", seed, e, b.name, tb.rate, tb.burst)
		case !b.bucket && (b.n > tb.n || b.length != tb.length):
			t.Errorf("seed %d: %v: band %q above the true %g per %v", seed, e, b.name, tb.n, tb.length)
		case b.unit == unitTokens && b.burst < maxTokens:
			t.Errorf("seed %d: %v: a tokens burst under the largest estimate", seed, e)
		}
	}
}

// TestDialectDraw: the seeds draw every dialect of KeyHTTP's counts, from
// a stream of their own (the same seed, the same dialect).
func TestDialectDraw(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 100; seed++ {
		d := Generate(seed).Dialect
		if d != httpDialect(seed) {
			t.Fatalf("seed %d: dialect %q, drawn again %q", seed, d, httpDialect(seed))
		}
		seen[d]++
	}
	for _, d := range iprovider.WindowDialects {
		if seen[d] == 0 {
			t.Errorf("no seed of 1-100 draws %s: %v", d, seen)
		}
	}
	if len(seen) != len(iprovider.WindowDialects) {
		t.Errorf("dialects drawn %v, want only %v", seen, iprovider.WindowDialects)
	}
}

// TestForCluster: a seed on a Cluster plays Generate's timeline but for a
// slow Redis, each Redis fault on one of the masters (every master struck
// by some seed), with no Python process, up to two reshardings, and with
// replicas up to two failovers, clear of the Redis faults and of each
// other; and replays.
func TestForCluster(t *testing.T) {
	if !reflect.DeepEqual(Generate(7).ForCluster(3), Generate(7).ForCluster(3)) {
		t.Fatal("ForCluster(3) of seed 7 differs between two calls: a seed must replay")
	}
	struck := map[int]int{}
	for seed := uint64(1); seed <= 500; seed++ {
		sc := Generate(seed)
		cl := sc.ForCluster(3)
		if cl.Masters != 3 || cl.Python != nil {
			t.Fatalf("seed %d: masters %d, python %v", seed, cl.Masters, cl.Python)
		}
		want := slices.DeleteFunc(slices.Clone(sc.Events), func(e Event) bool { return e.Kind == FaultSlow })
		var ops []Event
		n := map[Kind]int{}
		played := slices.DeleteFunc(slices.Clone(cl.Events), func(e Event) bool {
			if e.Kind == FaultReshard || e.Kind == FaultFailover {
				ops = append(ops, e)
				n[e.Kind]++
			}
			return e.Kind == FaultReshard || e.Kind == FaultFailover
		})
		if n[FaultReshard] > 2 || n[FaultFailover] > 2 || (cl.Replicas == 0 && n[FaultFailover] > 0) || cl.Replicas > 1 {
			t.Fatalf("seed %d: %v with %d replicas", seed, n, cl.Replicas)
		}
		for i, e := range ops {
			if e.Node < 1 || e.Node > 3 || e.At < warmup || e.At > cl.Length-settle || cl.redisFaultIn(e.At-faultGap, e.At+faultGap) {
				t.Fatalf("seed %d: %v: master out of 1 to 3, outside the run's judged span, or near a Redis fault", seed, e)
			}
			if i > 0 && e.At-ops[i-1].At < time.Second {
				t.Fatalf("seed %d: %v within 1 s of %v", seed, e, ops[i-1])
			}
			if e.Kind == FaultReshard {
				struck[-e.Node]++
			} else {
				struck[10+e.Node]++
			}
		}
		if !slices.IsSortedFunc(cl.Events, func(a, b Event) int { return int(a.At - b.At) }) {
			t.Fatalf("seed %d: the Cluster's timeline is not in order", seed)
		}
		if len(played) != len(want) {
			t.Fatalf("seed %d: %d events on a Cluster, want %d (Generate's but the slow Redis)", seed, len(played), len(want))
		}
		for i, e := range played {
			node := e.Node
			e.Node = 0
			if !reflect.DeepEqual(e, want[i]) {
				t.Fatalf("seed %d: event %d is %v on a Cluster, %v in Generate's", seed, i, e, want[i])
			}
			switch {
			case e.Kind.IsRedisFault() && (node < 1 || node > 3):
				t.Fatalf("seed %d: %v strikes master %d of 3", seed, e, node)
			case !e.Kind.IsRedisFault() && node != 0:
				t.Fatalf("seed %d: %v names master %d", seed, e, node)
			}
			struck[node]++
		}
	}
	for m := 1; m <= 3; m++ {
		if struck[m] == 0 {
			t.Errorf("no seed of 500 strikes master %d", m)
		}
		if struck[-m] == 0 {
			t.Errorf("no seed of 500 reshards master %d", m)
		}
		if struck[10+m] == 0 {
			t.Errorf("no seed of 500 fails master %d over", m)
		}
	}
}
