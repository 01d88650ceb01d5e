package profile

import (
	"fmt"
	"math"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// AzureLimits are one Azure OpenAI deployment's limits.
type AzureLimits struct {
	// Deployment names the quota: the key is "azure-openai/" +
	// Deployment (give the resource too if deployments of several
	// resources share a name).
	Deployment string
	// TPM is the deployment's tokens per minute, as assigned to it in
	// the portal. Its requests per minute are derived: 6 per 1,000 TPM.
	TPM int
	// Period is how often Azure evaluates the requests: "typically 1 or
	// 10 seconds". Default time.Second, the stricter: a fleet within every
	// second's share is within every 10 seconds' too.
	Period time.Duration
}

// AzureRPM returns the requests per minute Azure OpenAI derives from a
// deployment's tokens per minute: 6 RPM per 1,000 TPM.
func AzureRPM(tpm int) int { return tpm * 6 / 1000 }

// AzureOpenAI returns the profile of one Azure OpenAI deployment.
//
// The rules it implements (Microsoft Learn, "Azure OpenAI in Azure AI
// Foundry Models quotas and limits" and "Manage Azure OpenAI quota"): a
// deployment has tokens per minute (TPM) and requests per minute derived
// from them (6 RPM per 1,000 TPM); a call's "estimated max processed-token
// count" (its prompt tokens and its max_tokens, known when it arrives) is
// added to a running count "that is reset each minute", and a 429 comes
// once the count reaches TPM within the minute; requests are evaluated
// "over a small period of time, typically 1 or 10 seconds", and a 429
// comes when a period gets more than RPM's share of it (600 RPM checked
// each second: more than 10 requests in a second); a 429 carries
// retry-after-ms (pacehttp reads it).
//
// Neither window's start is published, so the policy holds in any
// window wherever it falls: "requests" a bucket of burst 1 at (n-1) per
// Period, n being RPM's share of a Period (reserve.Sliding: never more
// than n in any Period); "tokens" a bucket holding Settings.Burst of TPM,
// B tokens, at (TPM-B)/60 per second, so that no minute gets more than TPM
// (B + 60 s at that rate). A Call costs 1 request and Input + Output
// tokens, Output being the call's max_tokens (what Azure counts); the
// answer settles usage.prompt_tokens + that max_tokens.
//
// It assumes a standard (pay-as-you-go) deployment; a provisioned one is
// limited by utilization instead, and a global or data-zone deployment's
// limits are those the portal shows for it.
func AzureOpenAI(l AzureLimits, s Settings) (*Profile, error) {
	s, err := s.check()
	if err != nil {
		return nil, err
	}
	if l.Period == 0 {
		l.Period = time.Second
	}
	if l.Deployment == "" || l.TPM < 1 || l.Period < 0 || l.Period > time.Minute {
		return nil, fmt.Errorf("%w: AzureOpenAI %+v: want a Deployment, TPM >= 1 and a Period up to a minute", ErrInvalid, l)
	}
	rpm := AzureRPM(l.TPM)
	n := math.Floor(float64(rpm) * l.Period.Seconds() / 60)
	requests, err := reserve.Sliding(int(n), l.Period)
	if err != nil {
		return nil, fmt.Errorf("%w: AzureOpenAI: %d RPM (from TPM %d) give %v requests per %v, fewer than 2: set Period to 10s if that is how your deployment is evaluated",
			ErrInvalid, rpm, l.TPM, n, l.Period)
	}
	b := max(1, int(float64(l.TPM)*s.Burst.Seconds()/60))
	if b >= l.TPM {
		return nil, fmt.Errorf("%w: AzureOpenAI: Settings.Burst %v holds all of TPM %d", ErrInvalid, s.Burst, l.TPM)
	}
	return &Profile{
		Name: "azure-openai", Key: "azure-openai/" + l.Deployment, Settings: s,
		Policy: reserve.Policy{
			{Name: "requests", Limit: requests},
			{Name: "tokens", Limit: reserve.Limit{Rate: float64(l.TPM-b) / 60, Burst: b}},
		},
		cost: func(c Call) reserve.Cost {
			return reserve.Cost{"requests": 1, "tokens": math.Ceil(c.Input) + math.Ceil(c.Output)}
		},
		usage: func(body []byte, c Call) (Usage, error) {
			prompt, err := promptTokens(body)
			return Usage{Input: prompt, Output: math.Ceil(c.Output)}, err
		},
		actual: func(u Usage) reserve.Cost { return reserve.Cost{"tokens": u.Input + u.Output} },
	}, nil
}
