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
// does not publish: additive increase, multiplicative decrease (AIMD), kept
// in Redis for the whole fleet. The rate starts at Start and grows by
// Increase units/s every second up to Max; each episode of refusals (429s)
// multiplies it by Decrease, down to Min. An episode is counted once, by
// the first process to report it (Limiter.CutAdaptive): reports within
// Episode of a cut come from calls sent before it and change nothing.
// Every process reads the shared rate before each reservation
// (Limiter.AdaptiveLimit), so the fleet follows a cut on its next call.
//
// AIMD rather than CUBIC: one controller serves the whole fleet, so CUBIC's
// fairness between competing flows buys nothing, and a linear climb makes
// each episode's overshoot small and predictable (Increase times the time
// it takes a refusal to come back).
type Adaptive struct {
	Start, Min, Max float64 // units per second; 0 < Min <= Start <= Max
	// Burst is the bucket's burst at every rate. Default 1.
	Burst int
	// Increase is the units/s the rate gains every second without a cut.
	// Default Start/4: from a cut of a fifth, the rate is back in 0.8 ×
	// rate / Increase seconds.
	Increase float64
	// Decrease multiplies the rate on a cut, in (0, 1). Default 0.8.
	Decrease float64
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
	if a.Increase == 0 {
		a.Increase = a.Start / 4
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
	case bad(a.Increase) || a.Increase < 0:
		return a, fmt.Errorf("%w: adaptive Increase %v (want >= 0)", ErrInvalidRate, a.Increase)
	case !(a.Decrease > 0 && a.Decrease < 1):
		return a, fmt.Errorf("%w: adaptive Decrease %v (want 0 < Decrease < 1)", ErrInvalidRate, a.Decrease)
	case a.Episode < 0 || a.Forget < time.Millisecond:
		return a, fmt.Errorf("%w: adaptive Episode %v, Forget %v", ErrInvalidOptions, a.Episode, a.Forget)
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
// rate (see Adaptive), read from Redis. While Redis cannot be reached it
// returns the last rate it read for key (or a.Start) and no error: the
// reservation made with it is paced locally anyway, at the fleet's share.
func (l *Limiter) AdaptiveLimit(ctx context.Context, key string, a Adaptive) (Limit, error) {
	lim, _, err := l.adapt(ctx, "read", key, a)
	return lim, err
}

// CutAdaptive reports a refusal (a 429) on key: the first report of an
// episode cuts the fleet's rate by a.Decrease and returns cut true; later
// reports within a.Episode change nothing. It returns the rate in force
// after the report. While Redis cannot be reached nothing is cut: the
// fleet paces locally at its share of the last rate, and the provider's
// pause (Limiter.Pause) does the rest.
func (l *Limiter) CutAdaptive(ctx context.Context, key string, a Adaptive) (lim Limit, cut bool, err error) {
	return l.adapt(ctx, "cut", key, a)
}

func (l *Limiter) adapt(ctx context.Context, op, key string, a Adaptive) (Limit, bool, error) {
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
	args := []any{op, formatFloat(a.Start), formatFloat(a.Min), formatFloat(a.Max), formatFloat(a.Increase), formatFloat(a.Decrease),
		a.Episode.Milliseconds(), a.Forget.Milliseconds()}
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
	l.adaptive.mu.Lock()
	if l.adaptive.rates == nil {
		l.adaptive.rates = map[string]float64{}
	}
	l.adaptive.rates[key] = rate
	l.adaptive.mu.Unlock()
	return Limit{Rate: rate, Burst: a.Burst}, cut == 1, nil
}
