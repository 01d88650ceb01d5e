package reserve

import (
	"errors"
	"fmt"
	"time"
)

// Errors for bad input. Each is returned before Redis is called, so a call
// that fails with one of them has changed nothing. Match them with errors.Is.
var (
	ErrInvalidRate     = errors.New("reserve: rate must be positive and finite")
	ErrInvalidBurst    = errors.New("reserve: burst must be at least 1")
	ErrInvalidLimit    = errors.New("reserve: burst/rate is too long (over 10 years to fill the bucket)")
	ErrInvalidN        = errors.New("reserve: n must be at least 1")
	ErrExceedsBurst    = errors.New("reserve: n exceeds burst")
	ErrEmptyKey        = errors.New("reserve: empty key")
	ErrInvalidDuration = errors.New("reserve: duration must be positive")
	ErrInvalidPrefix   = errors.New("reserve: key prefix must not contain '{' or '}'")
)

// ErrWrongType is returned when the Redis key of a bucket holds a value of
// another type (something else uses the name). The value is left as it is.
var ErrWrongType = errors.New("reserve: redis key holds a value of another type")

// ErrUnavailable is matched by the errors of calls that could not reach
// Redis (refused, reset, timed out, a node loading or failing over), and of
// every call while a Limiter with Options.FailClosed is pacing locally. The
// error also wraps the cause when there is one.
var ErrUnavailable = errors.New("reserve: redis unavailable")

// ErrQueueTooLong is returned when a reservation would wait more than 30
// years: the key's queue (or a pause) is absurdly long, and the times would
// leave the range the scripts keep exact. Nothing is reserved.
var ErrQueueTooLong = errors.New("reserve: the queue on this key is over 30 years long")

// ErrClosed is returned by every call on a Limiter after Close.
var ErrClosed = errors.New("reserve: limiter closed")

// WaitTooLongError is returned by TryReserve (and, wrapped, by Wait and
// WaitN when the context's deadline is too near) when the reservation would
// have to wait longer than allowed. Nothing was reserved.
type WaitTooLongError struct {
	Wait    time.Duration // the wait the reservation would have had
	MaxWait time.Duration // the longest wait that was allowed
}

func (e *WaitTooLongError) Error() string {
	return fmt.Sprintf("reserve: wait %v exceeds maximum %v", e.Wait, e.MaxWait)
}
