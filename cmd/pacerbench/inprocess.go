package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// throughput is one row of a hot-key throughput table.
type throughput struct {
	Variant    string
	Goroutines int
	Calls      int64 // takes in the timed phase
	Refused    int64 // of which refused (none expected: the limit is far above)
	Seconds    float64
	Redis      perCall // per take; zero for a limiter without Redis
	Fallbacks  int64   // pacer's switches to local pacing (should be 0)
}

// PerSecond is the takes per second.
func (t throughput) PerSecond() float64 { return float64(t.Calls) / t.Seconds }

// hotLimit is the limit of the throughput and latency phases: so high that
// nobody ever waits, so they measure the machinery alone.
var hotLimit = limit{Rate: 1e6, Burst: 1000}

// runThroughput runs take on one key from g goroutines for d.
func (b *bench) runThroughput(ctx context.Context, v variant, g int, d time.Duration) (throughput, error) {
	l, counts, err := b.open(ctx, v, hotLimit, 1)
	if err != nil {
		return throughput{}, err
	}
	defer l.close()
	const key = "hot"
	if err := dial(ctx, b.rdb, g); err != nil {
		return throughput{}, err
	}
	// Warm up: one take per goroutine loads the scripts.
	var warm sync.WaitGroup
	errs := make([]error, g)
	for i := range g {
		warm.Go(func() { _, errs[i] = l.take(ctx, key) })
	}
	warm.Wait()
	if err := firstErr(errs); err != nil {
		return throughput{}, fmt.Errorf("%s: warm-up: %w", v.Name, err)
	}
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return throughput{}, err
	}
	b.sent.take()
	var (
		stop    atomic.Bool
		calls   = make([]int64, g)
		refused = make([]int64, g)
		wg      sync.WaitGroup
	)
	start := time.Now()
	for i := range g {
		wg.Go(func() {
			for !stop.Load() {
				ok, err := l.take(ctx, key)
				if err != nil {
					errs[i] = err
					return
				}
				calls[i]++
				if !ok {
					refused[i]++
				}
			}
		})
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(start)
	if err := firstErr(errs); err != nil {
		return throughput{}, fmt.Errorf("%s: %w", v.Name, err)
	}
	s := b.sent.take()
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return throughput{}, err
	}
	r := throughput{Variant: v.Name, Goroutines: g, Seconds: elapsed.Seconds(), Fallbacks: counts.fallbacks.Load()}
	for i := range g {
		r.Calls += calls[i]
		r.Refused += refused[i]
	}
	if v.Redis {
		r.Redis = cost(u, s, r.Calls)
	}
	return r, nil
}

// latency is one row of the lone-caller latency table.
type latency struct {
	Variant       string
	Calls         int64
	P50, P99, Max time.Duration
	Fallbacks     int64
}

// latencyRounds is how many parts the lone-caller phase of each limiter is
// cut into. The parts of all limiters take turns, in an order that rotates
// each round, so that what the machine happens to do during one stretch of
// the phase (a GC, another process, a cold cache after the previous phase)
// falls on every row, not on one.
const latencyRounds = 5

// runLatency runs take on one key from one goroutine for d per limiter, in
// latencyRounds turns, timing each call.
func (b *bench) runLatency(ctx context.Context, vs []variant, d time.Duration) ([]latency, error) {
	took := make([][]time.Duration, len(vs))
	fallbacks := make([]int64, len(vs))
	order := make([]int, len(vs))
	for i := range order {
		order[i] = i
	}
	for range latencyRounds {
		for _, i := range order {
			v := vs[i]
			t, fb, err := b.latencyRound(ctx, v, d/latencyRounds)
			if err != nil {
				return nil, err
			}
			took[i] = append(took[i], t...)
			fallbacks[i] += fb
		}
		// Rotate: over the rounds each limiter takes each place in the
		// turn once (when there are as many rounds as limiters).
		order = append(order[1:], order[0])
	}
	out := make([]latency, len(vs))
	for i, v := range vs {
		t := took[i]
		slices.Sort(t)
		out[i] = latency{
			Variant:   v.Name,
			Calls:     int64(len(t)),
			P50:       quantile(t, 0.50),
			P99:       quantile(t, 0.99),
			Max:       t[len(t)-1],
			Fallbacks: fallbacks[i],
		}
	}
	return out, nil
}

// latencyRound is one turn of runLatency: v's call times over d, and how
// many times it fell back to local pacing.
func (b *bench) latencyRound(ctx context.Context, v variant, d time.Duration) ([]time.Duration, int64, error) {
	l, counts, err := b.open(ctx, v, hotLimit, 1)
	if err != nil {
		return nil, 0, err
	}
	defer l.close()
	const key = "lone"
	for range 100 { // warm-up
		if _, err := l.take(ctx, key); err != nil {
			return nil, 0, fmt.Errorf("%s: warm-up: %w", v.Name, err)
		}
	}
	took := make([]time.Duration, 0, 1<<14)
	runtime.GC() // the garbage of the turn before is not this one's to collect
	end := time.Now().Add(d)
	for len(took) == 0 || time.Now().Before(end) {
		t0 := time.Now()
		if _, err := l.take(ctx, key); err != nil {
			return nil, 0, fmt.Errorf("%s: %w", v.Name, err)
		}
		took = append(took, time.Since(t0))
	}
	return took, counts.fallbacks.Load(), nil
}

// dial has n connections of rdb's pool open, by sending n PINGs at once,
// before a limiter runs: dialing hundreds of connections at once on a busy
// machine can take longer than pacer lets a call take (CallTimeout), and
// would switch it to local pacing.
func dial(ctx context.Context, rdb *redis.Client, n int) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = rdb.Ping(ctx).Err() })
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return fmt.Errorf("pacerbench: dialing %d connections: %w", n, err)
	}
	return nil
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
