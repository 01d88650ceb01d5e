package reserve

import (
	"errors"
	"fmt"
	"time"
)

// Errors for bad input. Each is returned before Redis is called, so a call
// that fails with one of them has changed nothing. Match them with errors.Is.
var (
	ErrInvalidRate   = errors.New("reserve: rate must be positive, finite and at most 1e9/s")
	ErrInvalidBurst  = errors.New("reserve: burst must be from 1 to 2^30")
	ErrInvalidLimit  = errors.New("reserve: burst/rate is too long (over 10 years to fill the bucket)")
	ErrInvalidWindow = errors.New("reserve: a window needs N >= 1 and a length from 1µs to 10 years")
	ErrInvalidPolicy = errors.New("reserve: invalid policy")
	ErrInvalidN      = errors.New("reserve: n must be at least 1")
	ErrInvalidCost   = errors.New("reserve: invalid cost")
	ErrExceedsBurst  = errors.New("reserve: n exceeds burst")
	ErrEmptyKey      = errors.New("reserve: empty key")
	// ErrReservedKey: the key "limiters" names the fleet's own records
	// under the prefix (docs/protocol.md): no key may use it.
	ErrReservedKey     = errors.New(`reserve: the key "limiters" is reserved for the fleet's records`)
	ErrInvalidDuration = errors.New("reserve: duration must be positive")
	ErrInvalidPrefix   = errors.New("reserve: key prefix must not contain '{' or '}'")
	ErrInvalidOptions  = errors.New("reserve: invalid options")
	ErrInvalidFairness = errors.New("reserve: invalid tenant, lane or weight")
)

// Errors of calls that reached no verdict. Match them with errors.Is.
var (
	// ErrWrongType is returned when a Redis key pacer uses for a key holds
	// a value of another type or format (something else uses the name).
	// The value is left as it is.
	ErrWrongType = errors.New("reserve: redis key holds a value of another type")

	// ErrUnavailable is matched by the errors of calls that could not reach
	// Redis when the Limiter may not pace locally (Options.FailClosed; New
	// with Options.RequireRedis), and by package admin's. Without
	// FailClosed a reservation never gets it: a caller who can wait waits
	// for Redis, or for a share; one that asked for a maximum wait
	// (TryReserveN) is refused when it passes, with a WaitTooLongError
	// naming OutageBinding. The error also wraps the cause when there is
	// one, such as the dial error.
	ErrUnavailable = errors.New("reserve: redis unavailable")

	// ErrQueueTooLong is returned when a reservation would wait more than
	// 30 years: the key's queue (or a pause) is absurdly long, and the times
	// would leave the range the scripts keep exact. Nothing is reserved.
	ErrQueueTooLong = errors.New("reserve: the queue on this key is over 30 years long")

	// ErrClosed is returned by every call on a Limiter after Close.
	ErrClosed = errors.New("reserve: limiter closed")

	// ErrStoredLimit is returned when the limit an operator stored for a
	// key (cmd/pacer set) cannot be read, or cannot take the call's cost,
	// or a tenant's stored weight (cmd/pacer weight) cannot be read.
	ErrStoredLimit = errors.New("reserve: the key's stored limit")

	// ErrDone is returned by Reservation.Cancel and Settle on a reservation
	// that was already settled, and by Settle on one already canceled.
	ErrDone = errors.New("reserve: reservation already canceled or settled")
)

// WaitTooLongError is returned by TryReserveN (and, wrapped, by Wait and
// WaitN when the context's deadline is too near) when the reservation would
// have to wait longer than allowed. Nothing was reserved.
type WaitTooLongError struct {
	Wait    time.Duration // the wait the reservation would have had
	MaxWait time.Duration // the longest wait that was allowed
	// Deadline is true when the maximum was the time left before the
	// context's deadline (Wait, Sleep), not a maxWait argument.
	Deadline bool
	// Band is the binding band: the band whose queue or window made the
	// wait, PauseBinding when a pause did, TurnBinding when a fair
	// request's turn did, OutageBinding when an outage did (this Limiter
	// has no share to pace on, and Wait is then only the soonest it may
	// have one: the maximum plus a quarter second), ""
	// when unknown (a refusal of package hold's claims).
	Band string

	cause error // with OutageBinding: why this Limiter has no share (shown, not wrapped: the refusal is the maximum's)
	// seats: Band is an in-flight band with no seat free; the wait, until
	// a call ends, is not known (Wait is the maximum, or 0).
	seats bool
}

func (e *WaitTooLongError) Error() string {
	why := ""
	if e.Band != "" {
		why = " (set by band " + e.Band + ")"
		switch e.Band {
		case PauseBinding:
			why = " (set by a pause)"
		case TurnBinding:
			why = " (set by the fair queue: the other tenants' turns)"
		case OutageBinding:
			why = " (set by an outage: this Limiter has no share of the limit to pace on until Redis answers)"
		}
	}
	cause := ""
	if e.cause != nil {
		cause = ": " + e.cause.Error()
	}
	if e.seats {
		limit := fmt.Sprintf("the maximum wait %v", e.MaxWait)
		if e.Deadline {
			limit = fmt.Sprintf("the %v left before the context's deadline", e.MaxWait)
		}
		return fmt.Sprintf("reserve: no seat of in-flight band %s came free within %s (a seat frees when a call ends)", e.Band, limit)
	}
	if e.Deadline {
		return fmt.Sprintf("reserve: wait %v%s exceeds the %v left before the context's deadline%s", e.Wait, why, e.MaxWait, cause)
	}
	return fmt.Sprintf("reserve: wait %v%s exceeds maximum %v%s", e.Wait, why, e.MaxWait, cause)
}

// scriptCodes maps the scripts' error codes (the first word of an error
// reply) to sentinels.
var scriptCodes = map[string]error{
	"PACER_WRONGTYPE": ErrWrongType,
	"PACER_EXCEEDS":   ErrStoredLimit, // the caller's cost was checked: only a stored limit can refuse it
	"PACER_CONFIG":    ErrStoredLimit,
	"PACER_CALENDAR":  ErrStoredLimit, // a stored limit's calendar band this Limiter had no table for: the next call sends it
	"WRONGTYPE":       ErrWrongType,   // a command Redis refused itself
}
