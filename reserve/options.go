package reserve

import (
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// DefaultKeyPrefix is put in front of every bucket's Redis key unless
// Options.KeyPrefix says otherwise.
const DefaultKeyPrefix = "pacer:"

// Defaults of the Options fields that have one.
const (
	DefaultCallTimeout       = 250 * time.Millisecond
	DefaultFailAfter         = 3
	DefaultProbeInterval     = time.Second
	DefaultHeartbeatInterval = 2 * time.Second
)

// Options configure a Limiter. The zero value is ready to use.
type Options struct {
	// Clock is the time source. Default (nil): Redis server time (TIME inside
	// each script) for the buckets, so the clocks of the processes sharing a
	// key may disagree by minutes without effect, and the local clock for
	// sleeping. With a Clock set, its Now is passed to the scripts instead:
	// for deterministic tests, or to use client time on purpose. All processes
	// sharing a key should then agree on the time, and the Clock should run at
	// real speed: Redis expires idle keys on its own clock.
	Clock Clock

	// KeyPrefix is put in front of every key. Default "pacer:". A key k is
	// stored as KeyPrefix + "{" + k + "}", a Redis Cluster hash tag, so every
	// Redis key a script touches for k lies in one slot. The fleet's
	// heartbeat set is KeyPrefix + "limiters". The prefix must not contain
	// '{' or '}'.
	KeyPrefix string

	// CallTimeout bounds every call to Redis, independently of the client's
	// own dial, read and retry timeouts, so a hung Redis cannot hold a Wait
	// for seconds. Default 250 ms. A call that times out counts as a failure.
	// If the client has ContextTimeoutEnabled, the bound is passed to it as a
	// context deadline; otherwise the call runs in its own goroutine, which
	// ends when the client gives up by itself.
	CallTimeout time.Duration

	// FailAfter is the number of consecutive failed Redis calls (errors
	// other than bad input, or timeouts) after which the Limiter stops
	// calling Redis and paces locally until a probe finds Redis again.
	// Default 3. Calls that fail before then are paced locally too.
	FailAfter int

	// FailClosed makes calls return an error matching ErrUnavailable while
	// Redis is unavailable, instead of pacing locally. Default false:
	// pace locally at each key's rate divided by the number of live
	// Limiters in the fleet (learned from the heartbeats).
	FailClosed bool

	// ProbeInterval is the mean time between checks of Redis while the
	// Limiter paces locally (jittered by ±25%, one check at a time).
	// Default 1 s.
	ProbeInterval time.Duration

	// HeartbeatInterval is how often the Limiter records itself as live in
	// Redis and learns how many Limiters are live (those heard from in the
	// last three intervals). Default 2 s.
	HeartbeatInterval time.Duration

	// DisableCoalescing makes every Reserve, TryReserve and Wait a Redis call
	// of its own. Default false: concurrent callers on one key (and Limit) in
	// this Limiter share calls. While a call for the key is in flight, new
	// callers queue; the next call reserves for all of them at once (up to
	// MaxBatch), first come first served, each with the slot it would have
	// had from a call of its own. A caller who finds no call in flight makes
	// one at once, so a lone caller waits for nothing.
	DisableCoalescing bool

	// PreciseWake is how long before a slot Wait and Reservation.Sleep hand
	// over from Go's timer, which wakes up to about a millisecond late (the
	// runtime's poller sleeps in whole milliseconds), to a precise timer of
	// the operating system, so that callers start within tens of µs of their
	// slot. Default 2 ms (Go's timers are rarely later than that). The
	// precise part is a timerfd read through Go's poller: the goroutine
	// parks as in any read, holding no thread, for a handful of system calls
	// per sleep. It does not watch the context. Negative: Go's timer only.
	// Precise sleeps need Linux; elsewhere the timer does it all.
	PreciseWake time.Duration

	// Metrics receives measurements. Default: none. Package prommetrics
	// adapts it to Prometheus.
	Metrics Metrics

	// Logger logs every switch between Redis and local pacing. Default
	// slog.Default().
	Logger *slog.Logger
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
		{"CallTimeout", &o.CallTimeout, DefaultCallTimeout},
		{"ProbeInterval", &o.ProbeInterval, DefaultProbeInterval},
		{"HeartbeatInterval", &o.HeartbeatInterval, DefaultHeartbeatInterval},
	} {
		if *d.v < 0 {
			return o, fmt.Errorf("%w: Options.%s %v", ErrInvalidDuration, d.name, *d.v)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if o.PreciseWake == 0 {
		o.PreciseWake = DefaultPreciseWake
	}
	if o.FailAfter < 0 {
		return o, fmt.Errorf("reserve: Options.FailAfter must not be negative (got %d)", o.FailAfter)
	}
	if o.FailAfter == 0 {
		o.FailAfter = DefaultFailAfter
	}
	if o.Metrics == nil {
		o.Metrics = noMetrics{}
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o, nil
}
