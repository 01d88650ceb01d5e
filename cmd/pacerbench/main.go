// Command pacerbench runs pacer and the limiters a user would otherwise pick
// on one Redis, on the same workloads, one after the other, and writes the
// results to BENCHMARKS.md (and prints its tables):
//
//   - pacer (reserve.Limiter; one row per entry of pacerVariants: default
//     Options, coalescing off, Go's timer only);
//   - github.com/go-redis/redis_rate/v10 (GCRA), with the usual loop: Allow,
//     and if not allowed sleep RetryAfter and try again;
//   - a fixed-window counter in Redis (INCR and EXPIRE on a key per window;
//     over the limit, sleep until the window ends);
//   - golang.org/x/time/rate in each process, with no coordination: each
//     process at the full rate, or at rate/processes.
//
// The workloads: a hot key hammered by 256 and by 16 goroutines with a limit
// so high nobody waits (reservations per second); one caller's latency; a
// fleet of processes (this program re-run as children) sharing one key at
// 500/s, burst 1 (what the provider would see, and what Redis spends per
// call), and again beside -busy-hogs CPU hogs, one per CPU by default
// (pacer, and x/time/rate as the reference); Redis memory per idle key,
// and its expiry; pacer's callers while Redis runs out of memory, under an
// evicting policy and under noeviction; a hot key leased (lease.go), and Wait at 50,000 and
// 200,000/s, burst 1, against x/time/rate (waitrate.go); and the seams
// phase (seams.go), where pacer's features meet
// faults: a fleet's rate after its processes are killed without Close, a
// fleet through Redis stopped and restarted empty and through Redis frozen,
// and a window band's calls and Sleep's moves per window, on an idle and
// a busy machine; the outage phase (outage.go), where fleets of 2, 3
// and 4 processes, each on README's quick start, call Wait through Redis
// stopped, restarted empty and frozen, several runs of each, against
// x/time/rate on the same schedule: errors, the busiest second, stalls and
// recovery; fair share and lanes (fair.go); and pacehttp against
// providers that report their counts (counts.go) and on a warm key with a
// learned rate (adaptive.go), and learning a limit nobody publishes
// (learn.go); many cold keys, the crawler's shape, against
// redis_rate (cold.go), and the same again with and without CPU hogs
// beside it (loaded.go); what idle Limiters' heartbeats cost Redis
// (heartbeat.go); how keys spread over a Cluster's shards, computed
// (shards.go); and in-flight bands against a provider that refuses any
// call beyond N open: a seat's hand-off across processes, the band's cost
// when it does not bind, beside a bucket and a window, and a holder
// SIGKILLed mid-call (inflight.go); and fleets of hundreds of processes on a
// Redis Cluster of 3 masters and 3 replicas started for them, through a
// live resharding, a master killed and a manual failover, with what each
// shard spends and a line through each cost against the fleet's size
// (cluster.go).
//
//	go run ./cmd/pacerbench             # the full run, about 35 minutes on 2 CPUs
//	go run ./cmd/pacerbench -quick      # a smoke run: short phases, 2 processes
//	go run ./cmd/pacerbench -redis redis://127.0.0.1:6379/0 -force
//
// With no -redis it starts a throwaway redis-server from PATH on a free
// 127.0.0.1 port (no persistence) and stops it at the end. The database is
// flushed (FLUSHDB) before each limiter's run and CONFIG RESETSTAT is sent
// before each measurement, so -redis must name a database nobody else uses:
// one that is not empty is refused unless -force is given. The seams and
// outage phases stop and freeze redis-servers of their own, from PATH,
// whatever -redis says, and the cluster phase starts a Cluster of its own
// (redis-server and redis-cli from PATH).
//
// A phase that fails does not end the run: the document lists it under
// "Phases that failed", with its error, before the tables of the phases
// that ran (and what it measured before it failed), and pacerbench exits
// with status 1 once it is written. An interrupted run writes nothing.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// config is what the flags set.
type config struct {
	RedisURL   string        // "" to start a redis-server
	Force      bool          // flush a -redis database that is not empty
	Out        string        // the Markdown file to write; "" for none
	Quick      bool          // smoke-run defaults
	Phase      time.Duration // each throughput and latency measurement
	Hot        []int         // goroutines of the throughput phases
	Fleet      time.Duration // the fleet's run
	Procs      int           // the fleet's processes
	Goroutines int           // goroutines per fleet process
	FleetRate  float64       // the fleet's limit, permits per second
	FleetBurst int
	MemKeys    int           // keys created in the memory phase
	MemRate    float64       // their limit's rate (burst 1): the TTL follows from it
	EvictRun   time.Duration // each run of the eviction phase
	CrashRun   time.Duration // each crash run of the seams phase
	ColdKeys   int           // keys of the cold phase, at 1/s each
	ColdRun    time.Duration // each run of the cold phase
	LoadedRun  time.Duration // each run of the loaded phase (the cold shape, without and beside hogs)
	LoadedHogs int           // CPU hogs beside the loaded phase's loaded runs
	BusyHogs   int           // CPU hogs beside the busy phase's fleets
	LoadedRuns int           // the loaded phase's runs beside the hogs
	Heartbeats int           // idle Limiters of the heartbeat phase's larger run
	OtelKeys   int           // fresh keys of the otel phase, one Wait each
	OtelRuns   int           // runs of the otel phase, each on OtelKeys fresh keys
	Only       string        // limiter names separated by ";"; "" for all
	Format     int           // the state format the fleet (the default prefix's) writes: 1, 2 or 3
	Phases     string        // comma-separated phases (see phases); "" for all
	Command    string        // how the program was run, for the report

	// The outage phase: runs of each scenario, the length of each fault
	// and of the time after each heal, and the scenarios ("" for all).
	OutageRuns      int
	OutageSeg       time.Duration
	OutageScenarios string

	// The cluster phase: fleet sizes (a run each), cold keys and their
	// calls per second, the length of its segments, the slots its
	// resharding moves, the Cluster's cluster-node-timeout.
	ClusterProcs       []int
	ClusterKeys        int
	ClusterRate        float64
	ClusterSeg         time.Duration
	ClusterSlots       int
	ClusterNodeTimeout time.Duration

	// FIFO, if not 0, is the real-time priority the redis-servers
	// pacerbench starts for the phases and the cluster phase run at
	// (SCHED_FIFO): this program's own processes then do not preempt
	// them, and SLOWLOG's times are Redis's own work, as on a host of its
	// own. 0: the normal policy, beside this program's processes.
	FIFO int
}

// defaults returns the full run's settings, or the smoke run's.
func defaults(quick bool) config {
	c := config{
		Out:        "BENCHMARKS.md",
		Phase:      5 * time.Second,
		Hot:        []int{256, 16},
		Fleet:      10 * time.Second,
		Procs:      4,
		Goroutines: 16,
		FleetRate:  500,
		FleetBurst: 1,
		MemKeys:    100_000,
		// One permit per 20 s: a key lives 22 s, longer than creating
		// 100,000 of them takes, so none has expired when memory is read.
		MemRate:  0.05,
		EvictRun: 6 * time.Second,
		CrashRun: 10 * time.Second,
		ColdKeys: 10_000,
		ColdRun:  10 * time.Second,
		// 1,000 idle Limiters took more than a Redis core on this
		// program's 2-CPU machine, and their heartbeats timed out.
		Heartbeats: 500,
		OtelKeys:   10_000,
		OtelRuns:   4,
		LoadedRun:  20 * time.Second,
		LoadedHogs: 2,
		BusyHogs:   runtime.NumCPU(),
		LoadedRuns: 3,
		OutageRuns: 6,
		OutageSeg:  3 * time.Second,
		Format:     3,

		ClusterProcs:       []int{200},
		ClusterKeys:        100_000,
		ClusterRate:        500,
		ClusterSeg:         20 * time.Second,
		ClusterSlots:       4096,
		ClusterNodeTimeout: 5 * time.Second,
	}
	if quick {
		c.Quick = true
		c.Phase = time.Second
		c.Fleet = 2 * time.Second
		c.Procs = 2
		c.MemKeys = 1000
		c.MemRate = 2 // keys live 2.5 s
		c.EvictRun = 2 * time.Second
		c.CrashRun = time.Second
		c.ColdKeys = 1000
		c.ColdRun = 2 * time.Second
		c.LoadedRun = 2 * time.Second
		c.LoadedRuns = 1
		c.OutageRuns = 2
		c.OutageSeg = 1500 * time.Millisecond
		c.Heartbeats = 50
		c.OtelKeys = 1000
		c.OtelRuns = 1
		c.ClusterProcs = []int{4}
		c.ClusterKeys = 1000
		c.ClusterRate = 100
		c.ClusterSeg = 2 * time.Second
		c.ClusterSlots = 300
		c.ClusterNodeTimeout = time.Second
	}
	return c
}

// runAsAnyChild runs this process as a child of one of the phases, if it
// is one, and returns its exit code and true.
func runAsAnyChild() (code int, isChild bool) {
	for _, run := range []func() (int, bool){runAsChild, runAsLeaseChild, runAsSeamsChild, runAsColdChild,
		runAsOutageChild, runAsInflightChild, runAsClusterChild, runAsOtelChild} {
		if code, ok := run(); ok {
			return code, true
		}
	}
	return 0, false
}

func main() {
	if code, ok := runAsAnyChild(); ok {
		os.Exit(code)
	}
	c, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	if _, err := run(context.Background(), c, os.Stdout, os.Stderr); err != nil {
		log.Fatal(err)
	}
}

// parseFlags returns the config args ask for: -quick changes the defaults
// of the flags not given.
func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("pacerbench", flag.ContinueOnError)
	full := defaults(false)
	var c config
	fs.StringVar(&c.RedisURL, "redis", "", "Redis URL (redis://host:port/db); empty: start a redis-server from PATH")
	fs.BoolVar(&c.Force, "force", false, "flush the -redis database even if it is not empty")
	fs.StringVar(&c.Out, "out", full.Out, "the Markdown file to write (empty: none); a run with -phases or -only writes none unless -out is given")
	fs.BoolVar(&c.Quick, "quick", false, "a smoke run: 1 s phases, a 2 s fleet run of 2 processes, 1,000 memory keys, 2 s eviction runs, a seams phase of about 20 s, 1,000 cold keys for 2 s (and for 2 s without and once beside hogs), 2 outage runs of each scenario with 1.5 s faults, 50 idle Limiters, an inflight phase of about 10 s, a cluster phase of 4 processes on 1,000 keys with 2 s segments")
	fs.DurationVar(&c.Phase, "phase", full.Phase, "length of each throughput and latency measurement")
	fs.DurationVar(&c.Fleet, "fleet", full.Fleet, "length of each fleet run")
	fs.IntVar(&c.Procs, "procs", full.Procs, "processes in the fleet")
	fs.IntVar(&c.Goroutines, "goroutines", full.Goroutines, "goroutines per fleet process")
	fs.Float64Var(&c.FleetRate, "rate", full.FleetRate, "the fleet's limit, calls per second")
	fs.IntVar(&c.FleetBurst, "burst", full.FleetBurst, "the fleet's burst")
	fs.IntVar(&c.MemKeys, "keys", full.MemKeys, "keys created in the memory phase")
	fs.Float64Var(&c.MemRate, "mem-rate", full.MemRate, "the memory phase's rate per key (burst 1); a key lives 1/rate + 2 s")
	fs.DurationVar(&c.EvictRun, "eviction", full.EvictRun, "length of each run of the eviction phase (the memory runs out halfway)")
	fs.DurationVar(&c.CrashRun, "crash-run", full.CrashRun, "length of each crash run of the seams phase (where the kill falls between two heartbeats follows from it)")
	fs.IntVar(&c.ColdKeys, "cold-keys", full.ColdKeys, "keys of the cold phase, at 1/s each (burst 1)")
	fs.DurationVar(&c.ColdRun, "cold", full.ColdRun, "length of each run of the cold phase")
	fs.DurationVar(&c.LoadedRun, "loaded", full.LoadedRun, "length of each run of the loaded phase (the cold phase's keys, without hogs, then beside -loaded-hogs CPU hogs)")
	fs.IntVar(&c.LoadedHogs, "loaded-hogs", full.LoadedHogs, "CPU hogs beside the loaded phase's loaded runs")
	fs.IntVar(&c.BusyHogs, "busy-hogs", full.BusyHogs, "CPU hogs beside the busy phase's fleets (default: one per CPU)")
	fs.IntVar(&c.LoadedRuns, "loaded-runs", full.LoadedRuns, "the loaded phase's runs beside the hogs (after one without)")
	fs.IntVar(&c.OutageRuns, "outage-runs", full.OutageRuns, "runs of each scenario of the outage phase (after one of the reference)")
	fs.DurationVar(&c.OutageSeg, "outage-seg", full.OutageSeg, "the outage phase's faults' length, and the time after each heal")
	fs.StringVar(&c.OutageScenarios, "outage-scenarios", "", "run only these scenarios of the outage phase (comma-separated: "+strings.Join(outageScenarioNames(), ", ")+")")
	fs.IntVar(&c.Heartbeats, "heartbeats", full.Heartbeats, "idle Limiters of the heartbeat phase's larger run (the smaller has a tenth)")
	fs.IntVar(&c.OtelKeys, "otel-keys", full.OtelKeys, "fresh keys of the otel phase, one Wait each (and as many values of otelpacer's KeyAttribute)")
	fs.IntVar(&c.OtelRuns, "otel-runs", full.OtelRuns, "runs of the otel phase, each with new processes on -otel-keys fresh keys, their figures summed")
	fs.StringVar(&c.Only, "only", "", "run only these limiters (names as in the tables, separated by ';')")
	clusterProcs := fmt.Sprint(full.ClusterProcs[0])
	fs.StringVar(&clusterProcs, "cluster-procs", clusterProcs, "the cluster phase's fleet sizes, comma-separated, in increasing order: a run each on a new Cluster, and with two or more a line through each cost")
	fs.IntVar(&c.ClusterKeys, "cluster-keys", full.ClusterKeys, "the cluster phase's cold keys")
	fs.Float64Var(&c.ClusterRate, "cluster-rate", full.ClusterRate, "the cluster phase's cold calls per second, the whole fleet's (each key called once every keys/rate seconds)")
	fs.DurationVar(&c.ClusterSeg, "cluster-seg", full.ClusterSeg, "the cluster phase's warm-up and steady segments (the heartbeats segment and the time after each fault: half)")
	fs.IntVar(&c.ClusterSlots, "cluster-slots", full.ClusterSlots, "slots the cluster phase's resharding moves (a third from each master)")
	fs.DurationVar(&c.ClusterNodeTimeout, "cluster-node-timeout", full.ClusterNodeTimeout, "the cluster phase's cluster-node-timeout (a killed master is replaced about this long and a second or two after)")
	fs.IntVar(&c.FIFO, "fifo", 0, "run the redis-server pacerbench starts when no -redis is given (phases that start servers of their own keep the normal policy) and the cluster phase's nodes under SCHED_FIFO at this real-time `priority` (1 to 99; Linux, root or CAP_SYS_NICE), so that this program's processes do not preempt them and SLOWLOG's times are Redis's own work; 0: the normal policy")
	fs.StringVar(&c.Phases, "phases", "", "run only these phases (comma-separated: "+strings.Join(phases, ", ")+")")
	fs.IntVar(&c.Format, "format", full.Format, "the state format the fleet under the default key prefix writes (1, 2 or 3), set before each run as `pacer format` sets it: 3, as a new deployment does; 2 is a fleet's default before it switches")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("pacerbench: unexpected arguments %q", fs.Args())
	}
	if c.Quick {
		// -quick changes the defaults: of the flags not given.
		q := defaults(true)
		use := map[string]func(){
			"phase":      func() { c.Phase = q.Phase },
			"fleet":      func() { c.Fleet = q.Fleet },
			"procs":      func() { c.Procs = q.Procs },
			"keys":       func() { c.MemKeys = q.MemKeys },
			"mem-rate":   func() { c.MemRate = q.MemRate },
			"eviction":   func() { c.EvictRun = q.EvictRun },
			"crash-run":  func() { c.CrashRun = q.CrashRun },
			"cold-keys":  func() { c.ColdKeys = q.ColdKeys },
			"cold":       func() { c.ColdRun = q.ColdRun },
			"heartbeats": func() { c.Heartbeats = q.Heartbeats },
			"otel-keys":  func() { c.OtelKeys = q.OtelKeys },
			"otel-runs":  func() { c.OtelRuns = q.OtelRuns },

			"loaded":      func() { c.LoadedRun = q.LoadedRun },
			"loaded-runs": func() { c.LoadedRuns = q.LoadedRuns },
			"outage-runs": func() { c.OutageRuns = q.OutageRuns },
			"outage-seg":  func() { c.OutageSeg = q.OutageSeg },

			"cluster-procs":        func() { clusterProcs = fmt.Sprint(q.ClusterProcs[0]) },
			"cluster-keys":         func() { c.ClusterKeys = q.ClusterKeys },
			"cluster-rate":         func() { c.ClusterRate = q.ClusterRate },
			"cluster-seg":          func() { c.ClusterSeg = q.ClusterSeg },
			"cluster-slots":        func() { c.ClusterSlots = q.ClusterSlots },
			"cluster-node-timeout": func() { c.ClusterNodeTimeout = q.ClusterNodeTimeout },
		}
		fs.Visit(func(f *flag.Flag) { delete(use, f.Name) })
		for _, set := range use {
			set()
		}
	}
	var err error
	if c.ClusterProcs, err = clusterProcsFlag(clusterProcs); err != nil {
		return config{}, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if (c.Phases != "" || c.Only != "") && !given["out"] {
		c.Out = "" // a partial run does not replace the full document
	}
	c.Hot = full.Hot
	c.Command = "go run ./cmd/pacerbench"
	for _, a := range args {
		c.Command += " " + shellQuote(a)
	}
	return c, c.validate()
}

func (c config) validate() error {
	switch {
	case c.Phase <= 0 || c.Fleet <= 0 || c.EvictRun <= 0 || c.CrashRun <= 0 || c.ColdRun <= 0 || c.LoadedRun <= 0 || c.OutageSeg <= 0:
		return fmt.Errorf("pacerbench: -phase, -fleet, -eviction, -crash-run, -cold, -loaded and -outage-seg must be positive")
	case c.LoadedHogs < 1 || c.BusyHogs < 1 || c.LoadedRuns < 1 || c.OutageRuns < 1 || c.OtelRuns < 1:
		return fmt.Errorf("pacerbench: -loaded-hogs, -busy-hogs, -loaded-runs, -outage-runs and -otel-runs must be at least 1")
	case c.Procs < 1 || c.Goroutines < 1 || c.MemKeys < 1 || c.ColdKeys < c.Procs || c.Heartbeats < 10 || c.OtelKeys < 1:
		return fmt.Errorf("pacerbench: -procs, -goroutines, -keys and -otel-keys must be at least 1, -cold-keys at least -procs, -heartbeats at least 10")
	case c.FleetRate <= 0 || c.FleetBurst < 1 || c.MemRate <= 0:
		return fmt.Errorf("pacerbench: -rate and -mem-rate must be positive, -burst at least 1")
	case c.Format < 1 || c.Format > 3:
		return fmt.Errorf("pacerbench: -format %d: want 1, 2 or 3", c.Format)
	case len(c.ClusterProcs) == 0 || c.ClusterKeys < slices.Max(c.ClusterProcs) || c.ClusterRate <= 0 || c.ClusterSeg <= 0 ||
		c.ClusterSlots < 3 || c.ClusterSlots > 16000 || c.ClusterNodeTimeout < 100*time.Millisecond:
		return fmt.Errorf("pacerbench: -cluster-keys must be at least the largest of -cluster-procs, -cluster-rate and -cluster-seg positive, -cluster-slots 3 to 16000, -cluster-node-timeout at least 100ms")
	case c.FIFO < 0 || c.FIFO > 99:
		return fmt.Errorf("pacerbench: -fifo %d: want a real-time priority, 1 to 99, or 0 for none", c.FIFO)
	}
	for s := range strings.SplitSeq(c.OutageScenarios, ",") {
		if s != "" && !slices.Contains(outageScenarioNames(), s) {
			return fmt.Errorf("pacerbench: -outage-scenarios: no scenario %q (want some of %s)", s, strings.Join(outageScenarioNames(), ", "))
		}
	}
	for p := range strings.SplitSeq(c.Phases, ",") {
		if p != "" && !slices.Contains(phases, p) {
			return fmt.Errorf("pacerbench: -phases: no phase %q (want some of %s)", p, strings.Join(phases, ", "))
		}
	}
	return nil
}

// phases are the parts of a run, in order.
var phases = []string{"hot", "lone", "fleet", "busy", "memory", "eviction", "script", "lease", "waitrate", "seams", "outage", "fair", "faircost", "counts", "adaptive", "learn", "cold", "loaded", "heartbeat", "shards", "inflight", "otel", "cluster"}

// runs reports whether c runs phase p.
func (c config) runs(p string) bool {
	return c.Phases == "" || slices.Contains(strings.Split(c.Phases, ","), p)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// bench is one run: the config and the Redis every limiter shares.
type bench struct {
	cfg   config
	rdb   *redis.Client // the limiters' client, its commands counted
	sent  *counter
	admin *redis.Client // this program's own: INFO, CONFIG, FLUSHDB, ...
	url   string
	log   *slog.Logger
}

// newClient returns a go-redis client for url set up as pacer needs it
// (ContextTimeoutEnabled, MaxRetries -1, DialerRetries 1), with a pool for goroutines
// callers at once, and checks that it answers. A non-nil count counts what
// it sends.
func newClient(url string, goroutines int, count *counter) (*redis.Client, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("pacerbench: -redis: %w", err)
	}
	// Set up as reserve.New needs it, so that pacer uses this client as it
	// is (not a clone) and the hook counts its commands.
	opts.ContextTimeoutEnabled = true
	opts.MaxRetries = -1
	opts.DialerRetries = 1
	// One connection per goroutine, plus pacer's heartbeat and this
	// program's INFO: a smaller pool makes callers queue for a connection
	// (go-redis's default is 10 per GOMAXPROCS).
	opts.PoolSize = goroutines + 8
	rdb := redis.NewClient(opts)
	if count != nil {
		rdb.AddHook(count)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("pacerbench: PING %s: %w", opts.Addr, err)
	}
	return rdb, nil
}

// flush empties the database.
func (b *bench) flush(ctx context.Context) error {
	if err := b.admin.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("pacerbench: FLUSHDB: %w", err)
	}
	return b.setFormat(ctx, b.cfg.Format)
}

// setFormat sets the state format the fleet under the default key prefix
// writes, as `pacer format` does (2, the default, is no setting): its
// Limiters write it from their first heartbeat.
func (b *bench) setFormat(ctx context.Context, f int) error {
	k := layout.FormatKey(reserve.DefaultKeyPrefix)
	var err error
	if f == 2 {
		err = b.admin.Del(ctx, k).Err()
	} else {
		err = b.admin.Set(ctx, k, strconv.Itoa(f), 0).Err()
	}
	if err != nil {
		return fmt.Errorf("pacerbench: the fleet's state format: %w", err)
	}
	return nil
}

// open flushes the database and opens v for lim.
func (b *bench) open(ctx context.Context, v variant, lim limit, procs int) (limiter, *pacerCounts, error) {
	if err := b.flush(ctx); err != nil {
		return nil, nil, err
	}
	counts := &pacerCounts{}
	l, err := v.open(openOptions{rdb: b.rdb, url: b.url, lim: lim, procs: procs, log: b.log, counts: counts})
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", v.Name, err)
	}
	return l, counts, nil
}

// selected returns the variants c.Only names, or all.
func (c config) selected() ([]variant, error) {
	all := variants()
	if c.Only == "" {
		return all, nil
	}
	var vs []variant
	for name := range strings.SplitSeq(c.Only, ";") {
		v, err := findVariant(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		vs = append(vs, v)
	}
	return vs, nil
}

// results is everything a run measured.
type results struct {
	Config     config
	Env        environment
	Failed     []phaseFailure // the phases that stopped with an error, in order
	Variants   []variant
	Throughput []throughput
	Latency    []latency
	Fleet      []fleet
	BusyFleet  []fleet // the fleet again, beside -busy-hogs CPU hogs
	Memory     []memory
	Eviction   []eviction
	Script     []scriptRow
	ScriptNote string
	Seams      *seamsResults    // the seams phase, if run
	Outage     *outageResults   // the outage phase, if run
	Fair       *fairResults     // the fair phase, if run
	FairCost   *fairCostResults // the faircost phase, if run
	Counts     *countsResults   // the counts phase, if run
	Adaptive   *adaptiveResults // the adaptive phase, if run
	Learn      *learnResults    // the learn phase, if run
	Cold       *coldResults     // the cold phase, if run
	Loaded     *loadedResults   // the loaded phase, if run
	Heartbeat  *heartbeatResults
	Shards     []shardSpread
	Inflight   *inflightResults // the inflight phase, if run
	Otel       *otelResults     // the otel phase, if run
	Cluster    *clusterResults  // the cluster phase, if run
}

// run runs every phase, writes c.Out and prints the tables to stdout;
// progress goes to logw.
func run(ctx context.Context, c config, stdout, logw io.Writer) (*results, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	vs, err := c.selected()
	if err != nil {
		return nil, err
	}
	res := &results{Config: c, Variants: vs, Env: newEnvironment(c)}
	url, source := c.RedisURL, "given with -redis"
	var srv *redisproc.Server
	if url == "" {
		if srv, err = redisproc.Start(redisproc.Spec{FIFO: c.FIFO}); err != nil {
			return nil, fmt.Errorf("pacerbench: no -redis given, and starting a redis-server failed: %w", err)
		}
		defer srv.Close()
		url, source = srv.URL(), "a redis-server started by pacerbench (--save '' --appendonly no)"
		if c.FIFO != 0 {
			source += fmt.Sprintf(", under SCHED_FIFO at priority %d (-fifo)", c.FIFO)
		}
	}
	sent := newCounter()
	rdb, err := newClient(url, max(slices.Max(c.Hot), 32), sent)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	admin, err := newClient(url, 1, nil)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	if c.RedisURL != "" && !c.Force {
		n, err := admin.DBSize(ctx).Result()
		if err != nil {
			return nil, err
		}
		if n > 0 {
			return nil, fmt.Errorf("pacerbench: the -redis database holds %d keys; pacerbench flushes it between runs: use an empty database, or -force", n)
		}
	}
	if err := res.Env.readRedis(ctx, admin, source); err != nil {
		return nil, err
	}
	b := &bench{cfg: c, rdb: rdb, sent: sent, admin: admin, url: url,
		log: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	progress := func(format string, args ...any) { fmt.Fprintf(logw, format+"\n", args...) }

	// A phase that fails is reported beside the others, and the run
	// returns its error once the document is written: a failure late in a
	// run of half an hour (a Cluster that would not fail over on a loaded
	// machine) loses nothing the other phases measured. An interrupted run
	// (ctx done) stops and writes nothing.
	phase := func(name string, fn func() error) {
		if !c.runs(name) || ctx.Err() != nil {
			return
		}
		if err := fn(); err != nil {
			res.Failed = append(res.Failed, phaseFailure{Phase: name, Err: err.Error()})
			progress("%-11s the phase failed: %v", name, err)
		}
	}
	phase("hot", func() error {
		for _, g := range c.Hot {
			for _, v := range vs {
				if v.FleetOnly {
					continue
				}
				r, err := b.runThroughput(ctx, v, g, c.Phase)
				if err != nil {
					return err
				}
				progress("throughput  %-40s %3d goroutines: %10.0f/s", v.Name, g, r.PerSecond())
				res.Throughput = append(res.Throughput, r)
			}
		}
		return nil
	})
	phase("lone", func() error {
		var lone []variant
		for _, v := range vs {
			if !v.FleetOnly {
				lone = append(lone, v)
			}
		}
		rs, err := b.runLatency(ctx, lone, c.Phase)
		if err != nil {
			return err
		}
		for _, r := range rs {
			progress("latency     %-40s p50 %v p99 %v", r.Variant, r.P50, r.P99)
		}
		res.Latency = append(res.Latency, rs...)
		return nil
	})
	phase("fleet", func() error {
		for _, v := range vs {
			if v.NoFleet {
				continue
			}
			r, err := b.runFleet(ctx, v)
			if err != nil {
				return err
			}
			progress("fleet       %-40s %.1f/s, busiest 100 ms %d, 1 s %d", v.Name, r.Rate, r.Busiest100ms, r.Busiest1s)
			res.Fleet = append(res.Fleet, r)
		}
		return nil
	})
	phase("busy", func() (err error) {
		res.BusyFleet, err = b.runBusy(ctx, vs, progress)
		return err
	})
	phase("memory", func() error {
		for _, v := range vs {
			if !v.Memory {
				continue
			}
			r, err := b.runMemory(ctx, v)
			if err != nil {
				return err
			}
			progress("memory      %-40s %d B per key", v.Name, r.SampleBytes)
			res.Memory = append(res.Memory, r)
		}
		return nil
	})
	phase("eviction", func() error {
		for _, v := range vs {
			if !v.Memory || v.Kind != kindPacer {
				continue
			}
			for _, policy := range evictPolicies {
				r, err := b.runEviction(ctx, v, policy)
				if err != nil {
					return err
				}
				progress("eviction    %-40s %s: busiest 100 ms %d, 1 s %d", v.Name, policy, r.Busiest100ms, r.Busiest1s)
				res.Eviction = append(res.Eviction, r)
			}
		}
		return nil
	})
	phase("script", func() (err error) {
		res.Script, res.ScriptNote, err = b.runScript(ctx, c.Phase, c.FleetRate)
		return err
	})
	var leases strings.Builder // lease.go's table, after the others
	phase("lease", func() error { return b.runLease(ctx, &leases, progress) })
	phase("waitrate", func() error { return b.runWaitRate(ctx, &leases, progress) })
	phase("seams", func() (err error) {
		res.Seams, err = b.runSeams(ctx, progress)
		return err
	})
	phase("outage", func() (err error) {
		res.Outage, err = b.runOutage(ctx, progress)
		return err
	})
	phase("fair", func() (err error) {
		res.Fair, err = b.runFair(ctx, progress)
		return err
	})
	phase("faircost", func() (err error) {
		res.FairCost, err = b.runFairCost(ctx, progress)
		return err
	})
	phase("counts", func() (err error) {
		res.Counts, err = b.runCounts(ctx, progress)
		return err
	})
	phase("adaptive", func() (err error) {
		res.Adaptive, err = b.runAdaptive(ctx, progress)
		return err
	})
	phase("learn", func() (err error) {
		res.Learn, err = b.runLearn(ctx, progress)
		return err
	})
	phase("cold", func() (err error) {
		res.Cold, err = b.runCold(ctx, progress)
		return err
	})
	phase("loaded", func() (err error) {
		res.Loaded, err = b.runLoaded(ctx, progress)
		return err
	})
	phase("heartbeat", func() (err error) {
		res.Heartbeat, err = b.runHeartbeat(ctx, progress)
		return err
	})
	phase("shards", func() error {
		res.Shards = shardSpreads()
		return nil
	})
	phase("inflight", func() (err error) {
		res.Inflight, err = b.runInflight(ctx, progress)
		return err
	})
	phase("otel", func() (err error) {
		res.Otel, err = b.runOtel(ctx, progress)
		return err
	})
	phase("cluster", func() (err error) {
		res.Cluster, err = b.runCluster(ctx, progress)
		return err
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rdb.Close()
	admin.Close()
	if srv != nil {
		srv.Close() // so that its CPU time counts as this run's
	}
	res.Env.finish()

	tables := failedTable(res.Failed) + res.tables() + res.scriptTable() + leases.String()
	if res.Seams != nil {
		tables += res.Seams.tables()
	}
	if res.Outage != nil {
		tables += res.Outage.tables()
	}
	if res.Fair != nil {
		tables += res.Fair.tables()
	}
	if res.FairCost != nil {
		tables += res.FairCost.tables()
	}
	if res.Counts != nil {
		tables += res.Counts.tables()
	}
	if res.Adaptive != nil && len(res.Adaptive.Runs) > 0 {
		tables += res.Adaptive.tables()
	}
	if res.Learn != nil && len(res.Learn.Runs) > 0 {
		tables += res.Learn.tables()
	}
	if res.Cold != nil {
		tables += res.Cold.tables(c)
	}
	if res.Loaded != nil {
		tables += res.Loaded.tables()
	}
	if res.Heartbeat != nil {
		tables += res.Heartbeat.table()
	}
	if res.Shards != nil {
		tables += shardsTable(res.Shards)
	}
	if res.Inflight != nil {
		tables += res.Inflight.tables()
	}
	if res.Otel != nil {
		tables += res.Otel.tables()
	}
	if res.Cluster != nil {
		tables += res.Cluster.tables()
	}
	fmt.Fprint(stdout, tables)
	if c.Out != "" {
		if err := os.WriteFile(c.Out, []byte(res.document(tables)), 0o644); err != nil {
			return nil, err
		}
		progress("wrote %s", c.Out)
	}
	if len(res.Failed) > 0 {
		names := make([]string, len(res.Failed))
		for i, f := range res.Failed {
			names[i] = f.Phase
		}
		return res, fmt.Errorf("pacerbench: %d phase(s) failed (%s); the others are reported, and the failures with them", len(res.Failed), strings.Join(names, ", "))
	}
	return res, nil
}

// A phaseFailure is a phase that stopped with an error.
type phaseFailure struct {
	Phase string
	Err   string
}

// failedTable is the section that lists the phases that failed, first in
// the document; "" when none did.
func failedTable(failed []phaseFailure) string {
	if len(failed) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("### Phases that failed\n\nThese phases stopped with an error: their tables below are missing, or hold what the phase measured before it failed. The run exited with an error.\n\n| phase | error |\n|---|---|\n")
	for _, f := range failed {
		msg := strings.ReplaceAll(strings.Join(strings.Fields(f.Err), " "), "|", "\\|")
		fmt.Fprintf(&b, "| %s | %s |\n", f.Phase, shorten(msg, 2000))
	}
	return b.String()
}
