package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// limit is a workload's limit on its key.
type limit struct {
	Rate  float64 // permits per second
	Burst int
}

// A limiter is one way to pace calls on a key, run on each workload.
type limiter interface {
	// take asks once for one permit, without sleeping: one reservation
	// (pacer, x/time/rate) or one attempt (redis_rate, the fixed window).
	// ok is false when the attempt was refused.
	take(ctx context.Context, key string) (ok bool, err error)
	// wait returns once the caller may make its call: the loop a user of
	// the limiter writes.
	wait(ctx context.Context, key string) error
	close() error
}

// Kinds of limiter.
const (
	kindPacer  = "pacer"
	kindGCRA   = "redis_rate"
	kindWindow = "fixed window"
	kindLocal  = "x/time/rate"
)

// variant is one row of every table: a limiter and how it is configured.
type variant struct {
	Name string
	Kind string // kindPacer, kindGCRA, kindWindow or kindLocal
	Take string // what take runs, for the report
	Wait string // what wait runs
	// Redis is set when the limiter keeps its state in Redis.
	Redis bool
	// FleetOnly is set for a variant that differs from another only in the
	// fleet, where processes share the limit.
	FleetOnly bool
	// Memory is set for the variants whose per-key memory is measured (one
	// per kind of Redis state).
	Memory bool
	// OneProcess is set for the fleet's floor: the fleet's goroutines all
	// in one process, on one in-process limiter (what the machine's
	// scheduling alone costs, with no coordination to do).
	OneProcess bool
	// NoFleet leaves the variant out of the fleet's table.
	NoFleet bool
	// Uncounted is set when the limiter talks to Redis through a client of
	// its own, which the counting hook does not see: its round trips and
	// commands are not counted (Redis's time and CPU still are).
	Uncounted bool
	open      func(o openOptions) (limiter, error)
}

// openOptions is what a limiter is opened with.
type openOptions struct {
	rdb    *redis.Client
	url    string // where rdb connects, for a limiter that needs a client of its own
	lim    limit
	procs  int // processes sharing the limit
	log    *slog.Logger
	counts *pacerCounts // pacer's fallback to local pacing, counted
}

// pacerVariants are the pacer configurations measured, one row each; only
// their Options differ. The first is the one whose memory is measured (the
// Options do not change what a key holds). A fleetOnly variant differs in
// how Wait sleeps, which only the fleet measures.
var pacerVariants = []struct {
	name      string
	options   string // opts as Go source, for the report
	opts      reserve.Options
	fleetOnly bool
	// quickStart: on a client built as README's quick start builds it
	// (redis.NewClient(&redis.Options{Addr: ...}), go-redis's defaults),
	// which New clones with the settings pacer needs, instead of the
	// benchmark's tuned, counted client.
	quickStart bool
	// policy: each reservation is on threeBands (a policy of three bands
	// that allows what lim allows) instead of lim. Not in the fleet, whose
	// figures would be the same.
	policy bool
}{
	{name: "pacer", options: "reserve.Options{}", opts: reserve.Options{}},
	{
		name:       "pacer, quick-start client",
		options:    "reserve.Options{}` on `redis.NewClient(&redis.Options{Addr: addr})",
		opts:       reserve.Options{},
		quickStart: true,
	},
	{
		name:    "pacer, one script call per reservation",
		options: "reserve.Options{DisableCoalescing: true}",
		opts:    reserve.Options{DisableCoalescing: true},
	},
	{
		name:    "pacer, 3 bands, one script call per reservation",
		options: "reserve.Options{DisableCoalescing: true}",
		opts:    reserve.Options{DisableCoalescing: true},
		policy:  true,
	},
	{
		name:      "pacer, Go's timer only",
		options:   "reserve.Options{PreciseWake: -1}",
		opts:      reserve.Options{PreciseWake: -1},
		fleetOnly: true,
	},
}

// variants returns every limiter, in the order of the tables' rows.
func variants() []variant {
	var vs []variant
	for i, pv := range pacerVariants {
		take, wait := "`Limiter.Reserve(ctx, key, lim, 1)`", "`Limiter.Wait(ctx, key, lim)`: reserve a slot, sleep until it"
		if pv.policy {
			take = "`Limiter.ReserveN(ctx, reserve.Request{Key: key, Policy: pol, Cost: cost})` (pol: lim on requests, a tokens bucket that never binds, a daily quota)"
			wait = "`Limiter.WaitN(ctx, reserve.Request{Key: key, Policy: pol, Cost: cost})`"
		}
		vs = append(vs, variant{
			Name:      pv.name,
			Kind:      kindPacer,
			Take:      take + ", with `" + pv.options + "`",
			Wait:      wait,
			Redis:     true,
			Memory:    i == 0,
			FleetOnly: pv.fleetOnly,
			NoFleet:   pv.policy,
			// New makes a client of its own from the quick-start one
			// (go-redis's defaults are not what pacer needs), without
			// the benchmark's hook.
			Uncounted: pv.quickStart,
			open: func(o openOptions) (limiter, error) {
				opts := pv.opts
				opts.Logger = o.log
				opts.Metrics = o.counts
				var own *redis.Client
				rdb := o.rdb
				if pv.quickStart {
					u, err := redis.ParseURL(o.url)
					if err != nil {
						return nil, err
					}
					own = redis.NewClient(&redis.Options{Addr: u.Addr, DB: u.DB, Username: u.Username, Password: u.Password, TLSConfig: u.TLSConfig})
					rdb = own
				}
				l, err := reserve.New(rdb, opts)
				if err != nil {
					if own != nil {
						own.Close()
					}
					return nil, err
				}
				p := &pacerLimiter{l: l, own: own, lim: reserve.Limit{Rate: o.lim.Rate, Burst: o.lim.Burst}}
				if pv.policy {
					p.pol = threeBands(p.lim)
				}
				return p, nil
			},
		})
	}
	return append(vs,
		variant{
			Name:   "redis_rate (GCRA)",
			Kind:   kindGCRA,
			Take:   "`Limiter.Allow(ctx, key, lim)`",
			Wait:   "`Allow`; if not allowed, sleep `RetryAfter` and try again",
			Redis:  true,
			Memory: true,
			open: func(o openOptions) (limiter, error) {
				return &redisRate{l: redis_rate.NewLimiter(o.rdb), lim: gcraLimit(o.lim)}, nil
			},
		},
		variant{
			Name:   "fixed window (INCR+EXPIRE)",
			Kind:   kindWindow,
			Take:   "`MULTI; INCR key:window; EXPIRE key:window; EXEC` (the rate-limiter pattern of Redis's INCR page)",
			Wait:   "the same; if the count is over the limit, sleep until the window ends and try again",
			Redis:  true,
			Memory: true,
			open: func(o openOptions) (limiter, error) {
				w, n := windowOf(o.lim)
				return &fixedWindow{rdb: o.rdb, window: w, limit: n}, nil
			},
		},
		variant{
			Name: "x/time/rate, full rate per process",
			Kind: kindLocal,
			Take: "`Limiter.Reserve()` (in process, no Redis)",
			Wait: "`Limiter.Wait(ctx)`: each process on its own at the full rate",
			open: func(o openOptions) (limiter, error) {
				return &local{lim: o.lim}, nil
			},
		},
		variant{
			Name:      "x/time/rate, rate/procs per process",
			Kind:      kindLocal,
			Take:      "`Limiter.Reserve()` (in process, no Redis)",
			Wait:      "`Limiter.Wait(ctx)`: each process on its own at rate/processes, burst/processes (at least 1)",
			FleetOnly: true,
			open: func(o openOptions) (limiter, error) {
				procs := max(o.procs, 1)
				return &local{lim: limit{Rate: o.lim.Rate / float64(procs), Burst: max(o.lim.Burst/procs, 1)}}, nil
			},
		},
		variant{
			Name:       "x/time/rate, one process (the floor)",
			Kind:       kindLocal,
			Take:       "`Limiter.Reserve()` (in process, no Redis)",
			Wait:       "`Limiter.Wait(ctx)`: the fleet's goroutines all in one process, on one limiter at the full rate",
			FleetOnly:  true,
			OneProcess: true,
			open: func(o openOptions) (limiter, error) {
				return &local{lim: o.lim}, nil
			},
		},
	)
}

// findVariant returns the variant named name.
func findVariant(name string) (variant, error) {
	for _, v := range variants() {
		if v.Name == name {
			return v, nil
		}
	}
	return variant{}, fmt.Errorf("pacerbench: no limiter named %q", name)
}

// pacerLimiter is pacer's reserve.Limiter.
type pacerLimiter struct {
	l   *reserve.Limiter
	own *redis.Client // the quick-start client, closed with the limiter; or nil
	lim reserve.Limit
	pol reserve.Policy // threeBands(lim), or nil for lim
}

func (p *pacerLimiter) take(ctx context.Context, key string) (bool, error) {
	var err error
	if p.pol != nil {
		_, err = p.l.ReserveN(ctx, reserve.Request{Key: key, Policy: p.pol, Cost: threeBandsCost})
	} else {
		_, err = p.l.Reserve(ctx, key, p.lim)
	}
	return err == nil, err
}

func (p *pacerLimiter) wait(ctx context.Context, key string) error {
	if p.pol != nil {
		return p.l.WaitN(ctx, reserve.Request{Key: key, Policy: p.pol, Cost: threeBandsCost})
	}
	return p.l.Wait(ctx, key, p.lim)
}

// threeBands is an LLM-shaped policy that allows what lim allows: lim on
// requests, a bucket of tokens at 1,000 times lim (a call takes 500 of
// them, so it never binds) and a daily quota of 10^12 requests. Its
// reservations cost Redis more than lim's for the same schedule.
func threeBands(lim reserve.Limit) reserve.Policy {
	return reserve.Policy{
		{Name: "requests", Limit: lim},
		{Name: "tokens", Limit: reserve.Limit{Rate: lim.Rate * 1000, Burst: lim.Burst * 1000}},
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 1e12, Length: 24 * time.Hour}},
	}
}

var threeBandsCost = reserve.Cost{"requests": 1, "tokens": 500}

func (p *pacerLimiter) close() error {
	err := p.l.Close()
	if p.own != nil {
		err = errors.Join(err, p.own.Close())
	}
	return err
}

// pacerCounts counts what would make pacer's figures meaningless: switches
// to local pacing and reservations granted locally (Redis too slow for
// reserve.Options.CallTimeout). It is the Limiter's reserve.Metrics.
type pacerCounts struct {
	fallbacks atomic.Int64
	local     atomic.Int64
	moved     atomic.Int64
	evictable atomic.Pointer[string] // the policy New warned about
}

// warned returns the maxmemory-policy New reported as able to evict
// pacer's keys, or "".
func (c *pacerCounts) warned() string {
	if p := c.evictable.Load(); p != nil {
		return *p
	}
	return ""
}

func (c *pacerCounts) Reserved(_ string, _ []string, _ []float64, _ time.Duration, local bool) {
	if local {
		c.local.Add(1)
	}
}
func (c *pacerCounts) RedisCall(string, time.Duration, error) {}
func (c *pacerCounts) Paused(string, time.Duration)           {}
func (c *pacerCounts) Moved(string, string)                   { c.moved.Add(1) }
func (c *pacerCounts) Evictable(policy string)                { c.evictable.Store(&policy) }
func (c *pacerCounts) Fallback(active bool) {
	if active {
		c.fallbacks.Add(1)
	}
}

// redisRate is github.com/go-redis/redis_rate/v10.
type redisRate struct {
	l   *redis_rate.Limiter
	lim redis_rate.Limit
}

// gcraLimit is l in redis_rate's terms: an integer Rate per Period.
func gcraLimit(l limit) redis_rate.Limit {
	if l.Rate >= 1 && l.Rate == math.Trunc(l.Rate) {
		return redis_rate.Limit{Rate: int(l.Rate), Period: time.Second, Burst: l.Burst}
	}
	return redis_rate.Limit{Rate: 1, Period: time.Duration(float64(time.Second) / l.Rate), Burst: l.Burst}
}

func (r *redisRate) take(ctx context.Context, key string) (bool, error) {
	res, err := r.l.Allow(ctx, key, r.lim)
	if err != nil {
		return false, err
	}
	return res.Allowed > 0, nil
}

func (r *redisRate) wait(ctx context.Context, key string) error {
	for {
		res, err := r.l.Allow(ctx, key, r.lim)
		if err != nil {
			return err
		}
		if res.Allowed > 0 {
			return nil
		}
		if err := sleep(ctx, res.RetryAfter); err != nil {
			return err
		}
	}
}

func (r *redisRate) close() error { return nil }

// fixedWindow is the counter people write first: a key per window of time,
// INCR and EXPIRE in one transaction, over the limit means wait for the next
// window. Windows are cut from the client's clock.
type fixedWindow struct {
	rdb    *redis.Client
	window time.Duration
	limit  int64
}

// windowOf returns the window and the limit per window for l: 1 s and
// rate x 1 s, or one permit per 1/rate for rates below 1/s. The burst plays
// no part.
func windowOf(l limit) (time.Duration, int64) {
	if l.Rate >= 1 {
		return time.Second, int64(l.Rate)
	}
	return time.Duration(float64(time.Second) / l.Rate), 1
}

// try counts one call in the current window; it returns whether the call is
// within the limit and when the window ends.
func (f *fixedWindow) try(ctx context.Context, key string) (bool, time.Time, error) {
	now := time.Now()
	w := now.UnixNano() / int64(f.window)
	k := "fw:" + key + ":" + strconv.FormatInt(w, 10)
	var incr *redis.IntCmd
	_, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		incr = p.Incr(ctx, k)
		p.Expire(ctx, k, f.window)
		return nil
	})
	if err != nil {
		return false, time.Time{}, err
	}
	return incr.Val() <= f.limit, time.Unix(0, (w+1)*int64(f.window)), nil
}

func (f *fixedWindow) take(ctx context.Context, key string) (bool, error) {
	ok, _, err := f.try(ctx, key)
	return ok, err
}

func (f *fixedWindow) wait(ctx context.Context, key string) error {
	for {
		ok, end, err := f.try(ctx, key)
		if err != nil || ok {
			return err
		}
		if err := sleep(ctx, time.Until(end)); err != nil {
			return err
		}
	}
}

func (f *fixedWindow) close() error { return nil }

// local is golang.org/x/time/rate: one Limiter per key in this process.
type local struct {
	lim  limit
	keys sync.Map // key -> *rate.Limiter
}

func (l *local) limiter(key string) *rate.Limiter {
	if v, ok := l.keys.Load(key); ok {
		return v.(*rate.Limiter)
	}
	v, _ := l.keys.LoadOrStore(key, rate.NewLimiter(rate.Limit(l.lim.Rate), l.lim.Burst))
	return v.(*rate.Limiter)
}

func (l *local) take(_ context.Context, key string) (bool, error) {
	return l.limiter(key).Reserve().OK(), nil
}

func (l *local) wait(ctx context.Context, key string) error {
	return l.limiter(key).Wait(ctx)
}

func (l *local) close() error { return nil }

// sleep sleeps for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
