// Package profile gives, in one call, the pacer policy and pacehttp options
// for a provider's published rate limits: OpenAI, Anthropic, Azure OpenAI,
// GitHub, Gemini and Shopify's GraphQL Admin API. Each constructor cites
// the rules it implements and says what it assumes (tier, model, region);
// docs/profiles.md has each profile's measured figures against a provider
// that follows the same rules.
//
// A Profile is a key, a reserve.Policy, and how a call's cost is estimated
// before it and settled after it. With pacehttp:
//
//	openai, err := profile.OpenAI(profile.OpenAILimits{Model: "gpt-4o", RPM: 5_000, TPM: 450_000}, profile.Settings{})
//	if err != nil {
//		log.Fatal(err)
//	}
//	transport, err := pacehttp.New(limiter, openai.Options())
//	if err != nil {
//		log.Fatal(err)
//	}
//	client := &http.Client{Transport: transport}
//
// and each request's context carries its estimate (WithCall). Without
// HTTP, Request gives the reserve.Request of a call's estimate,
// and Settle settles its reservation once the call reports its usage.
//
// # A minute's quota, enforced over shorter periods
//
// Providers state quotas per minute but may enforce them over shorter
// periods: OpenAI's guide says "60 requests per minute may be enforced as 1
// request per second", and Azure evaluates requests over 1 or 10 second
// windows. A policy that spends a minute's quota at once (a bucket band
// with a minute's burst, or a Window band of a minute) is refused by such a
// provider. Every profile's bucket bands therefore hold only
// Settings.Burst of each quota (DefaultBurst, 300 ms's worth): the rest
// of a second is the margin for calls sent a little late and for the
// tokens calls reserved and not yet settled use beyond their estimates.
// What it trades: a
// fleet idle for a while may not spend the minute it saved in one go, so a
// burst of work after a quiet spell is served at the quota's rate instead
// of at once, and a single call may not cost more than the burst.
//
// # Adding a provider
//
// A provider is one file (see github.go, the shortest): a constructor
// that checks its limits and returns a *Profile with its name, key,
// policy and settings and three functions: cost, a Call's cost (Input and
// Output are the call's units in the provider's own terms: a query's
// points would be Input); and, when the cost is known only from the
// answer, usage, the Usage an answer's body reports, and actual, the cost
// that Usage settles; counts keeps pacehttp's count of calls. A band the
// provider needs that reserve lacks (calls in flight) is reserve's to add
// first; a quota per calendar day is a reserve.Window with Calendar (see
// gemini.go).
package profile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// DefaultBurst is Settings.Burst's default: 300 ms of each quota. Against
// a provider that holds one second of its quota, the other 700 ms held the
// LLM demo's fleet (3 processes × 8 workers, estimates off by up to ±50%)
// with no 429; 500 ms let 2 of 603 calls be refused (docs/profiles.md).
const DefaultBurst = 300 * time.Millisecond

// ErrInvalid is wrapped by every error a constructor returns for limits
// or settings it cannot use.
var ErrInvalid = errors.New("profile: invalid limits")

// Settings tune a profile; the zero value is the default.
type Settings struct {
	// Burst is how much of each quota the fleet may send at once, as a
	// time at the quota's rate (TPM 600,000 and Burst 300 ms: 3,000
	// tokens at once). A provider that enforces its minute's quota per
	// second holds one second's worth: what Burst leaves of that second is
	// the margin for calls sent late and for the unsettled part of calls
	// in flight (see Call). A longer Burst serves a burst of work after a
	// quiet spell sooner, and lets larger calls through (a call may not
	// reserve more than the burst); a shorter one leaves more margin. The
	// margin must hold what the calls reserved and not yet settled use
	// beyond their estimates: about 4 × √(calls queued) × the typical
	// error of an estimate, in tokens; estimates that are upper bounds
	// need none of it (see Call).
	// Default (0): DefaultBurst. At most a minute.
	Burst time.Duration
}

// check checks s and returns it with its defaults.
func (s Settings) check() (Settings, error) {
	if s.Burst == 0 {
		s.Burst = DefaultBurst
	}
	if s.Burst < 0 || s.Burst > time.Minute {
		return s, fmt.Errorf("%w: Burst %v (want 0 for %v, or up to a minute)", ErrInvalid, s.Burst, DefaultBurst)
	}
	return s, nil
}

// A Call is what one call is expected to cost, as known before it is made.
type Call struct {
	// Input and Output are the call's estimated prompt and completion
	// tokens: the prompt's tokens (or its length in characters / 4) and
	// max_tokens, or any better guess. OpenAI and Azure charge their sum.
	// What a call's estimate holds beyond its use pays for the next calls
	// (Profile.Settle): estimates that are right on average use the whole
	// quota. Calls reserved but not yet settled run the fleet ahead of its
	// schedule by what they use beyond their estimates, which a provider
	// enforcing its quota per second must absorb (Settings.Burst); upper
	// bounds (the prompt and max_tokens) never run it ahead.
	Input, Output float64
	// Method is the call's HTTP method (GitHub charges points by it).
	// Default GET.
	Method string
}

// Usage is what a call used, as its answer reports it: OpenAI's
// usage.prompt_tokens and completion_tokens (or total_tokens as Input
// alone), Anthropic's input and output tokens.
type Usage struct {
	Input, Output float64
}

// A Profile is how a fleet paces its calls to one provider's quota: the
// key they share, the policy, and each call's cost. Its fields may be
// changed before use (a key of your own); its methods are safe for
// concurrent use.
type Profile struct {
	// Name is the provider: "openai", "anthropic", "azure-openai",
	// "github", "shopify".
	Name string
	// Key is the reserve key the fleet shares, one per quota: the model
	// for OpenAI and Anthropic, the deployment for Azure, the account for
	// GitHub, the store for Shopify.
	Key string
	// Policy is the quota's bands.
	Policy reserve.Policy
	// Settings are the settings the profile was built with, defaults
	// filled in.
	Settings Settings

	cost   func(Call) reserve.Cost                  // a call's estimated cost
	usage  func(body []byte, c Call) (Usage, error) // the usage an answer's body reports; nil: the cost is known before the call
	actual func(Usage) reserve.Cost                 // the cost that usage settles

	counts  bool // pacehttp paces by the provider's counts of calls (Options.IgnoreCounts off)
	exact   bool // settle the actual cost as it is, without the credit (Shopify)
	shopify bool // Options read Shopify's THROTTLED and retry POSTs (Shopify)

	maxWait time.Duration  // pacehttp's MaxWait, if not 0 (Gemini)
	daily   *time.Location // pacehttp's DailyReset, if not nil (Gemini)

	mu     sync.Mutex
	credit map[string]float64 // per unit: what calls reserved beyond their use, not given back yet
}

// Request returns the reserve.Request of call on p's key: requests 1 and
// the estimate's tokens, less what the Profile's credit pays of them (see
// Settle). An estimate that is negative, or that reserves more than a
// band's burst, is an error (raise Settings.Burst for larger calls).
func (p *Profile) Request(c Call) (reserve.Request, error) {
	if math.IsNaN(c.Input) || math.IsNaN(c.Output) || c.Input < 0 || c.Output < 0 || math.IsInf(c.Input, 0) || math.IsInf(c.Output, 0) {
		return reserve.Request{}, fmt.Errorf("profile %s: estimate %+v: want finite token counts >= 0", p.Name, c)
	}
	cost := p.cost(c)
	for _, b := range p.Policy {
		if n := cost[unitOf(b)]; b.Limit.Burst > 0 && n > float64(b.Limit.Burst) {
			need := time.Duration(math.Ceil(n/b.Limit.Rate*1000)) * time.Millisecond
			return reserve.Request{}, fmt.Errorf("profile %s: %w: the call reserves %v %s, above band %q's burst %d (Settings.Burst %v): a Settings.Burst of %v holds it",
				p.Name, reserve.ErrExceedsBurst, n, unitOf(b), b.Name, b.Limit.Burst, p.Settings.Burst, need)
		}
	}
	if p.usage != nil {
		p.mu.Lock()
		for unit, v := range cost {
			if take := min(p.credit[unit], v); take > 0 {
				cost[unit] = v - take
				p.credit[unit] -= take
			}
		}
		p.mu.Unlock()
	}
	return reserve.Request{Key: p.Key, Policy: p.Policy, Cost: cost}, nil
}

// Settle settles r, the reservation of p.Request(c), with what the call
// used. Whatever a call's estimate was above its use is this Profile's
// credit (up to each band's burst), and the next calls' reservations
// take from it first (Request); a call that used more than its estimate
// is charged the rest (reserve.Reservation.Settle). So the fleet pays for
// what its calls use, exactly, whether each estimate is high or low, and
// a high one is not lost: reserve's refund for it would go back only
// where later reservations have not built on it, and under a queue it is
// lost. A profile whose costs are known before the call (GitHub) settles
// nothing.
func (p *Profile) Settle(ctx context.Context, r *reserve.Reservation, c Call, u Usage) error {
	cost := p.settlement(r.Cost(), p.cost(c), u)
	if cost == nil {
		return nil
	}
	return r.Settle(ctx, cost)
}

// settlement returns the cost to settle a reservation of reserved, for a
// call estimated at est, that used u, and updates the credit; nil when
// nothing is to be settled. What est holds above reserved was paid from
// the credit by Request.
func (p *Profile) settlement(reserved, est reserve.Cost, u Usage) reserve.Cost {
	if p.actual == nil {
		return nil
	}
	actual := p.actual(u)
	if p.exact {
		return actual
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.credit == nil {
		p.credit = map[string]float64{}
	}
	for unit, v := range actual {
		balance := p.credit[unit] + est[unit] - v
		if balance < 0 {
			actual[unit] = reserved[unit] - balance // the rest of the use, beyond the estimate and the credit
			p.credit[unit] = 0
			continue
		}
		actual[unit] = reserved[unit]
		p.credit[unit] = min(balance, p.burst(unit))
	}
	return actual
}

// burst is the least burst of the bands charging unit.
func (p *Profile) burst(unit string) float64 {
	least := math.Inf(1)
	for _, b := range p.Policy {
		if unitOf(b) == unit && b.Limit.Burst > 0 {
			least = min(least, float64(b.Limit.Burst))
		}
	}
	return least
}

func unitOf(b reserve.Band) string {
	if b.Unit != "" {
		return b.Unit
	}
	return b.Name
}

// callKey is the context key of a request's *callState.
type callKey struct{}

// callState is a request's Call, and what its route reserved.
type callState struct {
	call     Call
	reserved atomic.Pointer[reserve.Cost]
}

// WithCall returns ctx carrying c, the estimate of the one request made
// with it: Options' Route reads it, and its Settle what the request
// reserved.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, &callState{call: c})
}

// Options returns the pacehttp options of p: each request is routed to
// p's key and policy with the cost of the Call its context carries
// (WithCall; GitHub needs none: its cost is the method's), and the usage
// its answer's body reports settles it (as Settle does). Set the other
// fields (Base, Logger, ...) on the result.
//
// For the LLM providers it sets IgnoreCounts: their bands are the
// provider's buckets already, and pacehttp's count of calls, which tells a
// bucket refilled continuously from a fixed window by the answers, cannot
// tell the buckets these providers may keep: a quota enforced per second
// holds a second's worth while the headers give the minute's limit (read
// as a window: OpenAI's profile at 24.5% of TPM with the counts), and
// Anthropic's resets in whole seconds are too coarse for buckets full
// again within a second or two (50.6% of its binding quota); Azure's
// headers give no reset, so there is nothing to count (docs/profiles.md).
// Pauses on a 429 and on a quota the headers report exhausted stay. For
// Shopify it sets ShopifyThrottle and RetryUnsafe (see Shopify); for
// Gemini, MaxWait and DailyReset (see Gemini).
func (p *Profile) Options() pacehttp.Options {
	o := pacehttp.Options{Route: p.route, IgnoreCounts: !p.counts, ShopifyThrottle: p.shopify, RetryUnsafe: p.shopify}
	if p.usage != nil {
		o.Settle = p.settle
	}
	o.MaxWait, o.DailyReset = p.maxWait, p.daily
	return o
}

func (p *Profile) route(req *http.Request) (pacehttp.Route, error) {
	st, ok := req.Context().Value(callKey{}).(*callState)
	if !ok && p.usage != nil {
		return pacehttp.Route{}, fmt.Errorf("profile %s: the request carries no estimate: make it with a context from profile.WithCall", p.Name)
	}
	var c Call
	if ok {
		c = st.call
	}
	c.Method = req.Method
	r, err := p.Request(c)
	if err != nil {
		return pacehttp.Route{}, err
	}
	if ok {
		st.reserved.Store(&r.Cost)
	}
	return pacehttp.Route{Key: r.Key, Policy: r.Policy, Cost: r.Cost}, nil
}

// maxBody is the most of an answer's body settle reads.
const maxBody = 1 << 20

func (p *Profile) settle(resp *http.Response) (reserve.Cost, error) {
	body, err := readBack(resp, maxBody)
	if err != nil {
		return nil, err
	}
	st, ok := resp.Request.Context().Value(callKey{}).(*callState)
	if !ok || st.reserved.Load() == nil {
		return nil, fmt.Errorf("profile %s: the answer's request carries no estimate routed by the profile", p.Name)
	}
	u, err := p.usage(body, st.call)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	return p.settlement(*st.reserved.Load(), p.cost(st.call), u), nil
}

// bucket returns the band of a quota of n per minute, holding burst's
// worth (at least 1 unit) and refilled at n/60 per second.
func bucket(name string, n int, burst time.Duration) reserve.Band {
	return reserve.Band{Name: name, Limit: reserve.Limit{Rate: float64(n) / 60, Burst: max(1, int(float64(n)*burst.Seconds()/60))}}
}
