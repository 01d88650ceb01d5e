package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/exemplar"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The otel phase: what package otelpacer costs a Wait, with and without
// otelpacer.Options.KeyAttribute. A crawler's shape: c.OtelKeys keys never
// seen before for each setup (limit 10/s, burst 1: each first slot is free
// at once, and reserve.Options.MaxLateness is its default, half the
// spacing, 50 ms), one Wait each, by otelWorkers goroutines, on the phase's
// Redis. The setups, each on a Limiter of its own in a process of its own
// (this program re-run as a child, so that a setup's garbage is collected
// on its own CPU time, not on the others'):
//
//   - none: no Metrics, no Tracer (what pacer costs alone);
//   - otel: a Telemetry as Options.Metrics and Options.Tracer, on the
//     OpenTelemetry SDK (a manual reader; every span sampled and handed to
//     an exporter that drops it), without KeyAttribute: the reference;
//   - otel+key: the same with KeyAttribute mapping every key to itself,
//     c.OtelKeys values of pacer.key, the worst case, under otelpacer's
//     default bound (the first DefaultMaxKeyValues values have series of
//     their own, the rest count as OtherKeyValue);
//   - otel+key/nobound: otel+key without that bound (MaxKeyValues -1):
//     more values than the SDK's cardinality limit, 2,000, the rest
//     counting in its overflow series;
//   - otel+key/100: KeyAttribute mapping the keys to 100 values (a host,
//     a provider), as otelpacer's documentation asks;
//   - otel+key/noex: otel+key/nobound on an SDK whose exemplar filter is
//     off (sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter)): what
//     of its cost is the reservoirs the SDK makes for each new series.
//
// The setups take turns, otelChunk keys at a time (in an order shuffled
// for each turn; one process works while the others wait for their next
// turn), so that a machine whose load drifts weighs on each alike. The
// table compares each setup's CPU time over all its turns with otel's, its
// garbage collection included (a collection falls on one turn in a few),
// and gives the median over the turns of the ratio in each turn beside.
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
var otelSetups = []string{"none", "otel", "otel+key", "otel+key/nobound", "otel+key/100", "otel+key/noex"}

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

// otelChildEnv carries an otel child's job; its setup is
// otelSetups[fleetproc.Index()].
const otelChildEnv = "PACERBENCH_OTEL_CHILD"

// otelProfileEnv, when set to a directory, has each otel child write a CPU
// profile of its turns there (otel-<setup>.pprof), for go tool pprof.
const otelProfileEnv = "PACERBENCH_OTEL_PROFILE"

// otelJob is what each process of the otel phase is told.
type otelJob struct{ RedisURL string }

// otelRun is one setup's figures over the phase: an otel child's last
// line.
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
	// CPURatio is the setup's CPU time over otel's, over all the turns;
	// TurnRatio the median over the turns of the ratio in each.
	CPURatio, TurnRatio float64
}

// otelResults is the otel phase.
type otelResults struct {
	Keys, Workers, Chunk int
	Repeats              int       // runs of Keys fresh keys per setup
	Runs                 []otelRun // per setup, summed over the runs
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
	keys     int // Waits made
	run      otelRun
}

// open makes s's Limiter on rdb.
func (s *otelSetup) open(rdb *redis.Client, log *slog.Logger) error {
	s.counter = &grantCounter{next: noMetrics{}}
	opts := reserve.Options{KeyPrefix: "otel-" + strings.NewReplacer("+", "", "/", "").Replace(s.name) + ":",
		Logger: log, Metrics: s.counter}
	if s.name != "none" {
		s.reader = sdkmetric.NewManualReader()
		mo := []sdkmetric.Option{sdkmetric.WithReader(s.reader)}
		if s.name == "otel+key/noex" {
			mo = append(mo, sdkmetric.WithExemplarFilter(exemplar.AlwaysOffFilter))
		}
		mp := sdkmetric.NewMeterProvider(mo...)
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(dropSpans{}))
		s.shutdown = append(s.shutdown, mp.Shutdown, tp.Shutdown)
		o := otelpacer.Options{MeterProvider: mp, TracerProvider: tp}
		switch s.name {
		case "otel+key":
			o.KeyAttribute = func(key string) string { return key }
		case "otel+key/nobound", "otel+key/noex":
			o.KeyAttribute, o.MaxKeyValues = func(key string) string { return key }, -1
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

// turn makes s's Waits on keys [from, to), by otelWorkers goroutines, and
// returns this process's CPU time over them.
func (s *otelSetup) turn(ctx context.Context, from, to int) time.Duration {
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
	s.run.Errors += errs.Load()
	s.keys += to - from
	return cpu
}

// close closes s's Limiter and gathers its figures.
func (s *otelSetup) close(ctx context.Context) error {
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
	r.Waits = int64(s.keys) - r.Errors
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

// runAsOtelChild runs this process as one process of the otel phase, if it
// is one, and returns its exit code and true.
func runAsOtelChild() (code int, isChild bool) {
	return runChild(otelChildEnv, "pacerbench otel child", otelChild)
}

// otelChild is the process of one setup: it opens the setup's Limiter,
// says "ready", then answers each line "turn <from> <to>" on stdin with
// "turn <CPU ns>" once its Waits on those keys are done, and "end" with
// "end <otelRun as JSON>".
func otelChild(j otelJob) error {
	i := fleetproc.Index()
	if i < 0 || i >= len(otelSetups) {
		return fmt.Errorf("fleet index %d of %d", i, len(otelSetups))
	}
	ctx := context.Background()
	rdb, err := newClient(j.RedisURL, otelWorkers, nil)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := dial(ctx, rdb, otelWorkers); err != nil {
		return err
	}
	s := &otelSetup{name: otelSetups[i]}
	if err := s.open(rdb, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))); err != nil {
		return err
	}
	if dir := os.Getenv(otelProfileEnv); dir != "" {
		stop, err := startCPUProfile(dir, "otel-"+strings.NewReplacer("+", "-", "/", "-").Replace(s.name)+".pprof")
		if err != nil {
			return err
		}
		defer stop()
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var from, to int
		if n, _ := fmt.Sscanf(sc.Text(), "turn %d %d", &from, &to); n == 2 && 0 <= from && from < to {
			fmt.Printf("turn %d\n", s.turn(ctx, from, to))
			continue
		}
		if sc.Text() != "end" {
			_ = s.close(ctx)
			return fmt.Errorf("unknown request %q", sc.Text())
		}
		if err := s.close(ctx); err != nil {
			return err
		}
		js, err := json.Marshal(s.run)
		if err != nil {
			return err
		}
		fmt.Printf("end %s\n", js)
		return nil
	}
	_ = s.close(ctx)
	return fmt.Errorf("stdin closed before the end: %v", sc.Err())
}

// runOtel runs the otel phase: c.OtelRuns runs, each on a flushed Redis
// with processes of their own (an SDK that has seen no key yet), their
// figures summed.
func (b *bench) runOtel(ctx context.Context, progress func(string, ...any)) (*otelResults, error) {
	res := &otelResults{Keys: b.cfg.OtelKeys, Workers: otelWorkers, Chunk: otelChunk, Runs: make([]otelRun, len(otelSetups))}
	var cpu [][]time.Duration // per setup, per turn, of every run
	var p50s, p99s [][]time.Duration
	for run := range b.cfg.OtelRuns {
		runs, turns, err := b.otelRun(ctx, run)
		if err != nil {
			return nil, fmt.Errorf("otel run %d: %w", run+1, err)
		}
		if cpu == nil {
			cpu, p50s, p99s = make([][]time.Duration, len(runs)), make([][]time.Duration, len(runs)), make([][]time.Duration, len(runs))
		}
		for i, r := range runs {
			cpu[i] = append(cpu[i], turns[i]...)
			p50s[i], p99s[i] = append(p50s[i], r.P50), append(p99s[i], r.P99)
			t := &res.Runs[i]
			t.Setup = r.Setup
			t.Waits += r.Waits
			t.Errors += r.Errors
			t.Grants += r.Grants
			t.MovedLate += r.MovedLate
			t.MovedPause += r.MovedPause
			t.Wall += r.Wall
			t.CPU += r.CPU
			if r.Counted >= 0 {
				t.Counted += r.Counted
			} else {
				t.Counted = -1
			}
		}
		progress("otel        run %d of %d: %d keys per setup", run+1, b.cfg.OtelRuns, res.Keys)
	}
	res.Repeats = b.cfg.OtelRuns
	ref := slices.Index(otelSetups, "otel")
	for i := range res.Runs {
		r := &res.Runs[i]
		turns := len(cpu[i])
		ratios := make([]float64, turns)
		var sum, refSum time.Duration
		for t := range turns {
			ratios[t] = float64(cpu[i][t]) / float64(cpu[ref][t])
			sum, refSum = sum+cpu[i][t], refSum+cpu[ref][t]
		}
		slices.Sort(ratios)
		r.CPURatio, r.TurnRatio = float64(sum)/float64(refSum), ratios[turns/2]
		slices.Sort(p50s[i])
		r.P50, r.P99 = p50s[i][len(p50s[i])/2], slices.Max(p99s[i])
		progress("otel        %-13s %d Waits, %d grants (%d woke late), %.1f µs wall and %.1f µs CPU per Wait (%+.1f%% against otel; median of %d turns %+.1f%%), p99 %v",
			r.Setup, r.Waits, r.Grants, r.MovedLate, perWait(r.Wall, r.Waits), perWait(r.CPU, r.Waits), 100*(r.CPURatio-1), turns, 100*(r.TurnRatio-1), r.P99)
	}
	return res, nil
}

// otelRun runs the setups once (the run-th run), each in a new process, on
// a flushed Redis: their figures, and their CPU time in each turn.
func (b *bench) otelRun(ctx context.Context, run int) ([]otelRun, [][]time.Duration, error) {
	keys := b.cfg.OtelKeys
	if err := b.flush(ctx); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills children left behind by an error
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: otelChildEnv, Procs: len(otelSetups), Stdin: true,
		Spec: otelJob{RedisURL: b.url}})
	if err != nil {
		return nil, nil, err
	}
	if err := awaitReady(ctx, f); err != nil {
		return nil, nil, err
	}
	procs := f.Children()
	next := make([]int, len(procs)) // the number of each child's next line
	for i := range next {
		next[i] = 1
	}
	// ask sends child i a request and returns its answer, the rest of
	// the line after the word the answer starts with.
	ask := func(i int, word, req string) (string, error) {
		ch := procs[i]
		if _, err := fmt.Fprintln(ch.Stdin, req); err != nil {
			return "", fmt.Errorf("otel %s: %w", otelSetups[i], err)
		}
		line, err := ch.Line(ctx, next[i])
		next[i]++
		if err != nil {
			return "", fmt.Errorf("otel %s: %w", otelSetups[i], err)
		}
		rest, ok := strings.CutPrefix(line, word+" ")
		if !ok {
			return "", fmt.Errorf("otel %s: answered %q to %q", otelSetups[i], line, req)
		}
		return rest, nil
	}
	// The order of each turn is shuffled: what a setup leaves to the
	// machine (its Redis connections' traffic, a busier cache) would
	// otherwise always weigh on the same one.
	rng := rand.New(rand.NewPCG(1, uint64(run)))
	order := make([]int, len(procs))
	for i := range order {
		order[i] = i
	}
	cpu := make([][]time.Duration, len(procs)) // per setup, per turn
	for from := 0; from < keys; from += otelChunk {
		rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			got, err := ask(i, "turn", fmt.Sprintf("turn %d %d", from, min(from+otelChunk, keys)))
			if err != nil {
				return nil, nil, err
			}
			ns, err := strconv.ParseInt(got, 10, 64)
			if err != nil {
				return nil, nil, fmt.Errorf("otel %s: turn %q: %w", otelSetups[i], got, err)
			}
			cpu[i] = append(cpu[i], time.Duration(ns))
		}
	}
	runs := make([]otelRun, len(procs))
	for i := range procs {
		got, err := ask(i, "end", "end")
		if err != nil {
			return nil, nil, err
		}
		if err := json.Unmarshal([]byte(got), &runs[i]); err != nil {
			return nil, nil, fmt.Errorf("otel %s: end %q: %w", otelSetups[i], got, err)
		}
	}
	if err := f.Wait(); err != nil {
		return nil, nil, err
	}
	return runs, cpu, nil
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
	fmt.Fprintf(&b, "%d runs, each on a flushed Redis with new processes, of %s fresh keys per setup (limit %s/s, burst %d: each slot free at once; MaxLateness 50 ms), one Wait each, by %d goroutines; "+
		"the setups take turns, %d keys at a time, in an order shuffled for each turn, each in a process of its own. Setups: `none` (no Metrics, no Tracer), `otel` (a Telemetry as Metrics and Tracer on the SDK, "+
		"every span sampled), `otel+key` (the same with KeyAttribute: each key its own pacer.key, under otelpacer's default MaxKeyValues, %d), `otel+key/nobound` (the same without the bound), `otel+key/100` (KeyAttribute: 100 values), `otel+key/noex` (otel+key/nobound with the SDK's exemplar filter off). "+
		"Second slots: grants beyond the Waits (a Wait that woke later than MaxLateness takes a fresh slot). Counted: "+
		"pacer.rate_limiting.requests as the SDK collected it. Figures summed over the runs; p50: the median of the runs', p99: the largest. CPU µs per Wait: the setup's process's CPU time over its turns, its garbage collection included. CPU against otel: the setup's CPU time over otel's, over all the turns; per turn: the median over the turns of that ratio in each.\n\n",
		o.Repeats, thousands(float64(o.Keys)), thousands(otelLimit.Rate), otelLimit.Burst, o.Workers, o.Chunk, otelpacer.DefaultMaxKeyValues)
	b.WriteString("| setup | Waits | errors | grants | second slots | woke late | counted | wall µs per Wait | CPU µs per Wait | CPU against otel | per turn | p50 | p99 |\n")
	b.WriteString("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range o.Runs {
		counted := "-"
		if r.Counted >= 0 {
			counted = fmt.Sprint(r.Counted)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %s | %.1f | %.1f | %+.1f%% | %+.1f%% | %v | %v |\n", r.Setup, r.Waits, r.Errors,
			r.Grants, r.Grants-r.Waits, r.MovedLate, counted, perWait(r.Wall, r.Waits), perWait(r.CPU, r.Waits), 100*(r.CPURatio-1), 100*(r.TurnRatio-1),
			r.P50.Round(time.Microsecond), r.P99.Round(time.Microsecond))
	}
	return b.String()
}
