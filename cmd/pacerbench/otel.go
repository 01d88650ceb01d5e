package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The otel phase: what package otelpacer costs a Wait, with and without
// otelpacer.Options.KeyAttribute. A crawler's shape: c.OtelKeys keys never
// seen before for each setup (limit 10/s, burst 1: each first slot is free
// at once, and reserve.Options.MaxLateness is its default, half the
// spacing, 50 ms), one Wait each, by otelWorkers goroutines, on the phase's
// Redis. The setups, each on a Limiter of its own:
//
//   - none: no Metrics, no Tracer (what pacer costs alone);
//   - otel: a Telemetry as Options.Metrics and Options.Tracer, on the
//     OpenTelemetry SDK (a manual reader; every span sampled and handed to
//     an exporter that drops it), without KeyAttribute: the reference;
//   - otel+key: the same with KeyAttribute mapping every key to itself,
//     c.OtelKeys values of pacer.key (more than the SDK's cardinality
//     limit, 2,000: the rest count in its overflow series), the worst
//     case;
//   - otel+key/100: KeyAttribute mapping the keys to 100 values (a host,
//     a provider), as otelpacer's documentation asks.
//
// The setups take turns, otelChunk keys at a time (in an order shuffled
// for each turn), so that a machine whose load drifts weighs on each
// alike; per turn each setup's CPU time is compared with
// otel's in the same turn, and the table gives the median of those ratios
// beside the totals.
//
// Each setup's Metrics is wrapped in a counter of grants and moves: a Wait
// that woke later than MaxLateness takes a second slot (reserve/sleep.go),
// so grants - Waits are the second slots, slots spent twice. The requests
// counter the SDK collected is read back too. Per call: the wall time of
// the setup's chunks per Wait, this process's CPU time over them per Wait,
// and each Wait's own duration (p50, p99).

// otelWorkers are the goroutines that call Wait in each run.
const otelWorkers = 16

// otelLimit is each key's limit.
var otelLimit = reserve.Limit{Rate: 10, Burst: 1}

// otelChunk is how many keys a setup's turn takes.
const otelChunk = 250

// otelSetups are the setups.
var otelSetups = []string{"none", "otel", "otel+key", "otel+key/100"}

// hundredValues are the values of the otel+key/100 setup's KeyAttribute.
var hundredValues = func() []string {
	vs := make([]string, 100)
	for i := range vs {
		vs[i] = fmt.Sprintf("h%02d", i)
	}
	return vs
}()

// oneOfHundred is the otel+key/100 setup's KeyAttribute: one of 100 values
// by the key's FNV-1a hash.
func oneOfHundred(key string) string {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return hundredValues[h%100]
}

// otelRun is one setup's figures over the phase.
type otelRun struct {
	Setup      string
	Waits      int64 // Waits that returned nil
	Errors     int64
	Grants     int64 // reservations granted (the Limiter's Metrics)
	MovedLate  int64 // sleepers that woke too late and took a fresh slot
	MovedPause int64
	Counted    int64 // pacer.rate_limiting.requests as the SDK collected it (-1: no Telemetry)
	Wall       time.Duration
	CPU        time.Duration // this process's, over the setup's turns
	P50, P99   time.Duration // a Wait's duration
	// CPURatio is the median over the turns of the setup's CPU time in
	// the turn over otel's.
	CPURatio float64
}

// otelResults is the otel phase.
type otelResults struct {
	Keys, Workers, Chunk int
	Runs                 []otelRun
}

// grantCounter is a Limiter's Options.Metrics: it counts grants and moves
// and hands every call on to next.
type grantCounter struct {
	next               reserve.Metrics
	grants, late, paus atomic.Int64
}

func (g *grantCounter) Granted(gr reserve.Grant) {
	g.grants.Add(1)
	if gm, ok := g.next.(reserve.GrantMetrics); ok {
		gm.Granted(gr)
		return
	}
	g.next.Reserved(gr.Key, gr.Units, gr.Amounts, gr.Wait, gr.Source == reserve.SourceLocal)
}

func (g *grantCounter) Reserved(key string, units []string, amounts []float64, wait time.Duration, local bool) {
	g.grants.Add(1)
	g.next.Reserved(key, units, amounts, wait, local)
}

func (g *grantCounter) Moved(key, why string) {
	if why == reserve.MovedLate {
		g.late.Add(1)
	} else {
		g.paus.Add(1)
	}
	g.next.Moved(key, why)
}

func (g *grantCounter) RedisCall(op string, d time.Duration, err error) { g.next.RedisCall(op, d, err) }
func (g *grantCounter) Fallback(active bool)                            { g.next.Fallback(active) }
func (g *grantCounter) Paused(key string, d time.Duration)              { g.next.Paused(key, d) }
func (g *grantCounter) Evictable(policy string)                         { g.next.Evictable(policy) }

// noMetrics is the none setup's Metrics.
type noMetrics struct{}

func (noMetrics) Reserved(string, []string, []float64, time.Duration, bool) {}
func (noMetrics) Moved(string, string)                                      {}
func (noMetrics) RedisCall(string, time.Duration, error)                    {}
func (noMetrics) Fallback(bool)                                             {}
func (noMetrics) Paused(string, time.Duration)                              {}
func (noMetrics) Evictable(string)                                          {}

// dropSpans is a span exporter that drops what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// otelSetup is one setup while the phase runs.
type otelSetup struct {
	name     string
	l        *reserve.Limiter
	counter  *grantCounter
	reader   *sdkmetric.ManualReader // nil: none
	shutdown []func(context.Context) error
	took     []time.Duration
	cpu      []time.Duration // per turn
	run      otelRun
}

// open makes s's Limiter on rdb.
func (s *otelSetup) open(rdb *redis.Client, log *slog.Logger) error {
	s.counter = &grantCounter{next: noMetrics{}}
	opts := reserve.Options{KeyPrefix: "otel-" + strings.NewReplacer("+", "", "/", "").Replace(s.name) + ":",
		Logger: log, Metrics: s.counter}
	if s.name != "none" {
		s.reader = sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(s.reader))
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(dropSpans{}))
		s.shutdown = append(s.shutdown, mp.Shutdown, tp.Shutdown)
		o := otelpacer.Options{MeterProvider: mp, TracerProvider: tp}
		switch s.name {
		case "otel+key":
			o.KeyAttribute = func(key string) string { return key }
		case "otel+key/100":
			o.KeyAttribute = oneOfHundred
		}
		tel, err := otelpacer.New(o)
		if err != nil {
			return err
		}
		s.counter.next, opts.Tracer = tel, tel
	}
	l, err := reserve.New(rdb, opts)
	if err != nil {
		return err
	}
	s.l = l
	return nil
}

// turn makes s's Waits on keys [from, to), by otelWorkers goroutines.
func (s *otelSetup) turn(ctx context.Context, from, to int) {
	var next, errs atomic.Int64
	next.Store(int64(from))
	took := make([]time.Duration, to-from)
	var wg sync.WaitGroup
	cpu0, t0 := cpuTime(), time.Now()
	for range otelWorkers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(to) {
					return
				}
				start := time.Now()
				if err := s.l.Wait(ctx, fmt.Sprintf("host-%d.example", i), otelLimit); err != nil {
					errs.Add(1)
				}
				took[i-int64(from)] = time.Since(start)
			}
		})
	}
	wg.Wait()
	s.took = append(s.took, took...)
	cpu := cpuTime() - cpu0
	s.run.Wall += time.Since(t0)
	s.run.CPU += cpu
	s.cpu = append(s.cpu, cpu)
	s.run.Errors += errs.Load()
}

// close closes s's Limiter and gathers its figures.
func (s *otelSetup) close(ctx context.Context, keys int) error {
	err := s.l.Close()
	defer func() {
		for _, f := range s.shutdown {
			_ = f(context.Background())
		}
	}()
	if err != nil {
		return err
	}
	r := &s.run
	r.Setup, r.Counted = s.name, -1
	slices.Sort(s.took)
	r.P50, r.P99 = quantile(s.took, 0.5), quantile(s.took, 0.99)
	r.Waits = int64(keys) - r.Errors
	r.Grants, r.MovedLate, r.MovedPause = s.counter.grants.Load(), s.counter.late.Load(), s.counter.paus.Load()
	if s.reader == nil {
		return nil
	}
	var rm metricdata.ResourceMetrics
	if err := s.reader.Collect(ctx, &rm); err != nil {
		return err
	}
	r.Counted = 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name == "pacer.rate_limiting.requests" {
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					r.Counted += dp.Value
				}
			}
		}
	}
	return nil
}

// runOtel runs the otel phase.
func (b *bench) runOtel(ctx context.Context, progress func(string, ...any)) (*otelResults, error) {
	keys := b.cfg.OtelKeys
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	rdb, err := newClient(b.url, otelWorkers, nil)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	setups := make([]*otelSetup, len(otelSetups))
	for i, name := range otelSetups {
		setups[i] = &otelSetup{name: name}
		if err := setups[i].open(rdb, b.log); err != nil {
			for _, s := range setups[:i] {
				_ = s.close(ctx, 0)
			}
			return nil, err
		}
	}
	// The order of each turn is shuffled: a setup's garbage, collected
	// during the next setup's turn, would always weigh on the same one.
	rng := rand.New(rand.NewPCG(1, 2))
	order := slices.Clone(setups)
	turns := 0
	for from := 0; from < keys; from += otelChunk {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, s := range order {
			s.turn(ctx, from, min(from+otelChunk, keys))
		}
		turns++
	}
	res := &otelResults{Keys: keys, Workers: otelWorkers, Chunk: otelChunk}
	ref := setups[slices.Index(otelSetups, "otel")]
	for _, s := range setups {
		ratios := make([]float64, turns)
		for t := range turns {
			ratios[t] = float64(s.cpu[t]) / float64(ref.cpu[t])
		}
		slices.Sort(ratios)
		s.run.CPURatio = ratios[turns/2]
		if err := s.close(ctx, keys); err != nil {
			return nil, err
		}
		r := s.run
		progress("otel        %-12s %d Waits, %d grants (%d woke late), %.1f µs wall and %.1f µs CPU per Wait (%+.1f%% against otel, median of %d turns), p99 %v",
			r.Setup, r.Waits, r.Grants, r.MovedLate, perWait(r.Wall, r.Waits), perWait(r.CPU, r.Waits), 100*(r.CPURatio-1), turns, r.P99)
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

func perWait(d time.Duration, waits int64) float64 {
	if waits == 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(waits)
}

func (o *otelResults) tables() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### OpenTelemetry's cost: otelpacer with and without KeyAttribute\n\n")
	fmt.Fprintf(&b, "%s fresh keys per setup (limit %s/s, burst %d: each slot free at once; MaxLateness 50 ms), one Wait each, by %d goroutines; "+
		"the setups take turns, %d keys at a time, in an order shuffled for each turn. Setups: `none` (no Metrics, no Tracer), `otel` (a Telemetry as Metrics and Tracer on the SDK, "+
		"every span sampled), `otel+key` (the same with KeyAttribute: each key its own pacer.key), `otel+key/100` (KeyAttribute: 100 values). "+
		"Second slots: grants beyond the Waits (a Wait that woke later than MaxLateness takes a fresh slot). Counted: "+
		"pacer.rate_limiting.requests as the SDK collected it. CPU against otel: the median over the turns of the setup's CPU time over otel's in the same turn.\n\n",
		thousands(float64(o.Keys)), thousands(otelLimit.Rate), otelLimit.Burst, o.Workers, o.Chunk)
	b.WriteString("| setup | Waits | errors | grants | second slots | woke late | counted | wall µs per Wait | CPU µs per Wait | CPU against otel | p50 | p99 |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range o.Runs {
		counted := "-"
		if r.Counted >= 0 {
			counted = fmt.Sprint(r.Counted)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %.1f | %.1f | %+.1f%% | %v | %v |\n", r.Setup, r.Waits, r.Errors,
			r.Grants, r.Grants-r.Waits, r.MovedLate, counted, perWait(r.Wall, r.Waits), perWait(r.CPU, r.Waits), 100*(r.CPURatio-1),
			r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	}
	return b.String()
}
