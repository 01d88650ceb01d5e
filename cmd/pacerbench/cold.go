package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The cold phase: many keys, each at a low rate, the crawler's shape
// (10,000 hosts at 1 call/s each) rather than one hot key. c.Procs
// processes (coldChild) share c.ColdKeys keys at coldLimit; each process
// runs a goroutine per coldChunk of its keys, looping over them with a wait
// on each, so that every key is called at its limit and the fleet's demand
// is c.ColdKeys admissions per second. It runs pacer on the client README's
// quick start builds, pacer on newClient's, and redis_rate (Allow; if
// refused, sleep RetryAfter and try again) as the reference, for c.ColdRun
// each, and prints per admission what Redis spent (INFO cpu, commandstats),
// the round trips, the clients' CPU, and at three quarters of each run what
// the live keys hold in Redis.

const (
	coldQuickStart = "pacer, quick-start client"
	coldTuned      = "pacer"
	coldGCRA       = "redis_rate (GCRA)"
	coldChunk      = 25 // keys per goroutine
)

// coldVariants are the cold phase's rows; their names are those of the
// other tables (so -only selects them too).
var coldVariants = []string{coldQuickStart, coldTuned, coldGCRA}

// coldLimit is each key's limit in the shape coldAtLimit (the loaded
// phase's too).
var coldLimit = limit{Rate: 1, Burst: 1}

// A coldShape is how the cold phase's keys are called.
type coldShape struct {
	Name  string
	limit limit
	// paced: each key is called on the caller's schedule, once a second
	// (coldPaced), rather than by goroutines waiting on their keys in
	// turn, each call right after the last (every key at its limit).
	paced bool
	pairs bool // paced, a quarter of the calls waiting (coldPaced)
}

const (
	coldAtLimit = "every key at its limit"
	coldNone    = "none waiting"
	coldQuarter = "a quarter waiting"
)

// coldShapes are the cold phase's shapes, in the order it runs them.
var coldShapes = []coldShape{
	{Name: coldAtLimit, limit: coldLimit},
	// 1 call/s on a limit of 2/s, burst 1: no call waits.
	{Name: coldNone, limit: limit{Rate: 2, Burst: 1}, paced: true},
	// The same, half the keys called in pairs every other second: the
	// second of each pair (a quarter of the calls) waits 0.5 s.
	{Name: coldQuarter, limit: limit{Rate: 2, Burst: 1}, paced: true, pairs: true},
}

// shapeOf returns the shape named name ("" is coldAtLimit).
func shapeOf(name string) coldShape {
	for _, s := range coldShapes {
		if s.Name == name {
			return s
		}
	}
	return coldShapes[0]
}

// benchCommands are this program's own commands on the admin client,
// which the cold and heartbeat phases leave out of Redis's figures.
var benchCommands = map[string]bool{"info": true, "dbsize": true, "memory": true, "config": true, "flushdb": true, "ping": true, "slowlog": true}

// coldRun is one row of the cold table.
type coldRun struct {
	Variant     string
	Shape       string // coldShapes
	Procs       int
	Goroutines  int // in all
	Seconds     float64
	Admissions  int64
	Redis       perCall            // Trips: the limiter's Redis calls (round trips)
	Stats       map[string]cmdStat // commandstats but this program's commands
	Ops         map[string]int64   // pacer's Redis calls by operation
	ClientCPU   time.Duration
	Fallbacks   int64
	LiveKeys    int64 // DBSIZE's growth, at three quarters of the run
	SampleBytes int64 // MEMORY USAGE of one key, the same
	FleetBytes  int64 // MEMORY USAGE of the fleet's records ({limiters}), the same
	Reported    int64 // the keys whose policies they hold (HLEN), the same
	EndKeys     int64 // DBSIZE once the fleet's processes have exited
	EndBytes    int64 // used_memory's fall when they are flushed
	Steal       time.Duration
	Errors      int64  // failed waits (the loaded phase's runs go on after one)
	FirstError  string // the first one's text
	Failed      int64  // pacer's Redis calls that failed
	Local       int64  // pacer's reservations granted locally
	// WarmErrors is the failed waits of the processes' warm-ups, before the
	// run (the loaded phase's go on after them), WarmFirstError a text.
	WarmErrors     int64
	WarmFirstError string
	CloseError     string // a process's Close error, after the run (printed under the table)
}

func (r coldRun) perSecond() float64 { return float64(r.Admissions) / r.Seconds }

// clientUsec is the clients' CPU µs per admission.
func (r coldRun) clientUsec() float64 {
	return float64(r.ClientCPU.Nanoseconds()) / 1000 / float64(max(r.Admissions, 1))
}

// pair returns shape's runs of pacer on the quick-start client and of
// redis_rate, if both ran.
func (cr *coldResults) pair(shape string) (quick, gcra coldRun, ok bool) {
	var q, g bool
	for _, r := range cr.Runs {
		switch {
		case r.Shape != shape:
		case r.Variant == coldQuickStart:
			quick, q = r, true
		case r.Variant == coldGCRA:
			gcra, g = r, true
		}
	}
	return quick, gcra, q && g
}

// coldResults is the cold phase.
type coldResults struct {
	Keys int
	Runs []coldRun
}

// runCold runs the cold phase for the variants c.Only selects.
func (b *bench) runCold(ctx context.Context, progress func(string, ...any)) (*coldResults, error) {
	c := b.cfg
	vs, err := c.selected()
	if err != nil {
		return nil, err
	}
	res := &coldResults{Keys: c.ColdKeys}
	for _, shape := range coldShapes {
		for _, name := range coldVariants {
			if !slices.ContainsFunc(vs, func(v variant) bool { return v.Name == name }) {
				continue
			}
			r, err := b.coldFleet(ctx, name, shape.Name, c.ColdRun, false)
			if err != nil {
				return nil, fmt.Errorf("cold, %s, %s: %w", shape.Name, name, err)
			}
			progress("cold        %-20s %-28s %8.0f admissions/s, Redis CPU %.2f µs, client CPU %.2f µs, %.3f calls per admission, steal %v",
				shape.Name, name, r.perSecond(), r.Redis.CPUUsec, r.clientUsec(), r.Redis.Trips, r.Steal)
			res.Runs = append(res.Runs, r)
		}
		if q, g, ok := res.pair(shape.Name); ok {
			progress("cold        %-20s quick-start pacer against redis_rate: Redis CPU %.2fx, client CPU %.2fx", shape.Name,
				q.Redis.CPUUsec/g.Redis.CPUUsec, q.clientUsec()/g.clientUsec())
		}
	}
	return res, nil
}

// coldFleet runs c.Procs cold children of variant name for run. With
// keepGoing a failed wait is counted and the children go on; without, it
// fails the run.
func (b *bench) coldFleet(ctx context.Context, name, shape string, run time.Duration, keepGoing bool) (coldRun, error) {
	c := b.cfg
	if err := b.flush(ctx); err != nil {
		return coldRun{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills children left behind by an error
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: coldChildEnv, Procs: c.Procs, Stdin: true,
		Spec: coldJob{Variant: name, RedisURL: b.url, Keys: c.ColdKeys, Procs: c.Procs, Chunk: coldChunk, KeepGoing: keepGoing, Shape: shape}})
	if err != nil {
		return coldRun{}, err
	}
	if err := awaitReady(ctx, f); err != nil {
		return coldRun{}, err
	}
	db0, err := b.admin.DBSize(ctx).Result()
	if err != nil {
		return coldRun{}, err
	}
	steal0 := readMachineCPU()
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return coldRun{}, err
	}
	start, _ := beginRun(f, run)
	r := coldRun{Variant: name, Shape: shapeOf(shape).Name, Procs: c.Procs, Seconds: run.Seconds(), Steal: -1}
	sampled := make(chan error, 1)
	go func() {
		time.Sleep(time.Until(start.Add(3 * run / 4)))
		sampled <- b.coldSample(ctx, name, db0, &r)
	}()
	waitErr := f.Wait()
	if err := <-sampled; err != nil {
		return coldRun{}, err
	}
	if waitErr != nil {
		var errs []error
		for _, ch := range f.Children() {
			errs = append(errs, fmt.Errorf("process %d: %s", ch.Index, ch.Stderr()))
		}
		return coldRun{}, fmt.Errorf("%w: %w", waitErr, errors.Join(errs...))
	}
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return coldRun{}, err
	}
	// What the keys left hold, the fleet's connections closed: used_memory
	// before and after a FLUSHDB (the clients' buffers, which Redis grows
	// and shrinks with the load, are gone by now).
	mem1, err := usedMemory(ctx, b.admin)
	if err != nil {
		return coldRun{}, err
	}
	if r.EndKeys, err = b.admin.DBSize(ctx).Result(); err != nil {
		return coldRun{}, err
	}
	if err := b.flush(ctx); err != nil {
		return coldRun{}, err
	}
	mem2, err := usedMemory(ctx, b.admin)
	if err != nil {
		return coldRun{}, err
	}
	r.EndBytes = mem1 - mem2
	if steal1 := readMachineCPU(); steal0.ok && steal1.ok {
		r.Steal = time.Duration((steal1.steal - steal0.steal) / ticksPerSecond * float64(time.Second))
	}
	var s sent
	ops := map[string]int64{}
	for _, ch := range f.Children() {
		lines := ch.Lines()
		js, ok := strings.CutPrefix(lines[len(lines)-1], "end ")
		var e coldEnd
		if !ok || json.Unmarshal([]byte(js), &e) != nil {
			return coldRun{}, fmt.Errorf("process %d: bad last line %q", ch.Index, lines[len(lines)-1])
		}
		r.Admissions += e.Admissions
		r.ClientCPU += e.CPU
		r.Fallbacks += e.Fallbacks
		r.Errors += e.Errors
		r.Failed += e.Failed
		r.Local += e.Local
		if r.FirstError == "" {
			r.FirstError = e.FirstError
		}
		if e.CloseError != "" && r.CloseError == "" {
			r.CloseError = e.CloseError
		}
		r.WarmErrors += e.WarmErrors
		if r.WarmFirstError == "" {
			r.WarmFirstError = e.WarmFirstError
		}
		s.add(e.Sent)
		for op, n := range e.Ops {
			ops[op] += n
		}
	}
	r.Goroutines = (c.ColdKeys + coldChunk - 1) / coldChunk
	if name != coldGCRA {
		// pacer's calls, whatever client made them: its scripts are
		// EVALSHAs, its pause checks ("check") GETs.
		r.Ops = ops
		s = sent{Commands: map[string]int64{}}
		for op, n := range ops {
			s.Trips += n
			if op == "check" {
				s.Commands["get"] += n
			} else {
				s.Commands["evalsha"] += n
			}
		}
	}
	r.Stats = maps.Clone(u.Stats)
	maps.DeleteFunc(r.Stats, func(name string, _ cmdStat) bool { return benchCommands[name] })
	r.Redis = cost(u, s, r.Admissions)
	return r, nil
}

// coldSample reads, while the fleet runs, the live keys (DBSIZE against
// the run's start) and MEMORY USAGE of a key.
func (b *bench) coldSample(ctx context.Context, name string, db0 int64, r *coldRun) error {
	db1, err := b.admin.DBSize(ctx).Result()
	if err != nil {
		return err
	}
	r.LiveKeys = db1 - db0
	if name != coldGCRA {
		// The fleet's records: the heartbeats, and the policies each
		// Limiter reports for the keys it uses (admin status shows them),
		// a field per key, kept for minutes after its last report.
		for _, k := range layout.FleetKeys(reserve.DefaultKeyPrefix) {
			n, err := b.admin.MemoryUsage(ctx, k, 0).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return fmt.Errorf("pacerbench: MEMORY USAGE %s: %w", k, err)
			}
			r.FleetBytes += n
		}
		if r.Reported, err = b.admin.HLen(ctx, layout.Policies(reserve.DefaultKeyPrefix)).Result(); err != nil {
			return fmt.Errorf("pacerbench: HLEN: %w", err)
		}
	}
	// A redis_rate key lives until its bucket is full again, a second
	// after its last call: the first of the keys found.
	for n := range min(b.cfg.ColdKeys, 100) {
		key := layout.Key(reserve.DefaultKeyPrefix, coldKey(n))
		if name == coldGCRA {
			key = "rate:" + coldKey(n) // redis_rate's prefix
		}
		bytes, err := b.admin.MemoryUsage(ctx, key).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return fmt.Errorf("pacerbench: MEMORY USAGE %s: %w", key, err)
		}
		r.SampleBytes = bytes
		return nil
	}
	return nil
}
