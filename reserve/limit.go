package reserve

import (
	"fmt"
	"math"
	"time"
)

// Limit is the rate a key may be used at: on average Rate permits per second,
// with at most Burst permits stored for use at once. It has the meaning of
// golang.org/x/time/rate's NewLimiter(Rate, Burst).
//
// Callers sharing a key should pass the same Limit. If they do not, each call
// reads the shared state with its own Limit: slots already handed out keep
// their times and the new rate applies from there on.
type Limit struct {
	Rate  float64 // permits per second, > 0 and finite
	Burst int     // permits, >= 1
}

// Every returns the rate of one permit per interval, for use as Limit.Rate:
// Limit{Rate: reserve.Every(100 * time.Millisecond), Burst: 1}.
// A zero or negative interval gives an invalid rate.
func Every(interval time.Duration) float64 {
	if interval <= 0 {
		return 0
	}
	return float64(time.Second) / float64(interval)
}

// maxFill is the longest time an empty bucket may take to fill. It keeps every
// duration the scripts compute far inside a double's exact range.
const maxFill = 10 * 365 * 24 * time.Hour

// Validate reports whether l is usable, with one of ErrInvalidRate,
// ErrInvalidBurst or ErrInvalidLimit.
func (l Limit) Validate() error {
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate <= 0 {
		return fmt.Errorf("%w (got %v)", ErrInvalidRate, l.Rate)
	}
	if l.Burst < 1 {
		return fmt.Errorf("%w (got %d)", ErrInvalidBurst, l.Burst)
	}
	if float64(l.Burst)/l.Rate > maxFill.Seconds() {
		return fmt.Errorf("%w (rate %v, burst %d)", ErrInvalidLimit, l.Rate, l.Burst)
	}
	return nil
}

// validate checks the arguments every operation on a key shares.
func validate(key string, l Limit, n int) error {
	if key == "" {
		return ErrEmptyKey
	}
	if err := l.Validate(); err != nil {
		return err
	}
	if n < 1 {
		return fmt.Errorf("%w (got %d)", ErrInvalidN, n)
	}
	if n > l.Burst {
		return fmt.Errorf("%w (n %d, burst %d)", ErrExceedsBurst, n, l.Burst)
	}
	return nil
}
