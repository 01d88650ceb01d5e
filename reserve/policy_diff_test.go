package reserve_test

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// randomPolicy draws a policy of one to three bands over the units
// "requests" and "tokens": buckets with rates from 0.01/s to 10,000/s, and
// windows of 1 ms to 10 s with an origin of their own.
func randomPolicy(rng *rand.Rand) reserve.Policy {
	units := []string{"requests", "tokens"}
	var pol reserve.Policy
	for i := range 1 + rng.IntN(3) {
		b := reserve.Band{Name: fmt.Sprint("b", i), Unit: units[rng.IntN(2)]}
		if rng.IntN(3) > 0 {
			b.Limit = reserve.Limit{Rate: math.Pow(10, -2+6*rng.Float64()), Burst: 1 + rng.IntN(50)}
		} else {
			b.Window = reserve.Window{
				N:      float64(1 + rng.IntN(50)),
				Length: time.Duration(math.Pow(10, 6+4*rng.Float64())), // 1 ms to 10 s
				Origin: time.Unix(0, rng.Int64N(int64(time.Hour))),
				// (the model works with the µs the Limiter keeps, see below)
			}
		}
		pol = append(pol, b)
	}
	return pol
}

// randomCost draws a cost that fits every band: integers or fractions,
// sometimes zero for one unit (never for all).
func randomCost(rng *rand.Rand, pol reserve.Policy) reserve.Cost {
	limit := map[string]float64{"requests": math.Inf(1), "tokens": math.Inf(1)}
	used := map[string]bool{}
	for _, b := range pol {
		u := b.Unit
		used[u] = true
		l := float64(b.Limit.Burst)
		if b.Limit == (reserve.Limit{}) {
			l = b.Window.N
		}
		limit[u] = math.Min(limit[u], l)
	}
	c := reserve.Cost{}
	for _, u := range []string{"requests", "tokens"} { // in order: the seed replays the run
		if !used[u] {
			continue
		}
		v := 1 + math.Floor(rng.Float64()*limit[u])
		if rng.IntN(3) == 0 {
			v = rng.Float64() * limit[u]
		}
		c[u] = math.Min(v, limit[u])
	}
	if len(c) == 2 && rng.IntN(5) == 0 {
		c["tokens"] = 0
	}
	return c
}

var debugDiff = os.Getenv("PACER_DEBUG_DIFF") != ""

// TestPolicyDifferential drives random policies on Redis and the exact
// model with the same random reservations, cancels and settles at the same
// (fake) times, and checks every delay and, every few steps, every band.
func testPolicyDifferential(t *testing.T, b backend) {
	ran, cut := runPolicyDifferential(t, b, newRand(t))
	mostRan(t, ran, cut)
	if b.routed {
		// The seeds replay the scripts' arithmetic, which a Cluster or an
		// ACL user runs as a single server does (as the differential
		// test's regression seeds).
		t.Log("the regression seeds run on a single redis-server and on miniredis")
		return
	}
	b.embedded = false // every trial of a seed: the one that failed may be its last
	for _, r := range policyRegressionSeeds {
		t.Run(strconv.FormatUint(r.seed, 10), func(t *testing.T) {
			t.Logf("PACER_SEED=%d: %s", r.seed, r.why)
			ran, cut := runPolicyDifferential(t, b, seeded(r.seed))
			mostRan(t, ran, cut)
		})
	}
}

// policyRegressionSeeds are seeds that once failed the policy differential
// test; they run in every run, on a single redis-server and on miniredis.
var policyRegressionSeeds = []struct {
	seed uint64
	why  string
}{
	// A window band holding 18.267 units gave back 0.267 and kept
	// 18.000000000000004: a reservation of 3 then went a window late.
	{2146, "window units summed in floats"},
	// The cancel of the last reservation left the last event where it was
	// when its slot, rounded up to the ns grid, lay more than half a ns
	// after it: a later settle then gave back nothing (CI, issue 23's
	// first run).
	{1795520207405888569, "the last event kept exact, its slot on the grid"},
	// Three cancels, the last reservation first: the second's slot lay
	// 0.55 ns after the last event the first had moved back to, so the
	// model (which took the last within half a ns either side) kept the
	// last event and gave back 2 tokens less at the third; adjust.lua
	// takes a slot within a ns after it, the grid's rounding (CI, beside
	// a CPU hog, on a time-seeded run).
	{1795819835195758544, "the last reservation's slot up to a ns after the last event"},
	// A cancel gave back time and a reservation of 8 took a slot in it;
	// a cancel of the last then moved the last event back 0.17 s before
	// that slot. Its settle at 7 gave back a unit in the model and none in
	// adjust.lua, which takes a slot beyond the last event for one of a
	// state Redis lost (CI, a time-seeded run).
	{1796398831596446069, "a settle beyond the last event gives nothing back"},
}

// runPolicyDifferential returns how many trials ran, and how many of them
// were cut short: their key expired on the server's clock (a loaded
// machine; see expiredOnServer).
func runPolicyDifferential(t *testing.T, b backend, rng *rand.Rand) (ran, cut int) {
	ctx := context.Background()
	const steps = 150
	trials := b.trials(20)
	var reservations, cancels, settles int
	for trial := range trials {
		ran++
		pol := randomPolicy(rng)
		clk := fakeclock.New(epoch.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
		l := newLimiterFormat(t, b, clk, trialFormat(trial))
		model := newPolicyModel(pol, clk.Now())
		// Steps: a mean of a tenth to twice the slowest refill.
		slow := time.Millisecond
		for _, band := range pol {
			if band.Limit != (reserve.Limit{}) {
				slow = max(slow, time.Duration(float64(band.Limit.Burst)/band.Limit.Rate*float64(time.Second)))
			} else {
				slow = max(slow, band.Window.Length)
			}
		}
		type pair struct {
			ours   *reserve.Reservation
			theirs *modelReservation
			cost   reserve.Cost
		}
		var live []pair
		made := 0 // reservations made in the trial: the last one's number on the key
		// gone reports whether the trial's key expired on the server's
		// clock, which the fake clock does not hold back: real seconds
		// passed between two steps, past the key's TTL (its refill time on
		// the fake clock plus 1 to 2 s). The state that follows starts
		// anew (also when a cancel wrote it again: stateLost), and the
		// model no longer describes it: the trial ends.
		gone := func(step int, why string) bool {
			if !stateLost(t, b, l.RedisKey("diff"), int64(made)) {
				return false
			}
			t.Logf("trial %d step %d: the key expired on the server's clock (%s; real time passed: a loaded machine); trial cut", trial, step, why)
			cut++
			return true
		}
	steps:
		for step := range steps {
			if rng.IntN(4) > 0 {
				clk.Advance(time.Duration(rng.ExpFloat64() * float64(slow) * (0.1 + rng.Float64())))
			}
			now := clk.Now()
			where := fmt.Sprintf("trial %d step %d %+v", trial, step, pol)
			if len(live) > 0 && rng.IntN(4) == 0 {
				i := len(live) - 1 - rng.IntN(min(len(live), 4))
				p := live[i]
				live = slices.Delete(live, i, i+1)
				if debugDiff {
					ss, _ := reserve.ServerSlot(p.ours)
					t.Logf("%s: adjust slot %v server %d (now %v = %d) cost %v", where, p.ours.Time().Sub(epoch), ss, now.Sub(epoch), now.UnixNano(), p.cost)
				}
				last := scriptLastEvents(t, b, l.RedisKey("diff"), pol)
				if rng.IntN(2) == 0 {
					require.NoError(t, p.ours.Cancel(ctx), where)
					model.adjust(p.theirs, now, nil, last)
					cancels++
				} else {
					actual := reserve.Cost{}
					for _, u := range []string{"requests", "tokens"} { // in order: the seed replays the run
						if v, ok := p.cost[u]; ok {
							actual[u] = math.Floor(v * 1.5 * rng.Float64())
						}
					}
					if debugDiff {
						t.Logf("  settle %v", actual)
					}
					require.NoError(t, p.ours.Settle(ctx, actual), where)
					model.adjust(p.theirs, now, actual, last)
					settles++
				}
			} else {
				cost := randomCost(rng, pol)
				ours, err := l.ReserveN(ctx, reserve.Request{Key: "diff", Policy: pol, Cost: cost})
				require.NoError(t, err, where)
				theirs, wait := model.reserve(now, cost, -1)
				reservations++
				made++
				if reserve.SeqOf(ours) != int64(made) {
					// A new state, numbered from 1: the key expired since
					// the trial's last look at it (as in runDifferential).
					t.Logf("trial %d step %d: reservation number %d, the trial's %d: the key expired on the server's clock; trial cut", trial, step, reserve.SeqOf(ours), made)
					cut++
					break steps
				}
				got := float64(ours.DelayFrom(now))
				if got < wait-earlyNS || got-wait > 1001 {
					raw, _ := b.client.Get(ctx, l.RedisKey("diff")).Result()
					for i := range pol {
						t.Logf("band %d model %v", i, model.value(i, now))
					}
					t.Logf("state %q", raw)
					t.Fatalf("%s: ReserveN(%v) delay = %v, model %.1fns", where, cost, ours.DelayFrom(now), wait)
				}
				if debugDiff {
					t.Logf("%s: now %v reserve %v -> %v", where, now.Sub(epoch), cost, ours.DelayFrom(now))
				}
				theirs.told = ratNS(ours.Time())
				live = append(live, pair{ours, theirs, cost})
			}
			if step%5 == 0 {
				first := reserve.Cost{}
				for _, band := range pol {
					u := band.Unit
					if u == "" {
						u = band.Name
					}
					first[u] = 0
				}
				for u := range first {
					first[u] = 1e-9
				}
				st, err := l.Peek(ctx, reserve.Request{Key: "diff", Policy: pol, Cost: first})
				require.NoError(t, err, where)
				require.Len(t, st.Bands, len(pol), where)
				for i, band := range pol {
					want := model.value(i, now)
					tol := 1e-6
					if band.Limit != (reserve.Limit{}) {
						tol = band.Limit.Rate*2e-6 + 1e-9*math.Max(1, math.Abs(want))
					}
					if math.Abs(st.Bands[i].Value-want) > tol {
						if gone(step, "a Peek of a fresh state") {
							break steps
						}
						raw, _ := b.client.Get(ctx, l.RedisKey("diff")).Result()
						t.Fatalf("%s: band %s = %v, model %v (state %q)", where, band.Name, st.Bands[i].Value, want, raw)
					}
				}
			}
		}
	}
	t.Logf("%d policy reservations, %d cancels and %d settles matched the model; %d of %d trials cut short", reservations, cancels, settles, cut, ran)
	return ran, cut
}

// scriptLastEvents returns each bucket band's last event as the key's
// state keeps it, Unix ns (nil for a window band, or all nil when the key
// has no state), for policyModel.adjust.
func scriptLastEvents(t *testing.T, b backend, key string, pol reserve.Policy) []*big.Rat {
	t.Helper()
	st, ok := readState(t, b, key)
	if !ok {
		return nil
	}
	last := make([]*big.Rat, len(pol))
	for i, band := range pol {
		for _, r := range st.Records {
			if r.Bucket && (r.Name == band.Name || len(pol) == 1 && len(st.Records) == 1) {
				last[i] = new(big.Rat).Add(big.NewRat(st.T*1000, 1), new(big.Rat).SetFloat64(r.Y))
			}
		}
	}
	return last
}
