package profile

import (
	"fmt"
	"math"

	"github.com/pacer-go/pacer/reserve"
)

// AnthropicLimits are one model's limits on an Anthropic organization, as
// the Console's limits page lists them for its usage tier.
type AnthropicLimits struct {
	// Model names the quota (a model class: the key is
	// "api.anthropic.com/" + Model).
	Model string
	// RPM, ITPM and OTPM are the model's requests, input tokens and
	// output tokens per minute.
	RPM, ITPM, OTPM int
}

// Anthropic returns the profile of one Anthropic model's quota.
//
// The rules it implements (Anthropic's rate limits page,
// docs.anthropic.com/en/api/rate-limits): each model class has requests
// per minute (RPM), input tokens per minute (ITPM) and output tokens per
// minute (OTPM), three separate limits; they use "the token bucket
// algorithm": capacity is continuously replenished up to the maximum, not
// reset at fixed intervals, and a limit may be enforced over shorter
// intervals ("a rate of 60 requests per minute may be enforced as 1
// request per second"); answers carry anthropic-ratelimit-{requests,
// input-tokens,output-tokens}-{limit,remaining,reset}, and a 429
// retry-after (pacehttp reads them). The policy is three bucket bands,
// "requests", "input-tokens" and "output-tokens", each at its quota/60
// per second holding Settings.Burst of it. A Call costs 1 request, Input
// input tokens and Output output tokens; an answer settles
// usage.input_tokens + usage.cache_creation_input_tokens (cache reads do
// not count on most models) and usage.output_tokens.
//
// It assumes the limits are those of your tier for the model, that cache
// reads do not count towards ITPM (true for the models whose limits page
// entry has no dagger), and that the output tokens' estimate is the
// call's max_tokens or better: Anthropic charges OTPM max_tokens when a
// call starts and the actual count when it ends, so an Output estimate
// below max_tokens may meet a 429 the fleet did not expect.
func Anthropic(l AnthropicLimits, s Settings) (*Profile, error) {
	s, err := s.check()
	if err != nil {
		return nil, err
	}
	if l.Model == "" || l.RPM < 1 || l.ITPM < 1 || l.OTPM < 1 {
		return nil, fmt.Errorf("%w: Anthropic %+v: want a Model, RPM, ITPM and OTPM >= 1", ErrInvalid, l)
	}
	return &Profile{
		Name: "anthropic", Key: "api.anthropic.com/" + l.Model, Settings: s,
		Policy: reserve.Policy{bucket("requests", l.RPM, s.Burst), bucket("input-tokens", l.ITPM, s.Burst), bucket("output-tokens", l.OTPM, s.Burst)},
		cost: func(c Call) reserve.Cost {
			return reserve.Cost{"requests": 1, "input-tokens": math.Ceil(c.Input), "output-tokens": math.Ceil(c.Output)}
		},
		usage: func(body []byte, _ Call) (Usage, error) { return anthropicUsage(body) },
		actual: func(u Usage) reserve.Cost {
			return reserve.Cost{"input-tokens": u.Input, "output-tokens": u.Output}
		},
	}, nil
}
