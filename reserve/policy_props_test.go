package reserve_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// propCall is one reservation of testPolicyProperties: its slot, what it
// reserved and what it cost in the end, and when (in the order of the
// test's operations) it was granted and settled.
type propCall struct {
	r                *reserve.Reservation
	slot             time.Time
	reserved, actual reserve.Cost
	granted, settled int // operation numbers; settled is MaxInt until then
	canceled         bool
}

// raise is what c cost in unit above what it reserved (0 if less).
func (c *propCall) raise(unit string) float64 { return math.Max(0, c.actual[unit]-c.reserved[unit]) }

// testPolicyProperties checks each band's invariant on the actual costs of
// random policies, reservations, settles and cancels, at random (fake)
// times. In half the trials settles only lower a cost (or cancel it): then
// every bucket holds at most burst + rate x T of actual cost in any
// interval T and every window at most N, exactly. In the other half
// settles also raise costs: a raise moves the schedule later for the
// reservations granted after it, so a band may run ahead of the invariant
// only by the raises of the calls in the interval (or window) not yet
// settled when its last call was granted; the test asserts that bound.
func testPolicyProperties(t *testing.T, b backend) {
	ctx := context.Background()
	rng := newRand(t)
	var settles, raised, cancels int
	for trial := range 24 {
		raises := trial%2 == 1
		pol := randomPolicy(rng)
		clk := fakeclock.New(epoch.Add(time.Duration(rng.Int64N(int64(time.Hour)))))
		l := newLimiterFormat(t, b, clk, trialFormat(trial))
		slow := time.Millisecond
		for _, band := range pol {
			if band.Limit != (reserve.Limit{}) {
				slow = max(slow, time.Duration(float64(band.Limit.Burst)/band.Limit.Rate*float64(time.Second)))
			} else {
				slow = max(slow, band.Window.Length)
			}
		}
		// The most a unit's actual cost may be: no band's burst or N.
		most := map[string]float64{"requests": math.Inf(1), "tokens": math.Inf(1)}
		for _, band := range pol {
			v := float64(band.Limit.Burst)
			if band.Limit == (reserve.Limit{}) {
				v = band.Window.N
			}
			most[band.Unit] = math.Min(most[band.Unit], v)
		}
		var calls []*propCall
		for op := range 150 {
			if rng.IntN(4) > 0 {
				clk.Advance(time.Duration(rng.ExpFloat64() * float64(slow) * (0.1 + rng.Float64())))
			}
			where := fmt.Sprintf("trial %d op %d %+v", trial, op, pol)
			var open []*propCall // the last few not yet settled or canceled
			for _, c := range slices.Backward(calls) {
				if c.settled == math.MaxInt && !c.canceled && len(open) < 4 {
					open = append(open, c)
				}
			}
			if len(open) > 0 && rng.IntN(3) == 0 {
				c := open[rng.IntN(len(open))]
				if !raises && rng.IntN(3) == 0 {
					require.NoError(t, c.r.Cancel(ctx), where)
					c.canceled = true
					cancels++
					continue
				}
				actual := reserve.Cost{}
				for _, u := range []string{"requests", "tokens"} { // in order: the seed replays the run
					v, ok := c.reserved[u]
					if !ok {
						continue
					}
					f := rng.Float64() // lower
					if raises && rng.IntN(2) == 0 {
						f = 1 + 2*rng.Float64() // up to 3 times, within the bands
					}
					actual[u] = math.Min(math.Floor(v*f), most[u])
					if actual[u] > v {
						raised++
					}
				}
				require.NoError(t, c.r.Settle(ctx, actual), where)
				c.actual, c.settled = actual, op
				settles++
				continue
			}
			cost := randomCost(rng, pol)
			r, err := l.ReserveN(ctx, reserve.Request{Key: "props", Policy: pol, Cost: cost})
			require.NoError(t, err, where)
			calls = append(calls, &propCall{r: r, slot: r.Time(), reserved: cost, actual: cost, granted: op, settled: math.MaxInt})
		}
		var kept []*propCall
		for _, c := range calls {
			if !c.canceled {
				kept = append(kept, c)
			}
		}
		slices.SortStableFunc(kept, func(a, b *propCall) int { return a.slot.Compare(b.slot) })
		for _, band := range pol {
			where := fmt.Sprintf("trial %d (raises %v) band %+v of %+v", trial, raises, band, pol)
			if band.Limit != (reserve.Limit{}) {
				checkBucket(t, where, kept, band)
			} else {
				checkWindows(t, where, kept, band)
			}
		}
	}
	t.Logf("24 trials: %d settles (%d units raised), %d cancels; every band within its invariant on actual costs", settles, raised, cancels)
}

// checkBucket asserts that in every interval [slot i, slot j] of the calls
// (sorted by slot) the band's unit costs at most burst + rate x T, plus the
// raises of the calls in it settled after the last of them that reserved
// some of the unit was granted.
func checkBucket(t *testing.T, where string, calls []*propCall, band reserve.Band) {
	t.Helper()
	lim := band.Limit
	slack := lim.Rate*1e-6 + 1e-9*float64(lim.Burst) + 1e-9
	for i := range calls {
		sum, lastGrant := 0.0, 0
		for j := i; j < len(calls); j++ {
			sum += calls[j].actual[band.Unit]
			if calls[j].reserved[band.Unit] > 0 {
				// A call that reserved none of the unit is not held back
				// by the band: its slot says nothing of the band's schedule.
				lastGrant = max(lastGrant, calls[j].granted)
			}
			extra := 0.0
			for _, c := range calls[i : j+1] {
				if c.settled > lastGrant {
					extra += c.raise(band.Unit)
				}
			}
			span := calls[j].slot.Sub(calls[i].slot).Seconds()
			if allowed := float64(lim.Burst) + lim.Rate*span + extra + slack; sum > allowed {
				for k, c := range calls[i : j+1] {
					t.Logf("call %d: slot %v reserved %v actual %v granted at op %d settled at op %d", i+k, c.slot.Sub(epoch), c.reserved, c.actual, c.granted, c.settled)
				}
				t.Fatalf("%s: %v %s in %v (calls %d..%d), allowed %v (of which %v of raises not yet settled)",
					where, sum, band.Unit, calls[j].slot.Sub(calls[i].slot), i, j, allowed, extra)
			}
		}
	}
}

// checkWindows asserts that each of the band's windows holds at most N of
// its unit, plus the raises of its calls settled after the last of them was
// granted. Windows count in the whole µs the Limiter keeps.
func checkWindows(t *testing.T, where string, calls []*propCall, band reserve.Band) {
	t.Helper()
	length := band.Window.Length.Microseconds()
	origin := band.Window.Origin.UnixMicro()
	type window struct {
		sum, extra float64
		lastGrant  int
		calls      []*propCall
	}
	windows := map[int64]*window{}
	for _, c := range calls {
		us := c.slot.UnixMicro() // a slot on a window's start is in it
		i := (us - origin) / length
		if us-origin < 0 && (us-origin)%length != 0 {
			i--
		}
		w := windows[i]
		if w == nil {
			w = &window{}
			windows[i] = w
		}
		w.sum += c.actual[band.Unit]
		if c.reserved[band.Unit] > 0 {
			w.lastGrant = max(w.lastGrant, c.granted)
		}
		w.calls = append(w.calls, c)
	}
	for i, w := range windows {
		for _, c := range w.calls {
			if c.settled > w.lastGrant {
				w.extra += c.raise(band.Unit)
			}
		}
		if allowed := band.Window.N*(1+1e-9) + w.extra + 1e-9; w.sum > allowed {
			t.Fatalf("%s: window %d holds %v %s, allowed %v (of which %v of raises not yet settled)", where, i, w.sum, band.Unit, allowed, w.extra)
		}
	}
}

// testCancelBound is the smallest case of the policy property test's seed
// 1795717304000841572: a cancel of the latest reservation on a bucket moved
// its last event back by the cost's time, to before a live reservation's
// slot, when another band had set that slot; a cancel of an earlier
// reservation then counted too short a distance to the last event and gave
// back what the live one built on (1.5 tokens at one instant under a burst
// of 1). The state now keeps the last event before such a reservation as a
// bound ("~e", lua/core.lua).
func testCancelBound(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	tokens := reserve.Band{Name: "a", Unit: "tokens", Limit: reserve.Limit{Rate: 1, Burst: 1}}
	pol := reserve.Policy{tokens, {Name: "b", Unit: "requests", Limit: reserve.Limit{Rate: 1, Burst: 1}}}
	reserveN := func(c reserve.Cost) *propCall {
		r, err := l.ReserveN(ctx, reserve.Request{Key: "bound", Policy: pol, Cost: c})
		require.NoError(t, err)
		return &propCall{r: r, slot: r.Time(), reserved: c, actual: c, settled: math.MaxInt}
	}
	first := reserveN(reserve.Cost{"tokens": 1, "requests": 1}) // at now
	r0 := reserveN(reserve.Cost{"tokens": 1, "requests": 1})    // 1 s
	r2 := reserveN(reserve.Cost{"requests": 1, "tokens": 0.5})  // 2 s, set by b
	r3 := reserveN(reserve.Cost{"tokens": 0.5, "requests": 0})  // 2 s, set by a: the latest
	require.Equal(t, 2*time.Second, r3.slot.Sub(epoch), "the setup: a's latest slot")
	require.Equal(t, r2.slot, r3.slot)
	require.NoError(t, r3.r.Cancel(ctx)) // the latest: its last event moved back no further than r2's slot
	require.NoError(t, r0.r.Cancel(ctx)) // r2 built on it: nothing comes back
	r4 := reserveN(reserve.Cost{"tokens": 1, "requests": 0})
	kept := []*propCall{first, r2, r4}
	slices.SortStableFunc(kept, func(a, b *propCall) int { return a.slot.Compare(b.slot) })
	checkBucket(t, "cancel bound", kept, tokens)
	require.Equal(t, 2500*time.Millisecond, r4.slot.Sub(epoch), "the next slot on a: r2's half token, then a whole one")
}

// testCancelBoundLimit is testCancelBound on a Limit (one bucket, whose
// state format 2 writes without its name), where a settle set the slot:
// the settle of the latest reservation to half its cost leaves the bucket's
// zero before the last event, the next reservation is the latest but its
// slot lies less than its cost's time after the one before, and its cancel
// must not move the last event back before that one.
func testCancelBoundLimit(t *testing.T, b backend) {
	for _, format := range []int{1, 2} {
		t.Run(fmt.Sprintf("format%d", format), func(t *testing.T) { cancelBoundLimit(t, b, format) })
	}
}

// cancelBoundLimit is testCancelBoundLimit with the Limiter writing format
// (switched through admin, as `pacer format` does).
func cancelBoundLimit(t *testing.T, b backend, format int) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	prefix := redistest.Prefix(t)
	l, err := reserve.New(b.pacer(), reserve.Options{Clock: clk, ClientTime: true, KeyPrefix: prefix,
		FailClosed: true, CallTimeout: 10 * time.Second, HeartbeatInterval: 20 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	if format == 2 {
		a, err := admin.New(b.client, admin.Options{KeyPrefix: prefix})
		require.NoError(t, err)
		_, err = a.SetFormat(ctx, 2, admin.FormatOptions{Who: "test", Reason: "format 2", Force: true})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			fleet, err := a.Fleet(ctx)
			return err == nil && len(fleet) == 1 && fleet[0].Writes == "2"
		}, 30*time.Second, 10*time.Millisecond, "the Limiter writes format 2")
	}
	lim := reserve.Limit{Rate: 1, Burst: 1}
	reserveN := func() *propCall {
		r, err := l.ReserveN(ctx, reserve.Request{Key: "bound1", Policy: lim.Policy(), Cost: reserve.Permits(1)})
		require.NoError(t, err)
		return &propCall{r: r, slot: r.Time(), reserved: reserve.Permits(1), actual: reserve.Permits(1), settled: math.MaxInt}
	}
	first := reserveN() // now
	rk := reserveN()    // 1 s
	rs := reserveN()    // 2 s
	require.NoError(t, rs.r.Settle(ctx, reserve.Cost{reserve.PermitsUnit: 0.5}))
	rs.actual, rs.settled = reserve.Cost{reserve.PermitsUnit: 0.5}, 0
	r := reserveN() // 2.5 s: the latest, half a slot after rs
	require.Equal(t, 2500*time.Millisecond, r.slot.Sub(epoch), "the setup")
	require.NoError(t, r.r.Cancel(ctx))  // the last event stays at rs's slot
	require.NoError(t, rk.r.Cancel(ctx)) // rs built on it: nothing comes back
	next := reserveN()
	state, err := b.client.Get(ctx, prefix+"{bound1}").Result()
	require.NoError(t, err)
	t.Logf("state %q, slots %v %v %v %v", state, first.slot.Sub(epoch), rk.slot.Sub(epoch), rs.slot.Sub(epoch), next.slot.Sub(epoch))
	kept := []*propCall{first, rs, next}
	slices.SortStableFunc(kept, func(a, b *propCall) int { return a.slot.Compare(b.slot) })
	band := lim.Policy()[0]
	band.Unit = reserve.PermitsUnit // (a Limit's band charges it by default)
	checkBucket(t, "cancel bound, one bucket", kept, band)
}
