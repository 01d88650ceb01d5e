// Package profile gives, in one call, the pacer policy and pacehttp options
// for a provider's published rate limits: OpenAI, Anthropic, Azure OpenAI
// and GitHub. Each constructor cites the rules it implements and says what
// it assumes (tier, model, region); docs/profiles.md has each profile's
// measured figures against a provider that follows the same rules.
//
// A Profile is a key, a reserve.Policy, and how a call's cost is estimated
// before it and settled after it. With pacehttp:
//
//	p, err := profile.OpenAI(profile.OpenAILimits{Model: "gpt-4o", RPM: 500, TPM: 30_000}, profile.Settings{Error: 0.5})
//	transport, err := pacehttp.New(limiter, p.Options())
//	req = req.WithContext(profile.WithCall(ctx, profile.Call{Input: prompt, Output: maxTokens}))
//
// Without HTTP, Request gives the reserve.Request of a call's estimate
// and Actual the cost to settle once the call reports its usage.
//
// # A minute's quota, enforced over shorter periods
//
// Providers state quotas per minute but may enforce them over shorter
// periods: OpenAI's guide says "60 requests per minute may be enforced as 1
// request per second", and Azure evaluates requests over 1 or 10 second
// windows. A policy that spends a minute's quota at once (a bucket band
// with a minute's burst, or a Window band of a minute) is refused by such a
// provider. Every profile's bucket bands therefore hold only
// Settings.Burst of each quota (DefaultBurst, half a second's worth): the
// rest of a second is the margin for calls sent a little late and for the
// tokens calls in flight use beyond what they reserved. What it trades: a
// fleet idle for a while may not spend the minute it saved in one go, so a
// burst of work after a quiet spell is served at the quota's rate instead
// of at once, and a single call may not cost more than the burst.
//
// # Adding a provider
//
// A provider is one file: a constructor that checks its limits and returns
// a *Profile built by newProfile with its name, key, policy, the cost of a
// Call (cost) and, when the cost is known only from the answer, the Usage
// an answer reports (usage) and the cost it settles (actual).
package profile

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
)

// DefaultBurst is Settings.Burst's default: half a second of each quota.
const DefaultBurst = 500 * time.Millisecond

// ErrInvalid is wrapped by every error a constructor returns for limits
// or settings it cannot use.
var ErrInvalid = errors.New("profile: invalid limits")

// Settings tune a profile; the zero value is the default.
type Settings struct {
	// Burst is how much of each quota the fleet may send at once, as a
	// time at the quota's rate (TPM 600,000 and Burst 500 ms: 5,000
	// tokens at once). A provider that enforces its minute's quota per
	// second holds one second's worth: what Burst leaves of that second is
	// the margin for calls sent late and for the unsettled part of calls
	// in flight (see Error). A longer Burst serves a burst of work after a
	// quiet spell sooner, and lets larger calls through (a call may not
	// reserve more than the burst); a shorter one leaves more margin.
	// Default (0): DefaultBurst. At most a minute.
	Burst time.Duration
	// Error is how far a Call's estimate may be off the call's actual
	// cost, as a fraction below 1: the actual lies between
	// estimate/(1+Error) and estimate/(1-Error). Request reserves the
	// least, estimate/(1+Error), and settling the actual adds the rest
	// once the call reports it: the fleet pays for every token, a moment
	// after the call, and a band runs ahead of its rate by at most the
	// unsettled rest of the calls in flight. Default (0): estimates are
	// exact, and the estimate itself is reserved.
	Error float64
}

// check checks s and returns it with its defaults.
func (s Settings) check() (Settings, error) {
	if s.Burst == 0 {
		s.Burst = DefaultBurst
	}
	if s.Burst < 0 || s.Burst > time.Minute {
		return s, fmt.Errorf("%w: Burst %v (want 0 for %v, or up to a minute)", ErrInvalid, s.Burst, DefaultBurst)
	}
	if math.IsNaN(s.Error) || s.Error < 0 || s.Error >= 1 {
		return s, fmt.Errorf("%w: Error %v (want 0 <= Error < 1)", ErrInvalid, s.Error)
	}
	return s, nil
}

// A Call is what one call is expected to cost, as known before it is made.
type Call struct {
	// Input and Output are the call's estimated prompt and completion
	// tokens: the prompt's tokens (or its length in characters / 4) and
	// max_tokens, or any better guess. OpenAI and Azure charge their sum.
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
	// "github".
	Name string
	// Key is the reserve key the fleet shares, one per quota: the model
	// for OpenAI and Anthropic, the deployment for Azure, the account for
	// GitHub.
	Key string
	// Policy is the quota's bands.
	Policy reserve.Policy
	// Settings are the settings the profile was built with, defaults
	// filled in.
	Settings Settings

	cost   func(c Call, error float64) reserve.Cost // what a call reserves, given Settings.Error
	usage  func(body []byte, c Call) (Usage, error) // the usage an answer's body reports; nil: the cost is known before the call
	actual func(Usage) reserve.Cost                 // the cost that usage settles
}

// Request returns the reserve.Request of call on p's key: requests 1 and
// the least the estimate's tokens may be (see Settings.Error). An
// estimate that is negative, or reserves more than a band's burst, is an
// error (raise Settings.Burst for larger calls).
func (p *Profile) Request(c Call) (reserve.Request, error) {
	if math.IsNaN(c.Input) || math.IsNaN(c.Output) || c.Input < 0 || c.Output < 0 || math.IsInf(c.Input, 0) || math.IsInf(c.Output, 0) {
		return reserve.Request{}, fmt.Errorf("profile %s: estimate %+v: want finite token counts >= 0", p.Name, c)
	}
	cost := p.cost(c, p.Settings.Error)
	for _, b := range p.Policy {
		if b.Limit.Burst > 0 && cost[unitOf(b)] > float64(b.Limit.Burst) {
			return reserve.Request{}, fmt.Errorf("profile %s: %w: the call reserves %v %s, above band %q's burst %d (Settings.Burst %v): raise Settings.Burst for larger calls",
				p.Name, reserve.ErrExceedsBurst, cost[unitOf(b)], unitOf(b), b.Name, b.Limit.Burst, p.Settings.Burst)
		}
	}
	return reserve.Request{Key: p.Key, Policy: p.Policy, Cost: cost}, nil
}

// Actual returns the cost to settle a call's reservation with
// (reserve.Reservation.Settle) once its answer reports u. It is nil for a
// profile whose costs are known before the call (GitHub).
func (p *Profile) Actual(u Usage) reserve.Cost {
	if p.actual == nil {
		return nil
	}
	return p.actual(u)
}

func unitOf(b reserve.Band) string {
	if b.Unit != "" {
		return b.Unit
	}
	return b.Name
}

// callKey is the context key of a request's Call.
type callKey struct{}

// WithCall returns ctx carrying c, the estimate of the request made with
// it: Options' Route reads it.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// Options returns the pacehttp options of p: each request is routed to
// p's key and policy with the cost of the Call its context carries
// (WithCall; GitHub needs none: its cost is the method's), and the usage
// its answer's body reports settles it. Set the other fields (Base,
// Logger, ...) on the result.
func (p *Profile) Options() pacehttp.Options {
	o := pacehttp.Options{Route: p.route}
	if p.usage != nil {
		o.Settle = p.settle
	}
	return o
}

func (p *Profile) route(req *http.Request) (pacehttp.Route, error) {
	c, ok := req.Context().Value(callKey{}).(Call)
	if !ok {
		if p.usage != nil {
			return pacehttp.Route{}, fmt.Errorf("profile %s: the request carries no estimate: make it with a context from profile.WithCall", p.Name)
		}
	}
	c.Method = req.Method
	r, err := p.Request(c)
	if err != nil {
		return pacehttp.Route{}, err
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
	c, _ := resp.Request.Context().Value(callKey{}).(Call)
	u, err := p.usage(body, c)
	if err != nil {
		return nil, fmt.Errorf("profile %s: %w", p.Name, err)
	}
	return p.actual(u), nil
}

// least is the least an estimate est may be off by e: est/(1+e), in whole
// units.
func least(est, e float64) float64 { return math.Floor(est / (1 + e)) }

// bucket returns the band of a quota of n per minute, holding burst's
// worth (at least 1 unit) and refilled at n/60 per second.
func bucket(name string, n int, burst time.Duration) reserve.Band {
	return reserve.Band{Name: name, Limit: reserve.Limit{Rate: float64(n) / 60, Burst: max(1, int(float64(n)*burst.Seconds()/60))}}
}
