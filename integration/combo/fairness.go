package combo

import (
	"cmp"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
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
//     above its B_k), so the low estimator alone gets local slots. For
//     the same reason a call waiting while its process's fleet view
//     leaves the members on Redis less of the burst than
//     fairHighEstimate (two of three members held: 133 tokens) is not
//     counted either (starved): the members on Redis keep to the burst
//     the held ones leave them, and a larger cost waits for the held
//     members to be back (docs/design.md, "Shares that add up"). How
//     long members are held is the runner's other figures' business
//     ("killed holder freed").
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
	// Starved: the heavy tenants' calls not counted, having waited while
	// their process's view left the members on Redis a burst under
	// fairHighEstimate (starvedSpans).
	Starved int
}

// fairness judges KeyFair and KeyCrowd.
func (r *run) fairness() ([]Violation, FairFigures) {
	fig := FairFigures{Tokens: map[string]float64{}, Calls: map[string]int{}, Crowd: map[string]int{}}
	from := r.res.Start.Add(warmup).UnixNano()
	to := r.res.End.UnixNano() - int64(livenessEnd)
	var waits []time.Duration
	starved := r.starvedSpans()
	for _, c := range r.calls[KeyFair] {
		switch {
		case c.Kind == kindFairReserve && c.Status == 200 && !c.Local && c.Lo >= from && c.Lo < to &&
			slices.ContainsFunc(starved[c.Child], func(s [2]int64) bool { return s[0] <= c.Lo && c.Grant <= s[1] }):
			fig.Starved++
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
				"tenants %q (estimating %d) and %q (estimating %d), of equal weight and backlogged, got %.0f and %.0f actual tokens (%d and %d calls; %d calls starved, not counted) in [%s, %s]: %.2f times (over %g) and %.0f apart (over %d)",
				fairLow, fairLowEstimate, fairHigh, fairHighEstimate, lo, hi, fig.Calls[fairLow], fig.Calls[fairHigh], fig.Starved, r.rel(from), r.rel(to), ratio, fairRatio, math.Abs(lo-hi), fairSlack)})
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

// Fleet views, as the Go and Python Limiters log them ("pacer: fleet
// view"): "mode=redis ... held=[0 2] held_n=3 ..." (Python: "[0, 2]").
var (
	viewMode  = regexp.MustCompile(`(?:^| )mode=(\S+)`)
	viewHeld  = regexp.MustCompile(`(?:^| )held=\[([^\]]*)\]`)
	viewHeldN = regexp.MustCompile(`(?:^| )held_n=(\d+)`)
)

// starvedSpans returns, per child, the spans in which its fleet view
// left it, on Redis, less of fairLimit's burst than fairHighEstimate: the
// burst less the held members' shares (memberBurst) of their fleet's
// size. A span runs from the view to the child's next one, or the run's
// end.
func (r *run) starvedSpans() map[string][][2]int64 {
	burst := int(fairLimit[0].Limit.Burst)
	type view struct {
		at      int64
		starved bool
	}
	views := map[string][]view{}
	for _, n := range r.res.Notes {
		if n.Type != noteMove || n.Op != "fleet" {
			continue
		}
		v := n.Attrs["view"]
		mode, held, heldN := viewMode.FindStringSubmatch(v), viewHeld.FindStringSubmatch(v), viewHeldN.FindStringSubmatch(v)
		starved := false
		if mode != nil && mode[1] == "redis" && held != nil && heldN != nil {
			size, _ := strconv.Atoi(heldN[1])
			left := burst
			for _, f := range strings.FieldsFunc(held[1], func(c rune) bool { return c == ' ' || c == ',' }) {
				if k, err := strconv.Atoi(f); err == nil {
					left -= memberBurst(burst, size, k)
				}
			}
			starved = left < fairHighEstimate
		}
		views[n.Child] = append(views[n.Child], view{n.At, starved})
	}
	out := map[string][][2]int64{}
	for child, vs := range views {
		slices.SortFunc(vs, func(a, b view) int { return cmp.Compare(a.at, b.at) })
		for i, v := range vs {
			if !v.starved {
				continue
			}
			end := r.res.End.UnixNano()
			if i+1 < len(vs) {
				end = vs[i+1].at
			}
			out[child] = append(out[child], [2]int64{v.at, end})
		}
	}
	return out
}

// memberBurst is rank k's share B_k of a burst b in a fleet of n
// (docs/design.md, "Shares that add up"): floor(b / n), plus one for the
// first b mod n ranks; 0 when n < 1 or k is not a rank; when b < n, 1 plus
// one for the first b - 1 ranks.
func memberBurst(b, n, k int) int {
	switch {
	case n < 1 || k < 0 || k >= n:
		return 0
	case b < n:
		if k < b-1 {
			return 2
		}
		return 1
	case k < b%n:
		return b/n + 1
	default:
		return b / n
	}
}
