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

// coldLimit is each key's limit.
var coldLimit = limit{Rate: 1, Burst: 1}

// benchCommands are this program's own commands on the admin client,
// which the cold and heartbeat phases leave out of Redis's figures.
var benchCommands = map[string]bool{"info": true, "dbsize": true, "memory": true, "config": true, "flushdb": true, "ping": true, "slowlog": true}

// coldRun is one row of the cold table.
type coldRun struct {
	Variant     string
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
}

func (r coldRun) perSecond() float64 { return float64(r.Admissions) / r.Seconds }

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
	for _, name := range coldVariants {
		if !slices.ContainsFunc(vs, func(v variant) bool { return v.Name == name }) {
			continue
		}
		r, err := b.coldFleet(ctx, name, c.ColdRun, false)
		if err != nil {
			return nil, fmt.Errorf("cold, %s: %w", name, err)
		}
		progress("cold        %-40s %8.0f admissions/s of %d, Redis CPU %.2f µs per admission, %.3f calls per admission",
			name, r.perSecond(), c.ColdKeys, r.Redis.CPUUsec, r.Redis.Trips)
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// coldFleet runs c.Procs cold children of variant name for run. With
// keepGoing a failed wait is counted and the children go on; without, it
// fails the run.
func (b *bench) coldFleet(ctx context.Context, name string, run time.Duration, keepGoing bool) (coldRun, error) {
	c := b.cfg
	if err := b.flush(ctx); err != nil {
		return coldRun{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills children left behind by an error
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: coldChildEnv, Procs: c.Procs, Stdin: true,
		Spec: coldJob{Variant: name, RedisURL: b.url, Keys: c.ColdKeys, Procs: c.Procs, Chunk: coldChunk, KeepGoing: keepGoing}})
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
	r := coldRun{Variant: name, Procs: c.Procs, Seconds: run.Seconds(), Steal: -1}
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
