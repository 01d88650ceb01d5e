package reserve

import (
	"context"
	"time"

	"github.com/pacer-go/pacer/internal/names"
)

// A Source says what granted a reservation's slot.
type Source int

// The sources of a slot.
const (
	// SourceRedis: a script on Redis granted the slot.
	SourceRedis Source = iota
	// SourceLocal: the local fallback granted it, Redis being unavailable.
	SourceLocal
	// SourceLease: the slot was one of this Limiter's lease on a hot key
	// (Redis granted the lease; the Limiter handed the slot out).
	SourceLease
)

// String returns "redis", "local" or "lease".
func (s Source) String() string {
	switch s {
	case SourceLocal:
		return names.SourceLocal
	case SourceLease:
		return names.SourceLease
	}
	return names.SourceRedis
}

// PauseBinding is the binding band named when a pause set a slot
// (Reservation.Band, WaitTooLongError.Band, Snapshot.Binding): the first
// slot after the pause was free in every band. Band names are made of
// letters, digits, '.', '_' and '-', so no band is called that.
const PauseBinding = names.BandPause

// TurnBinding is the binding band a fair request's refusal names when its
// turn in the fair queue (Request.Tenant, Request.Lane) cannot come within
// its maximum wait: the other tenants' and lanes' requests ahead of it, not
// a band, made the wait.
const TurnBinding = names.BandTurn

// OutageBinding is the binding band a refusal names when Redis is
// unavailable and this Limiter has no share of the limit to pace on
// locally (it never reached Redis, without Options.FleetSize, or it joined
// the fleet just before the outage): its maximum wait passed before Redis
// answered. Its Wait is then only the soonest it may have one. A caller with no maximum (Wait,
// WaitN, ReserveN) waits for Redis instead.
const OutageBinding = names.BandOutage

// A Grant is one reservation granted, as GrantMetrics receives it.
type Grant struct {
	Key string
	// Units and Amounts are the cost: Amounts[i] of Units[i] (the
	// policy's units). Both slices are shared and must not be kept or
	// changed.
	Units   []string
	Amounts []float64
	// Wait is how long after the grant the cost may be spent.
	Wait   time.Duration
	Source Source
	// Band is the binding band: the band whose queue or window set the
	// slot, PauseBinding when a pause did, "" when the slot was free at
	// once (Wait is then zero).
	Band string
}

// GrantMetrics, when the Options.Metrics also implements it, receives each
// reservation granted with its source and binding band: Granted is called
// in place of Metrics.Reserved.
type GrantMetrics interface {
	Granted(g Grant)
}

// A Tracer follows every Wait and WaitN (Options.Tracer): package
// otelpacer makes each one an OpenTelemetry span. Implementations must be
// safe for concurrent use; they are called on every Wait.
type Tracer interface {
	// StartWait is called as a Wait begins, with the Wait's context and
	// key. The Wait goes on with the context StartWait returns (a span's
	// context, say), and reports its events to the WaitTrace, which must
	// not be nil.
	StartWait(ctx context.Context, key string) (context.Context, WaitTrace)
}

// A WaitTrace receives one Wait's events, in order, from one goroutine:
// Reserved once the slot is granted (not when the Wait was refused),
// then Sleeping and Moved any number of times, then End exactly once.
type WaitTrace interface {
	// Reserved: the reservation r was granted; r's Time, Band and Source
	// say when, why and from where.
	Reserved(r *Reservation)
	// Sleeping: the Wait sleeps, d from now until r's slot.
	Sleeping(r *Reservation, d time.Duration)
	// Moved: the sleeper took a fresh slot, r's Time now: why is one of
	// Metrics.Moved's reasons (MovedPause, MovedLate, MovedLost,
	// MovedBack).
	Moved(r *Reservation, why string)
	// End: the Wait returns err. With err nil it woke at its slot: late
	// is how long after the slot it woke.
	End(err error, late time.Duration)
}

// granted reports r, just granted with wait, to the metrics.
func (l *Limiter) granted(r *Reservation, wait time.Duration) {
	if gm, ok := l.opts.Metrics.(GrantMetrics); ok {
		gm.Granted(Grant{Key: r.key, Units: r.spec.units, Amounts: r.amounts, Wait: max(wait, 0),
			Source: r.source, Band: r.band})
		return
	}
	l.opts.Metrics.Reserved(r.key, r.spec.units, r.amounts, max(wait, 0), r.source == SourceLocal)
}
