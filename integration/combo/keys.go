package combo

import (
	"math"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/reserve"
)

// The keys every scenario paces. Their true limits are the provider's and
// do not change during a run; the fleet's code passes exactly these, and an
// operator may store one at or below them.
const (
	KeySliding = "sliding.example" // Sliding(31, 1s): 30/s, burst 1
	KeyPolicy  = "policy.example"  // rps, a 2 s window and tokens
	KeyHot     = "hot.example"     // fast enough to lease
	// KeyHTTP is called through pacehttp: its true limit has a window the
	// fleet is not told of, which the provider reports in its answers
	// (GitHub's x-ratelimit-* headers), and pacehttp keeps the count of.
	KeyHTTP = "http.example"
	// KeyAdaptive is called through a second pacehttp Transport, built
	// with Options.Adaptive: the fleet is told nothing of its limit and
	// learns a rate from the provider's 429s (package adaptive).
	KeyAdaptive = "adaptive.example"
	// KeyFair is called by fair requests only (fairkey.go): two tenants of
	// equal weight always backlogged, one estimating its cost low and one
	// high, both settled to the same actual costs, and a light tenant per
	// process; its one band is a tokens bucket.
	KeyFair = "fair.example"
	// KeyCrowd is called by a crowd of fair tenants (fairkey.go): more
	// queues in each process than one call of the fair script carries.
	KeyCrowd = "crowd.example"
)

// Keys lists the keys in a fixed order (reports, draws). A key joins at
// the end: the draws that pick from the first ones stay as they were.
var Keys = []string{KeySliding, KeyPolicy, KeyHot, KeyHTTP, KeyAdaptive, KeyFair, KeyCrowd}

var (
	slidingLimit = must(reserve.Sliding(31, time.Second))
	hotLimit     = reserve.Limit{Rate: 5000, Burst: 1} // a lease spans 5 slots at 1 ms
	crowdLimit   = reserve.Limit{Rate: 20, Burst: 1}
	// httpLimit is KeyHTTP's true limit; the fleet passes only its rps band
	// (httpFleet), and learns the window from the provider's counts.
	httpLimit = reserve.Policy{
		{Name: "rps", Unit: unitRequests, Limit: reserve.Limit{Rate: 30, Burst: 3}},
		{Name: "win", Unit: unitRequests, Window: reserve.Window{N: 24, Length: 2 * time.Second}},
	}
	httpFleet = httpLimit[:1]
	// adaptiveLimit is KeyAdaptive's true limit, which only the provider
	// knows; the fleet learns a rate within [Min, Max] of adaptiveConfig
	// (its Burst the default, 1).
	adaptiveLimit  = reserve.Limit{Rate: 20, Burst: 2}
	adaptiveConfig = adaptive.Config{Start: 8, Min: 2, Max: 80}
	policyLimit    = reserve.Policy{
		{Name: "rps", Unit: unitRequests, Limit: reserve.Limit{Rate: 20, Burst: 2}},
		{Name: "win", Unit: unitRequests, Window: reserve.Window{N: 36, Length: 2 * time.Second}},
		{Name: "tokens", Unit: unitTokens, Limit: reserve.Limit{Rate: 2400, Burst: 480}},
		// A calendar window (a UTC day) too large to bind: it travels with
		// every call of the key (its table in ARGV[3]), through outages,
		// stored limits, pauses and the Python processes, and is judged
		// as the 24-hour window from the epoch a UTC day is.
		{Name: "daily", Unit: unitRequests, Window: reserve.Window{N: 1e9, Calendar: reserve.Day}},
	}
	// fairLimit is KeyFair's: tokens only, about 10 calls a second.
	fairLimit = reserve.Policy{
		{Name: "tokens", Unit: unitTokens, Limit: reserve.Limit{Rate: 1200, Burst: 400}},
	}
)

const (
	unitRequests = "requests"
	unitTokens   = "tokens"

	// A policy call's estimate is drawn from [minTokens, maxTokens]; the
	// provider reports an actual within [estimate/2, estimate*1.3], never
	// more than the tokens band's burst.
	minTokens = 40
	maxTokens = 200
)

// keyDef is one key as the fleet, the provider and the verdict see it.
type keyDef struct {
	name   string
	single bool           // paced by a Limit (Reserve, Wait...); else by pol
	limit  reserve.Limit  // when single
	pol    reserve.Policy // the true limit, which the provider enforces
	// fleet, if set, is the part of pol the fleet passes (KeyHTTP); the
	// verdict judges the slots on it, and the rest on the provider's view.
	fleet reserve.Policy
	// throughput: the fleet's demand stays well above the limit, so the
	// verdict judges how much of it was used.
	throughput bool
	// learned: the fleet is told nothing of pol and paces at a rate it
	// learns (KeyAdaptive); the verdict judges it by its own invariants
	// (learned.go), not pol's windows.
	learned bool
}

var keyDefs = map[string]keyDef{
	KeySliding:  {name: KeySliding, single: true, limit: slidingLimit, pol: slidingLimit.Policy(), throughput: true},
	KeyPolicy:   {name: KeyPolicy, pol: policyLimit, throughput: true},
	KeyHot:      {name: KeyHot, single: true, limit: hotLimit, pol: hotLimit.Policy()},
	KeyHTTP:     {name: KeyHTTP, pol: httpLimit, fleet: httpFleet, throughput: true},
	KeyAdaptive: {name: KeyAdaptive, single: true, limit: adaptiveLimit, pol: adaptiveLimit.Policy(), learned: true},
	KeyFair:     {name: KeyFair, pol: fairLimit, throughput: true},
	KeyCrowd:    {name: KeyCrowd, single: true, limit: crowdLimit, pol: crowdLimit.Policy(), throughput: true},
}

// fleetPol is the policy the fleet passes for def: what the verdict judges
// on the slots. A learned key has none.
func (def keyDef) fleetPol() reserve.Policy {
	if def.learned {
		return nil
	}
	if def.fleet != nil {
		return def.fleet
	}
	return def.pol
}

// band is one band of a policy, as the provider enforces it and the verdict
// judges it.
type band struct {
	name, unit string
	bucket     bool
	rate       float64 // bucket: units per second
	burst      float64 // bucket
	n          float64 // window: units per window
	length     time.Duration
}

// bandsOf flattens pol.
func bandsOf(pol reserve.Policy) []band {
	out := make([]band, 0, len(pol))
	for _, b := range pol {
		unit := b.Unit
		if unit == "" {
			unit = b.Name
		}
		if b.Window.N > 0 {
			length := b.Window.Length
			if b.Window.Calendar != 0 {
				// The judges count windows of a fixed length from the
				// epoch: a UTC day is one (Unix time has no leap seconds).
				if b.Window.Calendar != reserve.Day || (b.Window.Location != nil && b.Window.Location.String() != "UTC") {
					panic("combo: a calendar window other than a UTC day")
				}
				length = 24 * time.Hour
			}
			out = append(out, band{name: b.Name, unit: unit, n: b.Window.N, length: length})
			continue
		}
		out = append(out, band{name: b.Name, unit: unit, bucket: true, rate: b.Limit.Rate, burst: float64(b.Limit.Burst)})
	}
	return out
}

// windowIndex is the index of the window of length l holding t (Unix ns),
// windows aligned to the Unix epoch as a Window's zero Origin gives.
func windowIndex(t int64, l time.Duration) int64 {
	return int64(math.Floor(float64(t) / float64(l)))
}

// must returns lim, panicking on err: for the runner's fixed limits, known
// valid.
func must(lim reserve.Limit, err error) reserve.Limit {
	if err != nil {
		panic(err)
	}
	return lim
}
