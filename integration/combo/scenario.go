package combo

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// Kind is what an event of a scenario does.
type Kind string

// The kinds of events. Faults last Event.For; the operator's and the
// provider's pauses last Event.For too.
const (
	OpSet         Kind = "set"          // admin.Client.SetLimit, enforced
	OpShadow      Kind = "set-shadow"   // admin.Client.SetLimit in shadow mode
	OpUnset       Kind = "unset"        // admin.Client.UnsetLimit
	OpPause       Kind = "pause"        // admin.Client.Pause for For
	OpResume      Kind = "resume"       // admin.Client.Resume
	ProviderPause Kind = "provider-429" // the provider's 429 with Retry-After For to the next call
	FaultRestart  Kind = "restart-empty"
	FaultFreeze   Kind = "freeze"
	FaultOOM      Kind = "oom"
	FaultCPause   Kind = "client-pause"
	FaultKill     Kind = "kill"
	OpWeight      Kind = "weight" // admin.Client.SetWeight (UnsetWeight for Weight 0), then Status's tenant figures checked
	OpFormat      Kind = "format" // admin.Client.SetFormat: the state format the fleet writes (2, or back to 1 with every key rewritten)
	// The kinds the wider draws added (widen.go).
	FaultHog   Kind = "cpu-hog"     // Hogs processes per CPU spinning beside the fleet for For
	FaultStall Kind = "stall"       // a fleet process stopped (SIGSTOP) for For, then continued
	FaultClose Kind = "close"       // a fleet process told to Close its Limiter (while it paces locally); another started in its slot For later
	LocalPause Kind = "pause-local" // a fleet process's own Limiter.Pause of Key for For (made in a Redis fault: on its local engine)
	// FaultSlow: for For, every reply to the fleet (or every command to
	// Redis: Commands) Latency late, for the whole fleet or one slot's
	// process (One, Child), through proxies in front of Redis (slow.go).
	FaultSlow Kind = "slow-redis"
	// FaultReshard: on a Cluster (cluster.go), the slots of the run's keys
	// and fleet records that master Node serves move to the next master,
	// one at a time, under load. Not a Redis fault: the judges hold
	// through it as through a healthy Redis.
	FaultReshard Kind = "reshard"
	// FaultFailover: on a Cluster with replicas, a replica of master Node
	// takes its place (CLUSTER FAILOVER). Not a Redis fault either.
	FaultFailover Kind = "failover"
)

// Kinds lists every kind, for summaries.
var Kinds = []Kind{OpSet, OpShadow, OpUnset, OpPause, OpResume, OpWeight, OpFormat, ProviderPause,
	FaultRestart, FaultFreeze, FaultOOM, FaultCPause, FaultKill, FaultHog, FaultStall, FaultClose, LocalPause, FaultSlow, FaultReshard, FaultFailover}

// IsFault reports whether k breaks Redis, a fleet process or the machine.
func (k Kind) IsFault() bool {
	switch k {
	case FaultRestart, FaultFreeze, FaultOOM, FaultCPause, FaultKill, FaultHog, FaultStall, FaultClose, FaultSlow, FaultReshard, FaultFailover:
		return true
	}
	return false
}

// IsRedisFault reports whether k breaks Redis (or slows it down).
func (k Kind) IsRedisFault() bool {
	switch k {
	case FaultRestart, FaultFreeze, FaultOOM, FaultCPause, FaultSlow:
		return true
	}
	return false
}

// IsProcFault reports whether k stops a fleet process (Child).
func (k Kind) IsProcFault() bool { return k == FaultKill || k == FaultStall || k == FaultClose }

// Event is one step of a scenario, At after the run's start.
type Event struct {
	At     time.Duration
	Kind   Kind
	Key    string         // operator actions and provider pauses
	For    time.Duration  // faults, pauses
	Child  int            // FaultKill, FaultStall, FaultClose, LocalPause: the fleet slot whose process it is
	Stored reserve.Policy // OpSet, OpShadow: the limit stored
	Tenant string         // OpWeight: the tenant
	Weight float64        // OpWeight: its weight stored, 0 to remove it
	Format int            // OpFormat: the state format switched to
	Hogs   int            // FaultHog: hog processes per CPU
	// FaultSlow: how much longer each round trip takes, and whether the
	// commands are late on their way to Redis (they run late) rather than
	// the replies on their way back.
	Latency  time.Duration `json:",omitempty"`
	Commands bool          `json:",omitempty"`
	// FaultSlow: one fleet slot's link to Redis only (Child), not the
	// whole fleet's.
	One bool `json:",omitempty"`
	// Node: in a run on a Cluster, the master a Redis fault strikes, or
	// whose slots FaultReshard moves: 1 to Scenario.Masters, by the slots
	// they served at the start (master 1 serves slot 0; cluster.go); 0 on
	// one redis-server.
	Node int `json:",omitempty"`
}

func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%6.2fs %-13s", e.At.Seconds(), e.Kind)
	if e.Key != "" {
		fmt.Fprintf(&b, " %s", e.Key)
	}
	if e.Kind.IsProcFault() || e.Kind == LocalPause || e.Kind == FaultSlow && e.One {
		fmt.Fprintf(&b, " child %d", e.Child+1) // the slot's first process's ID
	}
	if e.Kind == FaultHog {
		fmt.Fprintf(&b, " %d per CPU", e.Hogs)
	}
	if e.Node > 0 {
		fmt.Fprintf(&b, " master %d", e.Node)
	}
	if e.Kind == FaultSlow {
		late := "replies"
		if e.Commands {
			late = "commands"
		}
		fmt.Fprintf(&b, " %s %v late", late, e.Latency)
	}
	if e.For > 0 {
		fmt.Fprintf(&b, " for %v", e.For.Round(time.Millisecond))
	}
	if e.Stored != nil {
		fmt.Fprintf(&b, " to %s", e.Stored)
	}
	if e.Kind == OpWeight {
		fmt.Fprintf(&b, " tenant %s to %g", e.Tenant, e.Weight)
	}
	if e.Kind == OpFormat {
		fmt.Fprintf(&b, " to %d", e.Format)
	}
	return b.String()
}

// Scenario is one seed's timeline.
type Scenario struct {
	Seed   uint64
	Length time.Duration // of the fleet's run
	Procs  int           // fleet processes
	// Python: the fleet slots whose processes run the Python client
	// (python.go), drawn from a stream of their own.
	Python []int `json:",omitempty"`
	// Dialect: the dialect the provider reports KeyHTTP's window in
	// (dialect.go), drawn from a stream of its own.
	Dialect string `json:",omitempty"`
	// Body: what KeyHTTP's refusals carry in their body (body.go), drawn
	// from a stream of its own.
	Body string `json:",omitempty"`
	// Seats: KeySeats's policy (seats.go), drawn from a stream of its own.
	Seats SeatsDraw
	// FleetFormat: the fleet's format setting before its processes start
	// ("3": they write state format 3 and keep the heartbeat's indexes,
	// answering heartbeats from them, docs/protocol.md; "": unset, format
	// 2), drawn from a stream of its own.
	// An OpFormat switch moves it as it would any setting (to 2: the
	// members leave the indexes), and a Redis restarted empty loses it.
	FleetFormat string `json:",omitempty"`
	// Masters: the Redis Cluster's masters in a run on a Cluster
	// (ForCluster, cluster.go); 0 on one redis-server. Replicas: each
	// master's replicas there.
	Masters  int     `json:",omitempty"`
	Replicas int     `json:",omitempty"`
	Events   []Event // sorted by At
	// quiet: spans the wider draws keep clear of Redis faults (an
	// operator's changes that must take), while drawing.
	quiet [][2]time.Duration
}

// Scenario shape: the fleet runs Length; nothing happens in the warm-up
// (every process learns the fleet from two heartbeats), and every fault
// is over settle before the end, so that the recovery is in the run.
const (
	defaultLength = 16 * time.Second
	warmup        = 2500 * time.Millisecond
	settle        = 3500 * time.Millisecond
	procs         = 3
)

// Generate draws seed's scenario. The same seed always gives the same one:
// the timeline the runner drew before its draws were widened (generateBase),
// and the wider draws' events (widen.go), each from a stream of its own.
func Generate(seed uint64) Scenario { return generate(seed, true) }

// generate is Generate, without the slow Redis unless slow (the draw that
// came last: TestGenerate checks that it only adds itself).
func generate(seed uint64, slow bool) Scenario {
	sc := generateBase(seed)
	sc.widen()
	if slow {
		sc.drawSlow()
	}
	sc.Python = pythonSlots(seed, sc.Procs)
	sc.Dialect = httpDialect(seed)
	sc.Body = httpBody(seed, sc.Dialect)
	sc.drawSeats()
	sc.FleetFormat = fleetFormat(seed)
	slices.SortStableFunc(sc.Events, func(a, b Event) int { return int(a.At - b.At) })
	return sc
}

// fleetFormat draws seed's fleet format setting at the start: "3" for half
// the seeds (state format 3 and the heartbeat's indexes), else unset.
func fleetFormat(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, seed^0x666c656574330a)) // "fleet3\n"
	if rng.IntN(2) == 0 {
		return "3"
	}
	return ""
}

// generateBase draws the timeline of the runner's first draws.
func generateBase(seed uint64) Scenario {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	sc := Scenario{Seed: seed, Length: defaultLength, Procs: procs}
	last := sc.Length - settle // every fault ends by then
	between := func(a, b time.Duration) time.Duration { return a + time.Duration(rng.Int64N(int64(b-a)+1)) }

	// Redis faults, one at a time, 1-4 s each.
	nFaults := pick(rng, []int{0, 1, 2, 3}, []int{10, 35, 40, 15})
	redisKinds := []Kind{FaultRestart, FaultFreeze, FaultOOM, FaultCPause}
	var spans [][2]time.Duration
	for range nFaults {
		for range 20 { // a few tries to find room
			d := between(time.Second, 4*time.Second)
			at := between(warmup, last-d)
			if overlaps(spans, at-800*time.Millisecond, at+d+800*time.Millisecond) {
				continue
			}
			spans = append(spans, [2]time.Duration{at, at + d})
			sc.Events = append(sc.Events, Event{At: at, Kind: redisKinds[rng.IntN(len(redisKinds))], For: d})
			break
		}
	}
	// A fleet process killed and started again, independently of Redis,
	// except that it is not started just after Redis restarted empty.
	if rng.Float64() < 0.45 {
		d := between(time.Second, 4*time.Second)
		kill := Event{At: between(warmup, last-d), Kind: FaultKill, For: d, Child: rng.IntN(procs)}
		if kill, ok := clearOfRestarts(kill, sc.Events, last); ok {
			sc.Events = append(sc.Events, kill)
		}
	}
	// The operator.
	for range 2 + rng.IntN(5) {
		at := between(warmup, sc.Length-time.Second)
		key := Keys[pick(rng, []int{0, 1, 2}, []int{45, 45, 10})]
		switch k := []Kind{OpSet, OpShadow, OpUnset, OpPause}[pick(rng, []int{0, 1, 2, 3}, []int{30, 20, 20, 30})]; k {
		case OpSet, OpShadow:
			sc.Events = append(sc.Events, Event{At: at, Kind: k, Key: key, Stored: drawStored(rng, key)})
		case OpUnset:
			sc.Events = append(sc.Events, Event{At: at, Kind: k, Key: key})
		case OpPause:
			d := between(300*time.Millisecond, 1500*time.Millisecond)
			sc.Events = append(sc.Events, Event{At: at, Kind: k, Key: key, For: d})
			if rng.Float64() < 0.4 { // resumed before its end
				sc.Events = append(sc.Events, Event{At: at + between(100*time.Millisecond, d-100*time.Millisecond), Kind: OpResume, Key: key})
			}
		}
	}
	// The provider's own pauses.
	for range 1 + rng.IntN(3) {
		key := Keys[pick(rng, []int{0, 1, 2}, []int{40, 40, 20})]
		sc.Events = append(sc.Events, Event{At: between(warmup, sc.Length-time.Second), Kind: ProviderPause, Key: key,
			For: between(200*time.Millisecond, 1500*time.Millisecond)})
	}
	// The operator's stored weights for the fair calls' tenants, drawn from
	// a stream of their own so that the rest of a seed's timeline is as it
	// was before they joined.
	wrng := rand.New(rand.NewPCG(seed, 0x77e16b7))
	for range 1 + wrng.IntN(3) {
		tn := fairTenants[wrng.IntN(len(fairTenants))]
		e := Event{At: between2(wrng, warmup, sc.Length-time.Second), Kind: OpWeight, Key: Keys[wrng.IntN(2)], Tenant: tn.name}
		if wrng.Float64() < 0.7 {
			e.Weight = []float64{0.5, 1, 3, 8}[wrng.IntN(4)]
		}
		sc.Events = append(sc.Events, e)
	}
	// KeyHTTP's pauses, the provider's and the operator's, from a stream of
	// their own too (its calls joined after the others).
	hrng := rand.New(rand.NewPCG(seed, 0x4774))
	for range 1 + hrng.IntN(2) {
		sc.Events = append(sc.Events, Event{At: between2(hrng, warmup, sc.Length-time.Second), Kind: ProviderPause, Key: KeyHTTP,
			For: between2(hrng, 200*time.Millisecond, 1500*time.Millisecond)})
	}
	if hrng.Float64() < 0.5 {
		sc.Events = append(sc.Events, Event{At: between2(hrng, warmup, sc.Length-time.Second), Kind: OpPause, Key: KeyHTTP,
			For: between2(hrng, 300*time.Millisecond, 1500*time.Millisecond)})
	}
	// KeyAdaptive's pauses, the provider's and the operator's (with a
	// resume before its end, at times), from a stream of their own as
	// well. The operator stores no limit on it: a stored limit replaces
	// the learned rate (the Transport reserves on the key's one band,
	// "permits", which the stored band of that name replaces), and the
	// verdict has no exact bound on the slots that could judge it (see
	// learned.go).
	arng := rand.New(rand.NewPCG(seed, 0xada9))
	for range 1 + arng.IntN(2) {
		sc.Events = append(sc.Events, Event{At: between2(arng, warmup, sc.Length-time.Second), Kind: ProviderPause, Key: KeyAdaptive,
			For: between2(arng, 200*time.Millisecond, 1500*time.Millisecond)})
	}
	if arng.Float64() < 0.5 {
		d := between2(arng, 300*time.Millisecond, 1500*time.Millisecond)
		at := between2(arng, warmup, sc.Length-time.Second-d) // a resume falls within the run too
		sc.Events = append(sc.Events, Event{At: at, Kind: OpPause, Key: KeyAdaptive, For: d})
		if arng.Float64() < 0.4 {
			sc.Events = append(sc.Events, Event{At: at + between2(arng, 100*time.Millisecond, d-100*time.Millisecond), Kind: OpResume, Key: KeyAdaptive})
		}
	}
	// The state format the fleet writes: switched to 2 mid-run, and at
	// times back to 1 (every key rewritten while the fleet runs), from a
	// stream of its own.
	frng := rand.New(rand.NewPCG(seed, 0xf047))
	if frng.Float64() < 0.6 {
		at := between2(frng, warmup, sc.Length-2*time.Second)
		sc.Events = append(sc.Events, Event{At: at, Kind: OpFormat, Format: 2})
		if frng.Float64() < 0.5 {
			sc.Events = append(sc.Events, Event{At: between2(frng, at+500*time.Millisecond, sc.Length-time.Second), Kind: OpFormat, Format: 1})
		}
	}
	slices.SortStableFunc(sc.Events, func(a, b Event) int { return int(a.At - b.At) })
	return sc
}

// between2 draws a duration in [a, b] from rng.
func between2(rng *rand.Rand, a, b time.Duration) time.Duration {
	return a + time.Duration(rng.Int64N(int64(b-a)+1))
}

// drawStored draws a limit for key at or below its true limit, naming the
// same bands (for a policy, a non-empty subset of them).
func drawStored(rng *rand.Rand, key string) reserve.Policy {
	frac := func() float64 { return 0.4 + 0.6*rng.Float64() }
	def := keyDefs[key]
	if def.single {
		return reserve.Limit{Rate: def.limit.Rate * frac(), Burst: 1}.Policy()
	}
	var out reserve.Policy
	for len(out) == 0 {
		for _, b := range def.pol {
			if b.Window.Calendar != 0 {
				// Not drawn (the draws of the other bands stay as they
				// were): the code's calendar window stays in force beside
				// a stored limit.
				continue
			}
			if rng.Float64() < 0.5 {
				continue
			}
			switch {
			case b.Window.N > 0:
				b.Window.N = max(1, float64(int(b.Window.N*frac())))
			case b.Unit == unitTokens:
				// The burst must take the largest estimate, or a call
				// could not be reserved under it at all.
				b.Limit = reserve.Limit{Rate: b.Limit.Rate * frac(), Burst: maxTokens + rng.IntN(b.Limit.Burst-maxTokens+1)}
			default:
				b.Limit = reserve.Limit{Rate: b.Limit.Rate * frac(), Burst: 1 + rng.IntN(b.Limit.Burst)}
			}
			out = append(out, b)
		}
	}
	return out
}

// restartGap is how long after Redis restarted empty no fleet process is
// started: a process that starts then finds a fleet without the members
// still pacing locally (they probe within reserve's ProbeInterval, 1 s,
// +25%), which it cannot tell from a fleet started afresh, and takes their
// shares as well until they are back. reserve documents it (docs/design.md,
// "A process started just after Redis restarted empty"); a start up to
// 500 ms before the restart ends may reach Redis only after it. A fault of
// the fleet's records begun within the gap moves it to its end (the
// runner's prolongsRestart).
const (
	restartGap    = 1600 * time.Millisecond
	restartBefore = 500 * time.Millisecond
)

// clearOfRestarts returns kill with its process started again outside every
// restart's gap (later, or earlier if that would pass last), and false if it
// cannot be.
func clearOfRestarts(kill Event, events []Event, last time.Duration) (Event, bool) {
	for range len(events) + 1 { // a move may land in another restart's gap
		moved := false
		for _, e := range events {
			if e.Kind != FaultRestart {
				continue
			}
			end, back := e.At+e.For, kill.At+kill.For
			if back <= end-restartBefore || back >= end+restartGap {
				continue
			}
			switch {
			case end+restartGap <= last:
				kill.For = end + restartGap - kill.At
			case end-restartBefore-kill.At >= time.Second:
				kill.For = end - restartBefore - kill.At
			default:
				return kill, false
			}
			moved = true
		}
		if !moved {
			return kill, true
		}
	}
	return kill, false
}

func overlaps(spans [][2]time.Duration, a, b time.Duration) bool {
	for _, s := range spans {
		if a < s[1] && s[0] < b {
			return true
		}
	}
	return false
}

// pick returns one of vals, drawn with the given weights.
func pick(rng *rand.Rand, vals, weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	x := rng.IntN(total)
	for i, w := range weights {
		if x < w {
			return vals[i]
		}
		x -= w
	}
	return vals[len(vals)-1]
}
