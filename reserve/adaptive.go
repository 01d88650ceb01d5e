package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Adaptive is a rate the fleet learns for a key whose limit the provider
// does not publish, kept in Redis for the whole fleet. It starts at Start
// and doubles every Double until the provider first refuses a call (slow
// start, as TCP's). Each episode of refusals (429s) then cuts it to
// Decrease times its rate w at that moment, and it follows CUBIC's curve
// back: fast at first, level near w around Recover after the cut, then
// probing beyond w, slowly and then faster, until the next episode. A cut
// below the previous w (the limit fell) aims lower still (CUBIC's fast
// convergence). The rate stays within [Min, Max]. Its probing beyond w
// stays within twice the calls the fleet made on the key in the last whole
// second: a key called less often than its rate allows tells nothing about
// the limit above that, so its rate does not grow there unseen, to hit the
// provider at once when the demand comes back (RFC 7661's rule for an
// application-limited flow).
//
// An episode is counted once, by the first process to report it
// (Limiter.CutAdaptive): reports within Episode of a cut come from calls
// sent before it and change nothing. Every process reads the shared rate
// before each reservation (Limiter.AdaptiveLimit), so the fleet follows a
// cut on its next call.
//
// CUBIC rather than AIMD: every episode costs the provider's pause (its
// Retry-After) on top of the refused calls, so episodes must be rare; a
// linear climb either returns to the limit slowly or overshoots it often,
// while CUBIC's curve is back near the limit within a few seconds and then
// stays there. One controller serves the whole fleet (the state is in
// Redis), so the fleet's processes do not compete as TCP flows do.
type Adaptive struct {
	Start, Min, Max float64 // units per second; 0 < Min <= Start <= Max
	// Burst is the bucket's burst at every rate. Default 1.
	Burst int
	// Double is slow start's doubling time. Default 2 s.
	Double time.Duration
	// Decrease multiplies the rate on a cut, in (0, 1). Default 0.8.
	Decrease float64
	// Recover is how long after a cut the rate is back at what it was cut
	// from (CUBIC's K). Default 10 s: 90% of it is back 2 s after a cut.
	Recover time.Duration
	// Episode is how long after a cut further refusals count as the same
	// episode. Default 2 s: longer than a refused call's round trip and a
	// provider's usual 1 s Retry-After.
	Episode time.Duration
	// Forget is how long the learned rate is kept after its last cut; then
	// the fleet starts again from Start. Default 24 h.
	Forget time.Duration
}

func (a Adaptive) withDefaults() (Adaptive, error) {
	bad := func(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }
	if bad(a.Start) || bad(a.Min) || bad(a.Max) || a.Min <= 0 || a.Start < a.Min || a.Max < a.Start {
		return a, fmt.Errorf("%w: adaptive Start %v, Min %v, Max %v (want 0 < Min <= Start <= Max, finite)", ErrInvalidRate, a.Start, a.Min, a.Max)
	}
	if a.Burst == 0 {
		a.Burst = 1
	}
	if a.Recover == 0 {
		a.Recover = 10 * time.Second
	}
	if a.Double == 0 {
		a.Double = 2 * time.Second
	}
	if a.Decrease == 0 {
		a.Decrease = 0.8
	}
	if a.Episode == 0 {
		a.Episode = 2 * time.Second
	}
	if a.Forget == 0 {
		a.Forget = 24 * time.Hour
	}
	switch {
	case a.Burst < 1:
		return a, fmt.Errorf("%w: adaptive Burst %d", ErrInvalidBurst, a.Burst)
	case !(a.Decrease > 0 && a.Decrease < 1):
		return a, fmt.Errorf("%w: adaptive Decrease %v (want 0 < Decrease < 1)", ErrInvalidRate, a.Decrease)
	case a.Episode < 0 || a.Forget < time.Millisecond || a.Double < time.Millisecond || a.Recover < time.Millisecond:
		return a, fmt.Errorf("%w: adaptive Episode %v, Forget %v, Double %v, Recover %v", ErrInvalidOptions, a.Episode, a.Forget, a.Double, a.Recover)
	}
	return a, nil
}

var adaptiveScript = redis.NewScript(lua.Adaptive)

// adaptiveRates is the last rate each key's record gave this Limiter: what
// AdaptiveLimit returns while Redis cannot be reached.
type adaptiveRates struct {
	mu    sync.Mutex
	rates map[string]float64
}

// AdaptiveLimit returns the Limit key is paced at now: the fleet's learned
// rate (see Adaptive), read from Redis. Call it once per call made on key:
// each call counts one call of the fleet's demand. While Redis cannot be reached it
// returns the last rate it read for key (or a.Start) and no error: the
// reservation made with it is paced locally anyway, at the fleet's share.
func (l *Limiter) AdaptiveLimit(ctx context.Context, key string, a Adaptive) (Limit, error) {
	lim, _, err := l.adapt(ctx, "read", key, a, 0)
	return lim, err
}

// PeekAdaptive returns the Limit key is paced at now, as AdaptiveLimit
// does, but counts no call of demand and writes nothing: for a caller that
// counted its call already, or a dashboard.
func (l *Limiter) PeekAdaptive(ctx context.Context, key string, a Adaptive) (Limit, error) {
	lim, _, err := l.adapt(ctx, "peek", key, a, 0)
	return lim, err
}

// CutAdaptive reports a refusal (a 429) on key: the first report of an
// episode cuts the fleet's rate to a.Decrease times the lower of the rate
// now and paced, and returns cut true; later reports within a.Episode
// change nothing. paced is the rate the refused call was reserved at (0 if
// unknown): a call that waited for its slot was sent at that rate, and in
// slow start the rate may have doubled since. It returns the rate in force
// after the report. While Redis cannot be reached nothing is cut: the
// fleet paces locally at its share of the last rate, and the provider's
// pause (Limiter.Pause) does the rest.
func (l *Limiter) CutAdaptive(ctx context.Context, key string, a Adaptive, paced float64) (lim Limit, cut bool, err error) {
	if math.IsNaN(paced) || math.IsInf(paced, 0) || paced < 0 {
		return Limit{}, false, fmt.Errorf("%w: adaptive cut paced at %v (want >= 0)", ErrInvalidRate, paced)
	}
	return l.adapt(ctx, "cut", key, a, paced)
}

func (l *Limiter) adapt(ctx context.Context, op, key string, a Adaptive, paced float64) (Limit, bool, error) {
	if err := checkKey(key); err != nil {
		return Limit{}, false, err
	}
	a, err := a.withDefaults()
	if err != nil {
		return Limit{}, false, err
	}
	last := func() Limit {
		l.adaptive.mu.Lock()
		defer l.adaptive.mu.Unlock()
		if r, ok := l.adaptive.rates[key]; ok {
			return Limit{Rate: r, Burst: a.Burst}
		}
		return Limit{Rate: a.Start, Burst: a.Burst}
	}
	args := []any{op, formatFloat(a.Start), formatFloat(a.Min), formatFloat(a.Max), a.Recover.Milliseconds(), formatFloat(a.Decrease),
		a.Episode.Milliseconds(), a.Forget.Milliseconds(), a.Double.Milliseconds(), formatFloat(paced)}
	res, err := l.run(ctx, "adaptive", key, func(ctx context.Context) (any, error) {
		return adaptiveScript.Run(ctx, l.rdb, []string{l.RedisKey(key) + ":rate"}, args...).Result()
	}, nil)
	if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		return last(), false, nil
	}
	if err != nil {
		return Limit{}, false, err
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 3 {
		return Limit{}, false, fmt.Errorf("reserve: adaptive %q: unexpected reply %v", key, res)
	}
	s, _ := reply[0].(string)
	rate, perr := strconv.ParseFloat(s, 64)
	cut, _ := reply[1].(int64)
	if perr != nil || rate <= 0 {
		return Limit{}, false, fmt.Errorf("reserve: adaptive %q: unexpected rate %v", key, reply[0])
	}
	l.adaptive.remember(key, rate)
	return Limit{Rate: rate, Burst: a.Burst}, cut == 1, nil
}

// maxAdaptiveKeys bounds the rates remembered: a crawler's keys come and
// go (issue 21, finding 18: the map grew without bound).
const maxAdaptiveKeys = 10_000

// remember records key's rate, forgetting every other when the map is full
// (the rates are only a fallback while Redis cannot be reached: a key
// forgotten starts again from Adaptive.Start then).
func (a *adaptiveRates) remember(key string, rate float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rates == nil || (len(a.rates) >= maxAdaptiveKeys && a.rates[key] == 0) {
		a.rates = map[string]float64{}
	}
	a.rates[key] = rate
}
