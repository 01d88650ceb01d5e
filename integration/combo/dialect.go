package combo

import (
	"math/rand/v2"

	iprovider "github.com/pacer-go/pacer/internal/provider"
)

// The dialect of KeyHTTP's counts: a seed draws which of docs/http.md's
// dialects the provider reports KeyHTTP's window in (internal/provider's
// WindowDialects: GitHub's x-ratelimit-*, the IETF drafts' RateLimit
// fields, OpenAI's and Anthropic's), from a stream of its own, so that the
// seed's other draws stay as they were. A scenario without one (a run
// dumped before the draw) spoke GitHub's.

// httpDialect draws seed's dialect.
func httpDialect(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x6469616c6563740a)) // "dialect\n"
	return iprovider.WindowDialects[rng.IntN(len(iprovider.WindowDialects))]
}

// dialectOf returns the dialect sc's provider speaks.
func (sc Scenario) dialectOf() string {
	if sc.Dialect == "" {
		return iprovider.DialectGitHub
	}
	return sc.Dialect
}
