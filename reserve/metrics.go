package reserve

import (
	"time"

	"github.com/pacer-go/pacer/internal/names"
)

// Metrics receives a Limiter's measurements. Implementations must be safe for
// concurrent use and fast: they are called on every operation. Package
// prommetrics provides one for Prometheus.
//
// Keys are passed as given; a crawler may have millions of them, so an
// implementation should not turn them into labels unless told to.
type Metrics interface {
	// Reserved is called for every reservation granted on key, to be used
	// after wait: amounts[i] of units[i] (the policy's units; both slices
	// are shared and must not be kept or changed). local is true when the
	// local fallback granted it.
	Reserved(key string, units []string, amounts []float64, wait time.Duration, local bool)
	// Moved is called when a sleeper gave up its slot for a fresh one:
	// why is MovedPause (a pause came to cover its slot), MovedLate (it
	// woke more than Options.MaxLateness after its slot), MovedLost
	// (Redis lost the key's state that granted it: restarted empty,
	// flushed) or MovedBack (the local fallback granted it, and Redis
	// answered again before it: it takes a slot on Redis).
	Moved(key string, why string)
	// RedisCall is called after every call to Redis: the operation (one
	// of a set the code fixes, never the input: "wait", "allow",
	// "reserve", "settle", "cancel", "lease", "pause", "peek", "check",
	// "claim", "hold", "restore", "heartbeat", "probe", "confirm",
	// "config", and "adaptive" and "quota" from packages adaptive and
	// pacehttp, and "seats" (in-flight bands); docs/otel.md says what
	// each is), its duration and its
	// error (nil on success).
	RedisCall(op string, d time.Duration, err error)
	// Fallback is called on every switch: active is true when the Limiter
	// starts pacing locally, false when it is back on Redis.
	Fallback(active bool)
	// Paused is called when key is paused for d.
	Paused(key string, d time.Duration)
	// Evictable is called when New finds that the Redis server may evict
	// pacer's keys under memory pressure (policy is its maxmemory-policy):
	// an evicted bucket comes back full, a burst.
	Evictable(policy string)
}

// FairMetrics, when the Options.Metrics also implements it, receives the
// figures of fair requests (see Request.Tenant). The tenant is passed as
// given: like keys, an implementation should label only the few it is told
// to.
type FairMetrics interface {
	// Turn is called when a fair request is booked: for tenant in lane on
	// key, after waiting turn in its queue (0 when booked at once; its
	// wait for the slot itself is Reserved's).
	Turn(key, tenant string, lane Lane, turn time.Duration)
	// Deferred is called when a fair queue's head was not booked, and
	// its pump will ask again: it was not the tenant's turn, or its slot
	// lay beyond the booking horizon.
	Deferred(key, tenant string, lane Lane)
}

// SeatMetrics is implemented by a Metrics (Options.Metrics) that also wants
// the figures of in-flight bands (Band.InFlight). Keys and bands are passed
// as given.
type SeatMetrics interface {
	// SeatsTaken is called when a call got its seats on key's in-flight
	// band: after waiting waited in the key's queue (0: free at once),
	// handed off by a call that ended (handedOff) or found free; local
	// when the local fallback granted them.
	SeatsTaken(key, band string, seats int, waited time.Duration, handedOff, local bool)
	// SeatsHeld is called when the seats this Limiter holds on key's band
	// change by delta: +seats when taken, -seats when given back.
	SeatsHeld(key, band string, delta int)
	// SeatWaiters is called when the calls of this Limiter waiting for
	// seats on key's band change by delta.
	SeatWaiters(key, band string, delta int)
}

// Values of Metrics.Moved's why.
const (
	MovedPause = names.MovedPause
	MovedLate  = names.MovedLate
	MovedLost  = names.MovedLost
	MovedBack  = names.MovedBack
)

type noMetrics struct{}

func (noMetrics) Reserved(string, []string, []float64, time.Duration, bool) {}
func (noMetrics) Moved(string, string)                                      {}
func (noMetrics) RedisCall(string, time.Duration, error)                    {}
func (noMetrics) Fallback(bool)                                             {}
func (noMetrics) Paused(string, time.Duration)                              {}
func (noMetrics) Evictable(string)                                          {}
