package combo

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// The fair key's checks (KeyFair, fairkey.go). DESIGN.md, "Fair share and
// priority": backlogged tenants share the capacity by weight, and each
// band's invariant holds on actual costs (a settle reaches every band,
// the fair rule's too).
//
//   - Shares: the two heavy tenants, of equal weight, are backlogged the
//     whole run in every process and use the same actual costs (the
//     provider draws them from the call's ID); one estimates under every
//     actual, the other over. Their actual tokens from the warm-up to the
//     end must be within fairRatio of each other, or fairSlack apart,
//     once each has fairMinCalls calls. Fair queueing on the actual costs
//     keeps them within a call or two (fairActualMax tokens each) of each
//     other in the fleet's fair queue on Redis; shares counted on the
//     estimates give the low estimator about fairHighEstimate /
//     fairLowEstimate = 4 times the other's calls. The shares count the
//     slots Redis granted only: while a process paces locally, a call
//     above its share of the bucket's burst (fairHighEstimate, over 400 /
//     3) waits for Redis (core.lua: a member's share cannot take a cost
//     above its B_k), so the low estimator alone gets local slots.
//   - Refusals: a light tenant's call with a deadline of its own is a
//     newcomer, whose turn comes within two slot intervals behind any
//     backlog (docs/fair.md): about 0.3 s here, well under the shortest
//     deadline (1 s). A refusal is a violation unless something could
//     rightly hold it back: a pause of the key in force (learnedCuts), a
//     Redis fault (and faultRecovery after it), local pacing of its
//     process, CPU hogs or a stop of its process (and hogRecovery after),
//     from fairSettle before the call to its deadline.
//   - The crowd (KeyCrowd): crowdTenants tenants of equal weight, each
//     backlogged in every process, whose queues one call of the fair
//     script cannot all carry. Their calls the provider served from the
//     warm-up to the end must be within fairRatio of each other, or
//     crowdSlack apart, once the most served has fairMinCalls: a pump
//     that left a queue out of its calls for long would hold its tenant
//     back (the fleet's queue on Redis would not: a tenant not waiting
//     holds nobody back).
const (
	crowdSlack   = 2 * procs
	fairRatio    = 1.5
	fairSlack    = 2 * procs * fairActualMax
	fairMinCalls = 10
	fairSettle   = time.Second
)

// FairFigures are what the verdict measured on KeyFair.
type FairFigures struct {
	Tokens map[string]float64 // actual tokens served per heavy tenant
	Calls  map[string]int     // and calls
	// LightWaits: the light tenants' waits (call to return) of calls that
	// succeeded, p50 and max, and their refusals.
	LightP50, LightMax time.Duration
	LightRefused       int
	Crowd              map[string]int // KeyCrowd: calls served per tenant
}

// fairness judges KeyFair and KeyCrowd.
func (r *run) fairness() ([]Violation, FairFigures) {
	fig := FairFigures{Tokens: map[string]float64{}, Calls: map[string]int{}, Crowd: map[string]int{}}
	from := r.res.Start.Add(warmup).UnixNano()
	to := r.res.End.UnixNano() - int64(livenessEnd)
	var waits []time.Duration
	for _, c := range r.calls[KeyFair] {
		switch {
		case c.Kind == kindFairReserve && c.Status == 200 && !c.Local && c.Lo >= from && c.Lo < to:
			fig.Tokens[c.Tenant] += c.Actual
			fig.Calls[c.Tenant]++
		case c.Kind == kindFairWait || c.Kind == kindFairDeadline:
			waits = append(waits, time.Duration(c.Fire-c.Grant))
		}
	}
	if len(waits) > 0 {
		slices.Sort(waits)
		fig.LightP50, fig.LightMax = waits[len(waits)/2], waits[len(waits)-1]
	}
	var out []Violation
	lo, hi := fig.Tokens[fairLow], fig.Tokens[fairHigh]
	if fig.Calls[fairLow] >= fairMinCalls && fig.Calls[fairHigh] >= fairMinCalls {
		if ratio := math.Max(lo, hi) / math.Min(lo, hi); ratio > fairRatio && math.Abs(lo-hi) > fairSlack {
			out = append(out, Violation{Kind: VFair, Key: KeyFair, At: from, Msg: fmt.Sprintf(
				"tenants %q (estimating %d) and %q (estimating %d), of equal weight and backlogged, got %.0f and %.0f actual tokens (%d and %d calls) in [%s, %s]: %.2f times (over %g) and %.0f apart (over %d)",
				fairLow, fairLowEstimate, fairHigh, fairHighEstimate, lo, hi, fig.Calls[fairLow], fig.Calls[fairHigh], r.rel(from), r.rel(to), ratio, fairRatio, math.Abs(lo-hi), fairSlack)})
		}
	}
	for i := range crowdTenants {
		fig.Crowd["c"+strconv.Itoa(i)] = 0
	}
	for _, c := range r.calls[KeyCrowd] {
		if c.Kind == kindCrowd && c.Status == 200 && c.Fire >= from && c.Fire < to {
			fig.Crowd[c.Tenant]++
		}
	}
	least, most := math.MaxInt, 0
	for _, n := range fig.Crowd {
		least, most = min(least, n), max(most, n)
	}
	if most >= fairMinCalls && float64(most) > fairRatio*float64(least) && most-least > crowdSlack {
		out = append(out, Violation{Kind: VFair, Key: KeyCrowd, At: from, Msg: fmt.Sprintf(
			"the crowd's tenants, of equal weight and backlogged, got %d to %d calls in [%s, %s] (%s): over %g times and %d apart",
			least, most, r.rel(from), r.rel(to), fmtInts(fig.Crowd), fairRatio, crowdSlack)})
	}
	cuts := r.learnedCuts(KeyFair)
	for _, n := range r.res.Notes {
		if n.Type != noteRefused || n.Key != KeyFair {
			continue
		}
		fig.LightRefused++
		a, b := n.At-int64(fairSettle), n.At+n.D
		if b > r.res.End.UnixNano() {
			continue // the run's end refused it (the child counts those apart)
		}
		held := slices.ContainsFunc(cuts, func(c [2]int64) bool { return c[0] <= b && a <= c[1] })
		if held || r.faultDuring(a-int64(faultRecovery), b) || r.localDuring(n.Child, a, b) || r.loadedDuring(n.Child, a, b) {
			continue
		}
		wait, _ := strconv.ParseInt(n.Attrs["wait_ns"], 10, 64)
		out = append(out, Violation{Kind: VFair, Key: KeyFair, At: n.At, Msg: fmt.Sprintf(
			"child %s's light tenant %s, a newcomer, was refused at %s for its deadline of %s (band %q, a wait of %s) asked at %s, with no pause, fault, local pacing or load in the way",
			n.Child, n.Attrs["tenant"], r.rel(n.End), ms(n.D), n.Op, ms(wait), r.rel(n.At))})
	}
	return out, fig
}
