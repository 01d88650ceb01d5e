// Package adaptive learns a rate for a key whose limit the provider does not
// publish, and keeps it in Redis for the whole fleet: a Rate is a handle
// bound to one key of a reserve.Limiter, whose Limit is the one to pace the
// key's calls at now.
//
// The rate starts at Config.Start and doubles every Config.Double until the
// provider first refuses a call (slow start, as TCP's). Each episode of
// refusals (429s) then cuts it to Decrease times its rate w at that moment,
// and it follows CUBIC's curve back: fast at first, level near Plateau
// times w (just below the rate refused) around Recover after the cut, then
// probing beyond it, slowly and then faster, until the next episode. A cut
// below the previous plateau (the limit fell) aims lower still (CUBIC's
// fast convergence). The rate stays within [Min, Max].
// Its growth beyond Start in slow start, and its probing beyond the
// plateau after a cut, stay within twice the calls the fleet made on the
// key in the last whole second: a key called less often than its rate allows tells nothing
// about the limit above that, so its rate does not grow there unseen, to
// hit the provider at once when the demand comes back (RFC 7661's rule for
// an application-limited flow).
//
// An episode is counted once, by the first process to report it (Rate.Cut):
// reports within Episode of a cut come from calls sent before it and change
// nothing, unless the refused call was paced below the midpoint between the
// rate cut from and the rate cut to: it was sent at the rate the cut left,
// and that rate is still too high (the limit fell further than one cut),
// so it cuts again at once. Every process reads the shared rate (Rate.Limit) at most once
// per Config.Refresh (100 ms), and its calls meanwhile take the rate it
// read, counted as demand with its next read: the fleet follows a cut
// within Refresh, at one Redis call per process per Refresh. The rate given
// changes in steps (Config.Steps, 16 a doubling), so that calls at one
// rate share a Limit, which reserve needs to batch them and to lease.
//
// CUBIC rather than AIMD: every episode costs the provider's pause (its
// Retry-After) on top of the refused calls, so episodes must be rare; a
// linear climb either returns to the limit slowly or overshoots it often,
// while CUBIC's curve is back near the limit within a few seconds and then
// stays there. One controller serves the whole fleet (the state is in
// Redis), so the fleet's processes do not compete as TCP flows do.
//
// Package pacehttp uses it for Options.Adaptive: a host's 429s cut its rate.
package adaptive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// Config is how a key's rate is learned. Start, Min and Max are required;
// every other field has a default.
type Config struct {
	Start, Min, Max float64 // units per second; 0 < Min <= Start <= Max
	// Burst is the bucket's burst at every rate. Default 1.
	Burst int
	// Double is slow start's doubling time. Default 2 s.
	Double time.Duration
	// Decrease multiplies the rate on a cut, in (0, 1). Default 0.75,
	// measured between 0.8 (more refusals after a limit falls) and 0.7
	// (CUBIC's, RFC 9438: less of the limit held between episodes); see
	// docs/http.md.
	Decrease float64
	// Plateau is where the curve levels off after a cut, as a fraction of
	// the rate w the refused call was paced at, in (Decrease, 1]. Default 0.95:
	// a provider that refused w refuses it again, so the curve levels off
	// just below it (at 1, CUBIC's, it comes back to w within Recover and
	// costs another episode each time). After a cut below the last
	// plateau (the limit fell) it levels off at the lower of Plateau and
	// (1 + Decrease) / 2 times w (CUBIC's fast convergence).
	Plateau float64
	// Recover is how long after a cut the rate is back at what it was cut
	// from (CUBIC's K). Default 10 s: 87% of it is back 2 s after a cut.
	Recover time.Duration
	// Episode is how long after a cut further refusals count as the same
	// episode. Default 2 s: longer than a refused call's round trip and a
	// provider's usual 1 s Retry-After.
	Episode time.Duration
	// Forget is how long the learned rate is kept after the key's last call
	// (a read by Limit, or a cut); then the fleet starts again from Start.
	// Default 24 h.
	Forget time.Duration
	// Steps is how many rates a doubling holds: the rate given to callers
	// is the learned one rounded to the nearest Start x 2^(k/Steps) for a
	// whole k (within [Min, Max]), so that it changes in steps and the
	// calls made at one rate share a bucket, batch and lease (reserve
	// coalesces calls only with the same Limit). Default 16 (steps of
	// 4.4%: the rate given is within 2.2% of the rate learned); negative:
	// the learned rate as it is.
	Steps int
	// Refresh is how long a rate read from Redis serves a Rate's calls:
	// within it Limit and Peek call Redis no more, and the calls Limit
	// counted are sent as demand with the next read. A cut is read at once
	// by the process that makes it, and by the others within Refresh.
	// Default 100 ms; negative: every call reads.
	Refresh time.Duration
	// Observer, if set, is told the fleet's learned rate each time a Rate
	// reads it from Redis or cuts it: at most once per Refresh per process,
	// and once per cut. It is for a gauge (package otelpacer's Telemetry is
	// one). Default nil.
	Observer Observer
}

// An Observer is told the learned rates (Config.Observer). It must be fast
// and safe for concurrent use.
type Observer interface {
	// ObserveRate is called with the key and its learned rate, in units
	// per second, before Config.Steps.
	ObserveRate(key string, rate float64)
}

// Validate reports whether c is usable, with an error matching
// reserve.ErrInvalidRate, ErrInvalidBurst or ErrInvalidOptions.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

func (a Config) withDefaults() (Config, error) {
	bad := func(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }
	if bad(a.Start) || bad(a.Min) || bad(a.Max) || a.Min <= 0 || a.Start < a.Min || a.Max < a.Start {
		return a, fmt.Errorf("%w: adaptive: Start %v, Min %v, Max %v (want 0 < Min <= Start <= Max, finite)", reserve.ErrInvalidRate, a.Start, a.Min, a.Max)
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
		a.Decrease = 0.75
	}
	if a.Plateau == 0 {
		a.Plateau = 0.95
	}
	if a.Episode == 0 {
		a.Episode = 2 * time.Second
	}
	if a.Forget == 0 {
		a.Forget = 24 * time.Hour
	}
	if a.Steps == 0 {
		a.Steps = 16
	}
	if a.Refresh == 0 {
		a.Refresh = 100 * time.Millisecond
	}
	switch {
	case a.Burst < 1:
		return a, fmt.Errorf("%w: adaptive: Burst %d", reserve.ErrInvalidBurst, a.Burst)
	case !(a.Decrease > 0 && a.Decrease < 1):
		return a, fmt.Errorf("%w: adaptive: Decrease %v (want 0 < Decrease < 1)", reserve.ErrInvalidRate, a.Decrease)
	case !(a.Plateau > a.Decrease && a.Plateau <= 1):
		return a, fmt.Errorf("%w: adaptive: Plateau %v, Decrease %v (want Decrease < Plateau <= 1)", reserve.ErrInvalidRate, a.Plateau, a.Decrease)
	case a.Episode < 0 || a.Forget < time.Millisecond || a.Double < time.Millisecond || a.Recover < time.Millisecond:
		return a, fmt.Errorf("%w: adaptive: Episode %v, Forget %v, Double %v, Recover %v", reserve.ErrInvalidOptions, a.Episode, a.Forget, a.Double, a.Recover)
	}
	return a, nil
}

var script = redis.NewScript(lua.Adaptive)

// A Rate is the fleet's learned rate for one key, read and cut through a
// Limiter. It is safe for concurrent use; create one per key with New and
// keep it (it remembers the last rate it read, which it gives while Redis
// cannot be reached).
type Rate struct {
	l    *reserve.Limiter
	key  string
	cfg  Config
	args []any // the script's arguments after the operation, fixed by cfg

	mu      sync.Mutex
	last    float64   // the last rate read, peeked or cut (before steps); 0: none yet
	seen    time.Time // when it was
	read    time.Time // when the last read (which sends the demand) was
	pending int       // calls counted by Limit since, not yet sent as demand
	reading bool      // a read is on its way
}

// New returns the Rate of key on l, learned as c says. It checks c and the
// key, and fails at once with an error matching reserve.ErrInvalidRate,
// ErrInvalidBurst or ErrInvalidOptions (c), or reserve.ErrEmptyKey or
// reserve.ErrReservedKey (key "limiters" names the fleet's records). It does
// not call Redis.
func New(l *reserve.Limiter, key string, c Config) (*Rate, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: adaptive: nil Limiter", reserve.ErrInvalidOptions)
	}
	if err := hook.CheckKey(key); err != nil {
		return nil, fmt.Errorf("adaptive: %w", err)
	}
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	return &Rate{l: l, key: key, cfg: c, args: []any{f(c.Start), f(c.Min), f(c.Max), c.Recover.Milliseconds(), f(c.Decrease),
		c.Episode.Milliseconds(), c.Forget.Milliseconds(), c.Double.Milliseconds()}}, nil
}

// Key returns the key the rate is learned for.
func (r *Rate) Key() string { return r.key }

// Limit returns the Limit the key is paced at now: the fleet's learned rate,
// read from Redis, with Config.Burst. Call it once per call made on the
// key: each call counts one call of the fleet's demand. While Redis cannot
// be reached it returns the last rate it read (or Config.Start) and no
// error: the reservation made with it is paced locally anyway, at the
// fleet's share (unless the Limiter fails closed).
func (r *Rate) Limit(ctx context.Context) (reserve.Limit, error) {
	if lim, ok := r.cached(true); ok {
		return lim, nil
	}
	lim, _, err := r.adapt(ctx, "read", 0)
	return lim, err
}

// cached returns the last rate read, if it still serves (Config.Refresh),
// and counts one call of demand if count; or false, when this call must
// read: none was read, or it is stale and no other read is on its way (a
// call that finds one on its way takes the stale rate, as every call did
// until then).
func (r *Rate) cached(count bool) (reserve.Limit, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Limit reads once per Refresh, whatever peeks and cuts came since:
	// its read carries the demand. Peek takes any rate fetched within it.
	since := r.seen
	if count {
		since = r.read
	}
	if r.last == 0 || r.cfg.Refresh < 0 || time.Since(since) >= r.cfg.Refresh && !r.reading {
		if r.last != 0 && r.cfg.Refresh >= 0 {
			r.reading = true
		}
		return reserve.Limit{}, false
	}
	if count {
		r.pending++
	}
	return r.limit(r.last), true
}

// limit is the Limit for the learned rate: stepped (Config.Steps), on the
// lattice Start x 2^(k/Steps), to the nearest step, within [Min, Max]; Min
// and Max themselves are given as they are.
func (r *Rate) limit(rate float64) reserve.Limit {
	if r.cfg.Steps > 0 && rate > r.cfg.Min && rate < r.cfg.Max {
		n := float64(r.cfg.Steps)
		k := math.Round(math.Log2(rate/r.cfg.Start) * n)
		rate = min(max(r.cfg.Start*math.Exp2(k/n), r.cfg.Min), r.cfg.Max)
	}
	return reserve.Limit{Rate: rate, Burst: r.cfg.Burst}
}

// Peek returns the Limit the key is paced at now, as Limit does, but counts
// no call of demand and writes nothing: for a caller that counted its call
// already, or a dashboard.
func (r *Rate) Peek(ctx context.Context) (reserve.Limit, error) {
	if lim, ok := r.cached(false); ok {
		return lim, nil
	}
	lim, _, err := r.adapt(ctx, "peek", 0)
	return lim, err
}

// Cut reports a refusal (a 429) on the key: the first report of an episode
// cuts the fleet's rate to Config.Decrease times the lower of the rate now
// and paced, and returns cut true; later reports within Config.Episode
// change nothing, but for a call paced below the midpoint of the last cut
// (sent at the rate the cut left: it cuts again). paced is the rate the
// refused call was reserved at (0 if unknown): a call that waited for its
// slot was sent at that rate, and in slow start the rate may have doubled
// since. It returns the rate in force
// after the report. While Redis cannot be reached nothing is cut: the fleet
// paces locally at its share of the last rate, and the provider's pause
// (reserve.Limiter.Pause) does the rest.
func (r *Rate) Cut(ctx context.Context, paced float64) (lim reserve.Limit, cut bool, err error) {
	if math.IsNaN(paced) || math.IsInf(paced, 0) || paced < 0 {
		return reserve.Limit{}, false, fmt.Errorf("%w: adaptive cut paced at %v (want >= 0)", reserve.ErrInvalidRate, paced)
	}
	return r.adapt(ctx, "cut", paced)
}

func (r *Rate) adapt(ctx context.Context, op string, paced float64) (reserve.Limit, bool, error) {
	r.mu.Lock()
	demand := 0
	if op == "read" {
		// The calls served since the last read go with this one (a peek
		// or a cut counts none: they stay for the next read).
		demand, r.pending = r.pending+1, 0
	}
	r.mu.Unlock()
	args := append([]any{op}, r.args...)
	args = append(args, strconv.FormatFloat(paced, 'f', -1, 64), demand, strconv.FormatFloat(r.cfg.Plateau, 'f', -1, 64))
	keys := []string{r.l.RedisKey(r.key) + ":rate"}
	res, err := hook.Run(r.l, ctx, names.OpAdaptive, r.key, func(ctx context.Context, rdb redis.Scripter) (any, error) {
		return script.Run(ctx, rdb, keys, args...).Result()
	})
	if errors.Is(err, reserve.ErrUnavailable) && !hook.FailClosed(r.l) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.reading = false
		return r.limit(cmpOr(r.last, r.cfg.Start)), false, nil
	}
	if err != nil {
		r.mu.Lock()
		r.reading = false
		r.mu.Unlock()
		return reserve.Limit{}, false, err
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 3 {
		return reserve.Limit{}, false, fmt.Errorf("adaptive: %q: unexpected reply %v", r.key, res)
	}
	s, _ := reply[0].(string)
	rate, perr := strconv.ParseFloat(s, 64)
	cut, _ := reply[1].(int64)
	if perr != nil || rate <= 0 {
		return reserve.Limit{}, false, fmt.Errorf("adaptive: %q: unexpected rate %v", r.key, reply[0])
	}
	r.mu.Lock()
	r.last, r.seen, r.reading = rate, time.Now(), false
	if op == "read" {
		r.read = r.seen
	}
	r.mu.Unlock()
	if r.cfg.Observer != nil {
		r.cfg.Observer.ObserveRate(r.key, rate)
	}
	return r.limit(rate), cut == 1, nil
}

func cmpOr(a, b float64) float64 {
	if a != 0 {
		return a
	}
	return b
}
