// Package names holds the values pacer's telemetry and tools show, once:
// what granted a slot (source), what a Limiter paces on (mode), the
// binding band's values that are not a band's name, why a sleeper moved,
// and the operations of the calls to Redis. reserve, adaptive, pacehttp,
// prommetrics, otelpacer and cmd/pacer take them from here, so that a
// dashboard, an alert or a trace reads the same word for the same thing
// on every surface (names_test.go and each surface's tests check it).
package names

// Sources: what granted a reservation's slot (reserve.Source's String;
// prommetrics' source label, otelpacer's pacer.source).
const (
	SourceRedis = "redis" // a script on Redis
	SourceLocal = "local" // the local fallback, Redis being unavailable
	SourceLease = "lease" // a slot of the Limiter's lease on a hot key
)

// Sources lists the sources, in reserve.Source's order.
var Sources = []string{SourceRedis, SourceLocal, SourceLease}

// Modes: what a Limiter paces on now (its heartbeat's mode, admin.Member's
// Mode, pacer status/watch/web's fleet lines), and where a switch goes
// (prommetrics' to label, otelpacer's pacer.fallback.to).
const (
	ModeRedis = "redis" // on Redis: the fleet's shared limit
	ModeLocal = "local" // locally, on its share: Redis unavailable to it
)

// Modes lists the modes.
var Modes = []string{ModeRedis, ModeLocal}

// The binding band's values that are not a band's name. A band's name is
// made of letters, digits, '.', '_' and '-', so those in parentheses are
// no band's; "none" and "unknown" could be, and then share its series.
const (
	// BandPause: a pause set the slot (reserve.PauseBinding), on every
	// surface: the metrics' band, spans, errors, pacer status and web.
	BandPause = "(pause)"
	// BandTurn: a fair request's turn made its wait (reserve.TurnBinding).
	BandTurn = "(turn)"
	// BandOutage: Redis was unavailable and the Limiter had no share to
	// pace on (reserve.OutageBinding).
	BandOutage = "(outage)"
	// BandNone is the metrics' band of a slot free at once (reserve's "").
	BandNone = "none"
	// BandUnknown is otelpacer's band of a refusal that named none.
	BandUnknown = "unknown"
)

// Moved reasons: why a sleeper took a fresh slot (reserve.MovedPause,
// MovedLate, MovedLost and MovedBack; prommetrics' why label, otelpacer's
// pacer.moved.reason).
const (
	MovedPause = "pause" // a pause came to cover its slot
	MovedLate  = "late"  // it woke more than Options.MaxLateness after it
	MovedLost  = "lost"  // Redis lost the key's state that granted it
	MovedBack  = "back"  // the local fallback granted it, and Redis answered again before it
)

// Moved lists the Moved reasons.
var Moved = []string{MovedPause, MovedLate, MovedLost, MovedBack}

// How a call got its seats on an in-flight band (reserve.SeatMetrics'
// SeatsTaken: handedOff or not; prommetrics' got label, otelpacer's
// pacer.seats.got).
const (
	SeatsHandoff = "handoff" // handed off, in the queue, by a call that ended
	SeatsFree    = "free"    // found free (at once, or when it asked again)
)

// SeatsGot lists how a call gets its seats.
var SeatsGot = []string{SeatsHandoff, SeatsFree}

// Operations: the op of each call to Redis (reserve.Metrics.RedisCall;
// prommetrics' op label, otelpacer's pacer.redis.operation), and the word
// errors name the call by.
const (
	OpWait      = "wait"      // Wait, WaitN: a reservation it sleeps to
	OpAllow     = "allow"     // Allow, AllowN
	OpReserve   = "reserve"   // Reserve, ReserveN, TryReserveN, a sleeper's fresh slot, a batch's call
	OpSettle    = "settle"    // Reservation.Settle
	OpCancel    = "cancel"    // Reservation.Cancel, a refusal's slot given back
	OpLease     = "lease"     // a hot key's lease
	OpPause     = "pause"     // Limiter.Pause
	OpPeek      = "peek"      // Limiter.Peek
	OpCheck     = "check"     // a sleeper's read of its key's pause (one GET, shared)
	OpClaim     = "claim"     // package hold: a held slot claimed
	OpHold      = "hold"      // package hold: slots held
	OpRestore   = "restore"   // a stored limit restored after an outage
	OpHeartbeat = "heartbeat" // the fleet's heartbeat
	OpProbe     = "probe"     // a probe of Redis while pacing locally
	OpConfirm   = "confirm"   // a ping confirming a timeout is an outage
	OpConfig    = "config"    // New's read of the server's maxmemory-policy
	OpAdaptive  = "adaptive"  // package adaptive's learned rate
	OpQuota     = "quota"     // package pacehttp's count of a provider's quota
	OpSeats     = "seats"     // an in-flight band's seats: taken, given back, renewed
)

// Ops lists every operation, in the order docs/otel.md lists them.
var Ops = []string{OpWait, OpAllow, OpReserve, OpSettle, OpCancel, OpLease, OpPause, OpPeek, OpCheck,
	OpClaim, OpHold, OpRestore, OpHeartbeat, OpProbe, OpConfirm, OpConfig, OpAdaptive, OpQuota, OpSeats}
