package combo

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	iprovider "github.com/pacer-go/pacer/internal/provider"
)

// The body of KeyHTTP's refusals: a seed draws what the provider's 429s on
// KeyHTTP carry in their body (pacehttp reads it: docs/http.md, "The
// provider's body"), from a stream of its own, so that the seed's other
// draws stay as they were:
//
//   - bodyGoogle, in one seed in googleOdds of the other dialects: no
//     rate-limit header at all (no count, no Retry-After), only a
//     Google-style body (googleRefusal): a google.rpc.RetryInfo whose
//     retryDelay is the provider's real wait, and for a refusal by the
//     limit a google.rpc.QuotaFailure naming a quota per minute. The fleet
//     must pause from the body alone. Its answers of 200 report the counts
//     in the seed's dialect as ever.
//   - bodyOpenAI, in the OpenAI dialect: OpenAI's JSON error
//     (iprovider.OpenAIRefusal, type "requests") beside the dialect's
//     headers and Retry-After.
//   - "" otherwise (and in a scenario dumped before the draw): the
//     runner's Reply, as for the other keys.
//
// A refusal with a provider's body sends the runner's Reply in replyHeader
// (the child reads it there: its caller pauses for Reply.Retry).
const (
	bodyGoogle = "google"
	bodyOpenAI = "openai"
	// replyHeader carries the Reply of a 429 whose body is a provider's.
	replyHeader = "X-Combo-Reply"
)

// googleOdds: one seed in googleOdds of the dialects other than OpenAI's
// draws bodyGoogle.
const googleOdds = 3

// httpBody draws seed's body variant; dialect is the seed's (httpDialect).
func httpBody(seed uint64, dialect string) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x626f64790a676f6f)) // "body\ngoo"
	google := rng.IntN(googleOdds) == 0
	switch {
	case dialect == iprovider.DialectOpenAI:
		return bodyOpenAI
	case google:
		return bodyGoogle
	}
	return ""
}

// bodyOf names the body variant sc's provider speaks, for the report.
func (sc Scenario) bodyOf() string {
	if sc.Body == "" {
		return "reply"
	}
	return sc.Body
}

// refusalBody returns the body of a 429 on KeyHTTP in variant and its
// content type, or nil when the variant sends the runner's Reply. quota is
// the provider's counted quota (the window's calls; 0: none).
func refusalBody(variant string, rep Reply, quota int) ([]byte, string) {
	switch variant {
	case bodyOpenAI:
		return []byte(iprovider.OpenAIRefusal), "application/json"
	case bodyGoogle:
		return googleRefusal(time.Duration(rep.Retry), rep.Why == "limit", quota), "application/json; charset=UTF-8"
	}
	return nil, ""
}

// googleRefusal is Google's 429 RESOURCE_EXHAUSTED (as Gemini sends it):
// RetryInfo's retryDelay is wait in seconds, rounded up to the
// millisecond ("1.500s"); with limited and a counted quota, a QuotaFailure
// names iprovider.GoogleMinuteQuota (a quota per minute, never per day: a
// run is short, and pacehttp would wait for Pacific midnight).
func googleRefusal(wait time.Duration, limited bool, quota int) []byte {
	ms := (wait + time.Millisecond - 1) / time.Millisecond
	delay := strconv.FormatFloat(float64(ms)/1000, 'f', 3, 64) + "s"
	failure := ""
	if limited && quota > 0 {
		failure = fmt.Sprintf(`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_requests","quotaId":%q,"quotaValue":"%d"}]},`,
			iprovider.GoogleMinuteQuota, quota)
	}
	return fmt.Appendf(nil, `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[%s{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":%q}]}}`,
		failure, delay)
}

// countedQuota returns the calls pk's window band "win" counts, 0 if none.
func (pk *providerKey) countedQuota() int {
	for _, b := range pk.bands {
		if !b.bucket && b.name == "win" {
			return int(b.n)
		}
	}
	return 0
}

// httpRefused reports whether an answer of status on key carries a
// provider's body in variant: KeyHTTP's 429s.
func httpRefused(variant, key string, status int) bool {
	return variant != "" && key == KeyHTTP && status == http.StatusTooManyRequests
}
