package reserve

import (
	"fmt"
	"math"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
)

// Limit is a token bucket: on average Rate units per second, with at most
// Burst units stored for use at once. It has the meaning of
// golang.org/x/time/rate's NewLimiter(Rate, Burst).
//
// Over any interval of length T, the slots a Limit hands out hold at most
// Burst + Rate*T units. A provider that allows "N calls in any window of
// length W" is therefore met by Sliding(N, W), which keeps Burst + Rate*W at
// N; Limit{Rate: N/W} would let N+1 into some windows.
//
// Callers sharing a key should pass the same Limit. If they do not, each call
// reads the shared state with its own Limit: slots already handed out keep
// their times and the new rate applies from there on.
type Limit struct {
	Rate  float64 // units per second, > 0 and finite
	Burst int     // units, >= 1
}

// Every returns the Limit of one unit per interval, burst 1, as
// x/time/rate's Every gives its rate: Every(100 * time.Millisecond) is
// Limit{Rate: 10, Burst: 1}. Set Burst on the result for more. A zero or
// negative interval gives a Limit with rate 0, which every call refuses
// (ErrInvalidRate; see Validate).
func Every(interval time.Duration) Limit {
	if interval <= 0 {
		return Limit{Burst: 1}
	}
	return Limit{Rate: float64(time.Second) / float64(interval), Burst: 1}
}

// Sliding returns the smoothest Limit that never lets more than n calls into
// any window of length w, as a provider counting a sliding window (or a
// strict per-second limit) enforces: Burst 1 and Rate (n-1)/w, so that
// Burst + Rate*w = n. n must be at least 2 and w positive; the result is
// checked (Validate). For windows the provider aligns (a quota that resets
// every hour on the hour), a Window band is exact and uses all n.
func Sliding(n int, w time.Duration) (Limit, error) {
	if n < 2 || w <= 0 {
		return Limit{}, fmt.Errorf("%w: Sliding(%d, %v): want n >= 2 calls in a window w > 0", ErrInvalidRate, n, w)
	}
	lim := Limit{Rate: float64(n-1) / w.Seconds(), Burst: 1}
	if err := lim.Validate(); err != nil {
		return Limit{}, fmt.Errorf("reserve: Sliding(%d, %v): %w", n, w, err)
	}
	return lim, nil
}

// maxFill is the longest time an empty bucket may take to fill. It keeps every
// duration the scripts compute far inside a double's exact range.
const maxFill = layout.MaxFill

// maxRate and maxBurst bound a Limit: slots lie on a ns grid, so a rate
// over one unit per ns means nothing, and a burst over 2^30 would not fit
// the stored limit's form that every Limiter reads back.
const (
	maxRate  = 1e9
	maxBurst = 1 << 30
)

// Validate reports whether l is usable, with one of ErrInvalidRate (the
// rate must be positive, finite and at most 1e9 per second), ErrInvalidBurst
// (from 1 to 2^30) or ErrInvalidLimit.
func (l Limit) Validate() error {
	if math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Rate <= 0 || l.Rate > maxRate {
		return fmt.Errorf("%w (got %v; at most %g)", ErrInvalidRate, l.Rate, float64(maxRate))
	}
	if l.Burst < 1 || l.Burst > maxBurst {
		return fmt.Errorf("%w (got %d; at most %d)", ErrInvalidBurst, l.Burst, maxBurst)
	}
	if float64(l.Burst)/l.Rate > maxFill.Seconds() {
		return fmt.Errorf("%w (rate %v, burst %d)", ErrInvalidLimit, l.Rate, l.Burst)
	}
	return nil
}
