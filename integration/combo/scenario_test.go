package combo

import (
	"reflect"
	"testing"
	"time"
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
		var faultEnd time.Duration
		for i, e := range sc.Events {
			seen[e.Kind]++
			if i > 0 && e.At < sc.Events[i-1].At {
				t.Fatalf("seed %d: events out of order at %d: %v", seed, i, sc.Events)
			}
			if e.At < warmup || e.At > sc.Length {
				t.Errorf("seed %d: %v outside the run (warm-up %v, length %v)", seed, e, warmup, sc.Length)
			}
			longest := 4 * time.Second
			if e.Kind == FaultKill {
				longest += restartBefore + restartGap // moved clear of a restart
			}
			if e.Kind.IsFault() && (e.At+e.For > sc.Length-settle || e.For < time.Second || e.For > longest) {
				t.Errorf("seed %d: %v: a fault lasts 1-4 s and ends %v before the end", seed, e, settle)
			}
			if e.Kind == FaultKill {
				for _, r := range sc.Events {
					if end := r.At + r.For; r.Kind == FaultRestart && e.At+e.For > end-restartBefore && e.At+e.For < end+restartGap {
						t.Errorf("seed %d: %v starts its process again within %v of the restart %v", seed, e, restartGap, r)
					}
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
		if seen[k] == 0 {
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
