package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// GeminiLimits are one model's limits on a Google Cloud project, as the
// project's usage tier gives them (AI Studio's rate limit page lists
// them).
type GeminiLimits struct {
	// Project names the project whose quota it is: limits apply per
	// project, not per API key. The key is
	// "generativelanguage.googleapis.com/" + Project + "/" + Model.
	Project string
	// Model names the quota: each model has its own.
	Model string
	// RPM is requests per minute, TPM input tokens per minute, RPD
	// requests per day. All three are required.
	RPM, TPM, RPD int
}

// GeminiMaxWait is the Gemini profile's pacehttp MaxWait: more than the
// longest day (25 hours, when the clocks go back), so that a quota per day
// reported exhausted pauses the key until its reset, midnight Pacific
// time.
const GeminiMaxWait = 25*time.Hour + time.Minute

// geminiZone is the zone whose midnight Gemini's requests per day reset at.
const geminiZone = "America/Los_Angeles"

// Gemini returns the profile of one Gemini API model's quota on a
// project.
//
// The rules it implements (ai.google.dev, "Gemini API: Rate limits"):
// limits are per project and model, measured as requests per minute
// (RPM), input tokens per minute ("Tokens per minute (input)", TPM) and
// requests per day (RPD), each enforced on its own; "Requests per day
// (RPD) quotas reset at midnight Pacific time". A refused call gets a 429
// RESOURCE_EXHAUSTED whose body holds a google.rpc.QuotaFailure naming
// the quota (its quotaId says PerMinute or PerDay) and a
// google.rpc.RetryInfo, and no rate-limit header: pacehttp reads the body
// (pauses for retryDelay; for a quota per day, until midnight in
// America/Los_Angeles). An answer's usageMetadata reports the call's
// tokens.
//
// The policy: "requests", a bucket holding Settings.Burst of RPM, B, at
// (RPM - B) per minute, and "tokens" likewise of TPM: no 60 seconds,
// wherever they start, get more than the minute's quota (Google counts
// its minutes from the clock's second 00, and a bucket at RPM per minute
// with a burst could put RPM + B in one of them); and "daily", a
// calendar window of RPD requests per day in America/Los_Angeles
// (reserve.Window with Calendar reserve.Day), exact on the days of 23 and
// 25 hours. A Call costs 1 request and Input tokens (the prompt's, or an
// estimate; Output is not counted: the quota is of input tokens); an
// answer settles usageMetadata.promptTokenCount. The options set MaxWait
// to GeminiMaxWait and DailyReset to America/Los_Angeles.
//
// It assumes the limits given are the model's for your tier, that nothing
// else spends the project's quota for that model, that Redis's clock and
// Google's agree on the time (a day's window ends at Redis's midnight,
// Pacific time), and that the minutes are counted from second 00 (a
// forum answer of Google's staff; the page does not say). Not enforced:
// tokens per day (TPD), which some models have, and the images per
// minute of image models. The zone database must hold America/Los_Angeles
// (import time/tzdata where the system has none); other processes of the
// fleet load it by name.
func Gemini(l GeminiLimits, s Settings) (*Profile, error) {
	return gemini(l, s, time.Minute)
}

// gemini is Gemini with the minute as given (a test shortens it).
func gemini(l GeminiLimits, s Settings, minute time.Duration) (*Profile, error) {
	s, err := s.check()
	if err != nil {
		return nil, err
	}
	if l.Project == "" || l.Model == "" || strings.Contains(l.Project, "/") || l.RPM < 2 || l.TPM < 2 || l.RPD < 1 {
		return nil, fmt.Errorf("%w: Gemini %+v: want a Project (no slash), a Model, RPM and TPM >= 2, RPD >= 1", ErrInvalid, l)
	}
	la, err := time.LoadLocation(geminiZone)
	if err != nil {
		return nil, fmt.Errorf("profile: Gemini: the zone its requests per day reset in: %w (import time/tzdata)", err)
	}
	// fixed returns the band of n per minute as B at once (Burst's worth,
	// 1 to n-1) and n - B a minute.
	fixed := func(name string, n int) reserve.Band {
		b := min(n-1, max(1, int(float64(n)*s.Burst.Seconds()/minute.Seconds())))
		return reserve.Band{Name: name, Limit: reserve.Limit{Rate: float64(n-b) / minute.Seconds(), Burst: b}}
	}
	return &Profile{
		Name: "gemini", Key: "generativelanguage.googleapis.com/" + l.Project + "/" + l.Model, Settings: s,
		maxWait: GeminiMaxWait, daily: la,
		Policy: reserve.Policy{
			fixed("requests", l.RPM),
			fixed("tokens", l.TPM),
			{Name: "daily", Unit: "requests", Window: reserve.Window{N: float64(l.RPD), Calendar: reserve.Day, Location: la}},
		},
		cost: func(c Call) reserve.Cost {
			return reserve.Cost{"requests": 1, "tokens": math.Ceil(c.Input)}
		},
		usage:  func(body []byte, _ Call) (Usage, error) { return geminiUsage(body) },
		actual: func(u Usage) reserve.Cost { return reserve.Cost{"tokens": u.Input} },
	}, nil
}

// geminiUsage reads generateContent's usageMetadata: {"usageMetadata":
// {"promptTokenCount": P, "candidatesTokenCount": C, "totalTokenCount":
// T}}. The quota counts input tokens: P is Input, C Output.
func geminiUsage(body []byte) (Usage, error) {
	var v struct {
		Usage *struct {
			Prompt     *float64 `json:"promptTokenCount"`
			Candidates float64  `json:"candidatesTokenCount"`
		} `json:"usageMetadata"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return Usage{}, fmt.Errorf("the answer's body is not JSON with a usageMetadata: %w", err)
	}
	if v.Usage == nil || v.Usage.Prompt == nil || *v.Usage.Prompt < 0 || v.Usage.Candidates < 0 {
		return Usage{}, errors.New("the answer's body has no usageMetadata.promptTokenCount")
	}
	return Usage{Input: *v.Usage.Prompt, Output: v.Usage.Candidates}, nil
}
