package reserve

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/outage"
	"github.com/pacer-go/pacer/internal/wake"
)

// DefaultKeyPrefix is put in front of every key's Redis keys unless
// Options.KeyPrefix says otherwise.
const DefaultKeyPrefix = "pacer:"

// Defaults of the Options fields that have one (each field's comment gives it).
const (
	defaultCallTimeout       = outage.DefaultCallTimeout
	defaultFailAfter         = 3
	defaultProbeInterval     = time.Second
	defaultHeartbeatInterval = outage.DefaultHeartbeatInterval
	defaultSilentHold        = time.Minute
	defaultPreciseWake       = wake.DefaultMargin
	defaultLeaseSpan         = time.Millisecond
	defaultLeaseQueue        = 8
	defaultFairHorizon       = 2 * time.Millisecond
)

// Options configure a Limiter. The zero value is ready to use.
type Options struct {

	// Clock is the local time source: for sleeping, and for placing the
	// slots Redis grants on the local clock. Default (nil): time.Now. A test
	// may set a fake one; the buckets still run on Redis server time unless
	// ClientTime is set.
	Clock Clock

	// ClientTime passes the Clock's Now to the scripts as the buckets' time
	// instead of Redis server time (TIME inside each script): for
	// deterministic tests, or to use client time on purpose. All processes
	// sharing a key must then agree on the time, and the Clock must run at
	// real speed: Redis expires idle keys on its own clock. Default false:
	// server time, so the clocks of the processes sharing a key may
	// disagree by minutes without effect.
	ClientTime bool

	// KeyPrefix is put in front of every Redis key. Default "pacer:". A key
	// k is stored under KeyPrefix + "{" + k + "}" (braces in k escaped), a
	// Redis Cluster hash tag, so every Redis key of k lies in one slot. The
	// fleet's heartbeats are under KeyPrefix + "{limiters}". The prefix must
	// not contain '{' or '}'.
	KeyPrefix string

	// CallTimeout bounds every call to Redis, whatever the client's own
	// timeouts, so a hung Redis cannot hold a Wait for long. Default
	// 250 ms. On a slow machine or network the bound grows with the round
	// trips seen (four times the slowest recent one, at most 2 s), so that
	// a busy process does not take itself for cut off. A call that times
	// out is no evidence that Redis is gone: the Limiter pings Redis,
	// giving it eight CallTimeouts (at least 2 s), and only when that fails
	// too, with no other call answered meanwhile, does it pace locally.
	// Meanwhile a call that changes state waits
	// for its own reply (sent again, it would be charged twice); a read
	// waits for the ping and goes to Redis again if Redis answered.
	CallTimeout time.Duration

	// FailAfter is the number of consecutive failed Redis calls (refused,
	// reset, a Redis loading or failing over) after which the Limiter stops
	// calling Redis and paces locally until a probe finds Redis again.
	// Default 3. The failures must also span one CallTimeout: a Redis that
	// restarts or resets a connection is back within that blip, and the
	// calls meanwhile wait for it (tried again every 5 to 50 ms) rather
	// than pace locally beside members that stayed on Redis. Calls that
	// time out count only once a ping has failed as well (see
	// CallTimeout). With FailAfter 1, the first failure switches at once.
	FailAfter int

	// FailClosed makes calls return an error matching ErrUnavailable while
	// Redis is unavailable, instead of pacing locally.
	FailClosed bool

	// FleetSize is the number of Limiters (processes) this one assumes
	// share its keys until it has learned the real number from Redis: it
	// then paces locally at a FleetSize-th of each key's limits (a rank
	// drawn from its id: two Limiters may draw the same one, so this is
	// approximate, unlike the share learned from Redis). Default (0): a
	// Limiter that has never reached Redis does not pace locally: its
	// callers wait until Redis answers (within their deadlines), and those
	// that asked for a maximum wait (TryReserveN) are refused when it
	// passes, with a WaitTooLongError whose Band is OutageBinding and whose
	// message names the reason Redis could not be reached. Once
	// it has reached Redis, the number learned from the heartbeats is
	// used, whatever FleetSize says.
	FleetSize int

	// RequireRedis makes New fail, with an error matching ErrUnavailable
	// and wrapping the cause, when Redis cannot be reached at start (a
	// first heartbeat that times out counts only when a ping given eight
	// CallTimeouts, at least 2 s, fails too: see CallTimeout).
	// Without it, such a Limiter starts off Redis (FleetSize) and learns
	// the fleet from a heartbeat 1.5 ProbeInterval after its first probe
	// that succeeded, once the members pacing locally could be back too.
	RequireRedis bool

	// ProbeInterval is the mean time between checks of Redis while the
	// Limiter paces locally (jittered by ±25%, one check at a time).
	// Default 1 s.
	ProbeInterval time.Duration

	// HeartbeatInterval is how often the Limiter records itself as live in
	// Redis and learns the fleet: its members (ranked by id: each takes its
	// rank's share while it paces locally), those heard from in the last
	// two intervals, and those silent for longer but less than SilentHold.
	// Default 1 s.
	HeartbeatInterval time.Duration

	// SilentHold is how long the fleet keeps back the share of a Limiter
	// that stopped heartbeating but may still be alive: it may have lost
	// Redis and be pacing locally on its share, so the Limiters still on
	// Redis take only their own shares meanwhile. A Limiter whose process
	// exited without Close (killed, crashed) is not held: its heartbeat
	// connection (named pacer-<id>) is gone from CLIENT LIST, and the first
	// member to see that, about 1.1 heartbeats after its last one,
	// removes it; its share comes back to the others at their next
	// heartbeat, also one that was pacing locally (its heartbeats name
	// the connection in both modes). (One found connected while silent, then gone, is held
	// 2.2 heartbeats more: a network that heals may reset the connection
	// of a process still pacing locally.) (A Redis user without CLIENT SETNAME or CLIENT LIST, see
	// docs/security.md, falls back to SilentHold.) After SilentHold a
	// silent Limiter counts as gone. Default 1 min (at least three
	// heartbeats).
	SilentHold time.Duration

	// MaxLateness is how late after its slot a caller may wake and still
	// use it. One that wakes later (a stalled process, a GC pause) takes a
	// fresh slot instead, so that it does not fire together with callers
	// that are on time, and again when it is late for that one too, up to
	// MaxLateMoves times (the last is used however late); the window units
	// of the slot it gives up go back first (it never fired on it). A slot
	// whose reply arrived late is late by that much more (see MaxEarly).
	// Default (0): half the slot spacing of the key's fastest bucket for
	// the call's cost (1 ms at 500/s), at least 1 ms, and never past the
	// end of a window band's window. Negative: no limit.
	MaxLateness time.Duration

	// DisableCoalescing makes every reservation a Redis call of its own.
	// Default false: concurrent callers on one key (and policy) in this
	// Limiter share calls. While a call for the key is in flight, new
	// callers queue; the next call reserves for all of them at once (up to
	// MaxBatch), first come first served, each with the slot it would have
	// had from a call of its own. A caller who finds no call in flight makes
	// one at once, so a lone caller waits for nothing; on a key whose queue
	// is deep (the latest slot granted 2 ms or more ahead, so the caller's
	// own slot is too) it holds its call up to 500 µs, an eighth of the
	// queue at most, for the callers who come meanwhile to share it.
	DisableCoalescing bool

	// DisablePipelining makes every script call a round trip of its own.
	// Default false: script calls made while another of the Limiter's is in
	// flight to the same Redis server queue, and go together as one
	// pipeline when it returns, so that at most one round trip of calls is
	// in flight per server. A call made while none is goes at once. On a
	// Cluster each master has a queue of its own (chosen by the key's
	// slot), so a master that hangs holds only its own slots' calls; a
	// Ring's calls do not queue. Each call keeps its own context, deadline
	// and outcome; heartbeats do not queue. On many keys called at once
	// this about halves the client's CPU and Redis's per admission.
	DisablePipelining bool

	// LeaseSpan bounds the leases of hot keys: a key on which
	// LeaseQueue or more callers of this Limiter queued behind a call in
	// flight gets a run of consecutive slots in one Redis call, handed out
	// locally, one per Reserve or Wait, with no call each. A lease holds at
	// most rate × LeaseSpan slots (the key's rate, at this Limiter's share),
	// none if that is under 2: at the default 1 ms, a key paced at 500/s
	// never leases, one at 10M/s leases up to 10,000 slots. Its slots are
	// exactly those as many one-permit reservations would have had, so
	// every guarantee on the schedule holds; slots a process does not hand
	// out in time (or holds when it dies) lapse: at most rate × LeaseSpan
	// per key (the live lease and the next, fetched ahead before the live
	// one is spent, together). Only one-permit requests on a single Limit
	// lease, and only
	// on a key with no stored limit (see lease.go). Default 1 ms; negative:
	// no leases.
	LeaseSpan time.Duration

	// LeaseQueue is how many callers must be queued for a key (behind its
	// call in flight) for the next call to lease (see LeaseSpan). A lone
	// caller never has a queue, so it never leases. Default 8; at least 2.
	LeaseQueue int

	// PreciseWake is how long before a slot Wait and Reservation.Sleep hand
	// over from Go's timer, which wakes up to about a millisecond late, to
	// a precise timer of the operating system (a timerfd read through Go's
	// poller on Linux), so that callers start within tens of µs of their
	// slot. A sleeper checks that no pause has come to cover its slot
	// PreciseWake plus a round trip to Redis (the shortest of its calls
	// lately) before the slot, so that the answer is back PreciseWake
	// before it, however far away Redis is. Default 2 ms. Negative: Go's
	// timer only (the check is then made 2 ms and a round trip before the
	// slot).
	PreciseWake time.Duration

	// Metrics receives measurements. Default: none. Package prommetrics
	// adapts it to Prometheus.
	Metrics Metrics

	// Tracer follows every Wait and WaitN: its reservation, sleep, moves
	// and end, with the binding band and the source. Default: none.
	// Package otelpacer makes each Wait an OpenTelemetry span.
	Tracer Tracer

	// Logger logs every switch between Redis and local pacing, and what
	// New found out about the Redis server. Default slog.Default().
	Logger *slog.Logger

	// FairHorizon is the least booking horizon of a fair request (one that
	// names a Tenant or a Lane) in the Urgent and Normal lanes: how far
	// ahead of now its slot may lie when it is booked. A request's horizon
	// is its own duration (one slot interval) or FairHorizon, whichever is
	// longer; a tenant deferred for it once is booked at its next ask in its
	// turn wherever its slot lies (plain requests, which book with no
	// horizon, may have taken the slots before it). A longer horizon costs fewer Redis calls at high rates and
	// makes other tenants wait longer behind a flood. Default 2 ms.
	FairHorizon time.Duration

	// MinShare gives a lower lane (Normal or Batch) the least share of a
	// key it is booked while a higher lane waits, in [0, 1): 0.1 lets a
	// Batch backlog take one request's duration in ten even under a
	// steady Urgent flood. Default: none, strict priority.
	MinShare map[Lane]float64
}

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.KeyPrefix == "" {
		o.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(o.KeyPrefix, "{}") {
		return o, fmt.Errorf("%w (got %q)", ErrInvalidPrefix, o.KeyPrefix)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"CallTimeout", &o.CallTimeout, defaultCallTimeout},
		{"ProbeInterval", &o.ProbeInterval, defaultProbeInterval},
		{"HeartbeatInterval", &o.HeartbeatInterval, defaultHeartbeatInterval},
		{"SilentHold", &o.SilentHold, 0},
	} {
		if *d.v < 0 {
			return o, fmt.Errorf("%w: Options.%s %v", ErrInvalidDuration, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	switch {
	case o.SilentHold == 0:
		o.SilentHold = max(defaultSilentHold, 3*o.HeartbeatInterval)
	case o.SilentHold < 2*o.HeartbeatInterval:
		return o, fmt.Errorf("%w: SilentHold %v is shorter than two heartbeats (%v)", ErrInvalidOptions, o.SilentHold, 2*o.HeartbeatInterval)
	}
	if o.PreciseWake == 0 {
		o.PreciseWake = defaultPreciseWake
	}
	if o.FailAfter < 0 {
		return o, fmt.Errorf("%w: FailAfter must not be negative (got %d)", ErrInvalidOptions, o.FailAfter)
	}
	if o.FailAfter == 0 {
		o.FailAfter = defaultFailAfter
	}
	if o.FleetSize < 0 {
		return o, fmt.Errorf("%w: FleetSize must not be negative (got %d)", ErrInvalidOptions, o.FleetSize)
	}
	switch {
	case o.LeaseSpan == 0:
		o.LeaseSpan = defaultLeaseSpan
	case o.LeaseSpan > time.Second:
		return o, fmt.Errorf("%w: LeaseSpan %v is longer than 1s (a lease's slots lapse unused when a process stalls or dies: keep it short)", ErrInvalidOptions, o.LeaseSpan)
	}
	switch {
	case o.LeaseQueue == 0:
		o.LeaseQueue = defaultLeaseQueue
	case o.LeaseQueue < 2:
		return o, fmt.Errorf("%w: LeaseQueue must be at least 2 (got %d)", ErrInvalidOptions, o.LeaseQueue)
	}
	switch {
	case o.FairHorizon < 0:
		return o, fmt.Errorf("%w: Options.FairHorizon %v", ErrInvalidDuration, o.FairHorizon)
	case o.FairHorizon == 0:
		o.FairHorizon = defaultFairHorizon
	}
	for lane, m := range o.MinShare {
		if lane != Normal && lane != Batch {
			return o, fmt.Errorf("%w: MinShare for lane %v (only Normal and Batch have one)", ErrInvalidOptions, lane)
		}
		if !(m >= 0 && m < 1) {
			return o, fmt.Errorf("%w: MinShare[%v] %v is not in [0, 1)", ErrInvalidOptions, lane, m)
		}
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}

// checkAt is how long before its slot a sleeper checks for a pause.
func (o Options) checkAt() time.Duration {
	if o.PreciseWake > 0 {
		return o.PreciseWake
	}
	return defaultPreciseWake
}
