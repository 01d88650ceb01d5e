package pacertest_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacer-go/pacer/pacertest"
	"github.com/pacer-go/pacer/reserve"
	"golang.org/x/time/rate"
)

// The schedule of a Limit on a Store's Limiter against x/time/rate's
// Limiter (NewLimiter(Rate, Burst), ReserveN at the same instants): 240
// random limits, 30 reservations each, of random n up to the burst, at
// random instants (often at once, else up to a few bursts' refill apart).
// One reservation at a time, with Options.DisableCoalescing: a caller on a
// deep queue otherwise holds its call up to 500 µs for others to share
// it, which in a synctest bubble moves the instant it reserves at.
//
// pacer's slot is x/time/rate's rule in exact arithmetic, rounded up to
// the nanosecond; x/time/rate computes it in float64 and truncates it to
// the nanosecond. The two agree exactly where x/time/rate's arithmetic is
// exact (TestXRateExact), and pacer is on x/time/rate's exact schedule on
// the microsecond grid (TestXRateMicroseconds).

// xrateTrials runs the trials: limit draws a Limit, step rounds a step of
// time; check compares pacer's slot with x/time/rate's (both from now).
func xrateTrials(t *testing.T, seed uint64, limit func(*rand.Rand) reserve.Limit, step func(time.Duration) time.Duration,
	check func(l reserve.Limit, n int, now, ours, theirs time.Time) error) {
	synctest.Test(t, func(t *testing.T) {
		lim := pacertest.New(t, reserve.Options{DisableCoalescing: true})
		rng := rand.New(rand.NewPCG(seed, 44))
		compared := 0
		for trial := range 240 {
			l := limit(rng)
			ref := rate.NewLimiter(rate.Limit(l.Rate), l.Burst)
			key := fmt.Sprint("k", trial)
			interval := int64(float64(time.Second) / l.Rate)
			for range 30 {
				var d time.Duration
				switch rng.IntN(3) {
				case 1:
					d = time.Duration(rng.Int64N(2 * interval))
				case 2:
					d = time.Duration(rng.Int64N(int64(l.Burst+2) * interval))
				}
				time.Sleep(step(d))
				now := time.Now()
				n := 1 + rng.IntN(l.Burst)
				r, err := lim.ReserveN(context.Background(), reserve.Single(key, l, n))
				if err != nil {
					t.Fatal(err)
				}
				theirs := ref.ReserveN(now, n)
				if !theirs.OK() {
					t.Fatalf("x/time/rate refused n=%d of %+v", n, l)
				}
				if err := check(l, n, now, r.Time(), now.Add(theirs.DelayFrom(now))); err != nil {
					t.Fatalf("seed %d trial %d, %+v, n=%d at %v: %v", seed, trial, l, n, now, err)
				}
				compared++
			}
		}
		t.Logf("%d reservations compared", compared)
	})
}

// Where x/time/rate computes exactly, the slots are the same to the
// nanosecond: rates that are powers of two from 1/8 to 512 per second, and
// instants on a grid of 1/512 s (1,953,125 ns) from a whole second, where
// every interval, token count and delay is a float64 computed without
// rounding.
func TestXRateExact(t *testing.T) {
	xrateTrials(t, 1,
		func(rng *rand.Rand) reserve.Limit {
			return reserve.Limit{Rate: math.Ldexp(1, rng.IntN(13)-3), Burst: 1 + rng.IntN(40)}
		},
		func(d time.Duration) time.Duration { return d.Truncate(time.Second / 512) },
		func(l reserve.Limit, n int, now, ours, theirs time.Time) error {
			if !ours.Equal(theirs) {
				return fmt.Errorf("pacer's slot %v, x/time/rate's %v (%v)", ours.Sub(now), theirs.Sub(now), ours.Sub(theirs))
			}
			return nil
		})
}

// On the microsecond grid (every rate's interval and every instant a whole
// number of microseconds), x/time/rate's exact schedule is on that grid
// too: pacer's slots are on it, and are x/time/rate's rounded up to the
// microsecond, x/time/rate being up to 1 ns early where its float64
// arithmetic came out under the exact value and it truncated.
func TestXRateMicroseconds(t *testing.T) {
	early := 0
	xrateTrials(t, 2,
		func(rng *rand.Rand) reserve.Limit {
			us := 1 + rng.Int64N(2_000_000) // up to 2 s
			return reserve.Limit{Rate: 1e6 / float64(us), Burst: 1 + rng.IntN(40)}
		},
		func(d time.Duration) time.Duration { return d.Truncate(time.Microsecond) },
		func(l reserve.Limit, n int, now, ours, theirs time.Time) error {
			if ours.Sub(now)%time.Microsecond != 0 {
				return fmt.Errorf("pacer's slot %v is not a whole number of µs away", ours.Sub(now))
			}
			up := now.Add((theirs.Sub(now) + time.Microsecond - 1).Truncate(time.Microsecond))
			if !ours.Equal(up) || ours.Sub(theirs) > time.Nanosecond {
				return fmt.Errorf("pacer's slot %v, x/time/rate's %v (%v)", ours.Sub(now), theirs.Sub(now), ours.Sub(theirs))
			}
			if !ours.Equal(theirs) {
				early++
			}
			return nil
		})
	t.Logf("x/time/rate 1 ns early %d times", early)
}
