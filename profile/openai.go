package profile

import (
	"fmt"
	"math"

	"github.com/pacer-go/pacer/reserve"
)

// OpenAILimits are one model's limits on an OpenAI organization or
// project, as the account's limits page (platform.openai.com/settings,
// "Limits") lists them for its usage tier.
type OpenAILimits struct {
	// Model names the quota: each model has its own. The key is
	// "api.openai.com/" + Model.
	Model string
	// RPM and TPM are the model's requests and tokens per minute.
	RPM, TPM int
}

// OpenAI returns the profile of one OpenAI model's quota.
//
// The rules it implements (OpenAI's rate limits guide,
// platform.openai.com/docs/guides/rate-limits): each model has a quota of
// requests per minute (RPM) and of tokens per minute (TPM), and a call
// counts against both; the limits are replenished continuously, not reset
// on the minute; they "may be enforced over shorter periods of time", as
// 60 RPM enforced as 1 request per second; every answer carries
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, and a 429
// retry-after-ms (pacehttp reads them all). The policy is two bucket
// bands, "requests" and "tokens", at RPM/60 and TPM/60 per second, each
// holding Settings.Burst of its quota (see the package doc). A Call
// costs 1 request and Input + Output tokens (the prompt and max_tokens,
// or a better estimate); an answer settles usage.total_tokens.
//
// It assumes the limits given are the model's for your tier (they differ
// by tier and model, and a shared limit of several models is one key: give
// them one Model name), that the TPM quota is charged the tokens a call
// uses (OpenAI also counts max_tokens against it at the start of a call:
// a max_tokens far above the usage spends the margin), and nothing of the
// batch API's or the daily limits of the free tier.
func OpenAI(l OpenAILimits, s Settings) (*Profile, error) {
	s, err := s.check()
	if err != nil {
		return nil, err
	}
	if l.Model == "" || l.RPM < 1 || l.TPM < 1 {
		return nil, fmt.Errorf("%w: OpenAI %+v: want a Model, RPM and TPM >= 1", ErrInvalid, l)
	}
	return &Profile{
		Name: "openai", Key: "api.openai.com/" + l.Model, Settings: s,
		Policy: reserve.Policy{bucket("requests", l.RPM, s.Burst), bucket("tokens", l.TPM, s.Burst)},
		cost: func(c Call) reserve.Cost {
			return reserve.Cost{"requests": 1, "tokens": math.Ceil(c.Input + c.Output)}
		},
		usage:  func(body []byte, _ Call) (Usage, error) { return openAIUsage(body) },
		actual: func(u Usage) reserve.Cost { return reserve.Cost{"tokens": u.Input + u.Output} },
	}, nil
}
