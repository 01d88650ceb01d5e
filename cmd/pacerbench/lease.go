package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// The lease phase: one hot key, paced at 10,000,000/s (burst 10,000) so
// that nobody waits, called by c.Procs processes of leaseGoroutines
// goroutines each, with pacer's leases on (the default) and off
// (Options.LeaseSpan -1: coalescing alone). It prints, for both, admissions
// per second (Reserves that succeed, and Waits returning nil: both are
// run), the Redis CPU per admission (INFO cpu), the slots the key granted
// that nobody used (the key's last number less the admissions: leased
// slots that lapsed, and slots Sleep gave up for lateness), and the Waits
// moved to a fresh slot; leased Waits once more on the client and Options
// exactly as README's quick start builds them; one caller's
// Reserve latency both ways; golang.org/x/time/rate in one process with as
// many goroutines, the machine's floor; and the steal time over the phase.
// Its table comes after the others, on stdout and in c.Out.

// leaseChildEnv carries a lease child's job (see package internal/fleet).
const leaseChildEnv = "PACERBENCH_LEASE_CHILD"

// Diagnostics of the lease and waitrate phases' children, for whoever
// looks for where the time goes (they cost the children some CPU: figures
// taken with them on are not the phase's figures):
//   - leaseProfileEnv, set to a directory, has each child write a CPU
//     profile of its run there (lease-<call>-<rate>[-quick]-<index>.pprof),
//     for go tool pprof;
//   - leaseTraceEnv, set to anything, has each child trace its Waits
//     (reserve.Options.Tracer) and print, on stderr, how late they woke,
//     how late the moved ones were when they moved, in how many distinct
//     milliseconds the moves fell, the connections its client put to use
//     (the quick-start one's: with the moves around each), and the
//     runtime's scheduling latencies and GC pauses over the run
//     (runtime/metrics).
const (
	leaseProfileEnv = "PACERBENCH_LEASE_PROFILE"
	leaseTraceEnv   = "PACERBENCH_LEASE_TRACE"
)

const leaseGoroutines = 64

// leaseLimit is the lease phase's limit: so high that nobody waits.
var leaseLimit = reserve.Limit{Rate: 10_000_000, Burst: 10_000}

// leaseJob is what a lease child is told.
type leaseJob struct {
	RedisURL   string
	Key        string
	Goroutines int
	LeaseSpan  time.Duration // reserve.Options.LeaseSpan; -1: no leases
	Wait       bool          // admissions are Waits returning nil; else Reserves
	// Rate and Burst are the key's limit; 0: leaseLimit.
	Rate  float64
	Burst int
	// QuickStart: the client and Options exactly as README's quick start
	// builds them (redis.NewClient(&redis.Options{Addr: addr}),
	// reserve.Options{RequireRedis: true}) instead of the tuned client.
	QuickStart bool
	// QuickPool and QuickIdle change one thing each of the quick-start
	// client (waitQuickEnv): its pool sized as the tuned client's
	// (Goroutines + 8, where go-redis's default is 10 per GOMAXPROCS);
	// go-redis's MinIdleConns set to Goroutines + 8 (it opens them in the
	// background, within PoolSize). Both reach the copy of the client
	// pacer talks to Redis through (the quick-start client is not set up
	// for pacer: reserve's tunedClient).
	QuickPool, QuickIdle bool
}

// leaseEnd is a lease child's last line.
type leaseEnd struct {
	Admissions int64
	CPU        time.Duration
	Fallbacks  int64
	Moved      int64 // sleepers that took a fresh slot (late, or paused over)
}

// leaseRun is one fleet run of the lease phase.
type leaseRun struct {
	Leases      bool
	Wait        bool
	QuickStart  bool // the client and Options of README's quick start
	Admissions  int64
	Seconds     float64
	RedisCPU    time.Duration
	Granted     int64 // the key's last number: slots Redis granted
	ClientCPU   time.Duration
	Fallbacks   int64
	Moved       int64
	RedisCalls  int64
	RedisCPUUse float64 // µs per admission
}

func (r leaseRun) perSecond() float64 { return float64(r.Admissions) / r.Seconds }

// runLease runs the lease phase and prints its table to w.
func (b *bench) runLease(ctx context.Context, w io.Writer, progress func(string, ...any)) error {
	c := b.cfg
	steal0 := readMachineCPU()
	var runs []leaseRun
	// Each way with Reserve, then with Wait, leases on and off alternating,
	// then Reserve again: a change in the machine's load shows as a
	// difference between the two Reserve runs of one way.
	// The quick-start client's Wait (leases on: the default) comes after
	// the tuned client's.
	for _, run := range []struct{ on, wait, quick bool }{{true, false, false}, {false, false, false}, {true, true, false}, {true, true, true},
		{false, true, false}, {true, false, false}, {false, false, false}} {
		var r leaseRun
		var err error
		if run.quick {
			r, err = b.jobFleet(ctx, leaseJob{Goroutines: leaseGoroutines, Wait: run.wait, QuickStart: true}, c.Phase)
		} else {
			r, err = b.leaseFleet(ctx, run.on, run.wait, c.Phase)
		}
		if err != nil {
			return err
		}
		progress("lease       leases %-5v %-7s %d x %d%s: %10.0f admissions/s, Redis CPU %.3f µs per admission, %d granted unused",
			run.on, callName(run.wait), c.Procs, leaseGoroutines, quickName(run.quick), r.perSecond(), r.RedisCPUUse, r.Granted-r.Admissions)
		runs = append(runs, r)
	}
	lone, err := b.leaseLone(ctx, c.Phase)
	if err != nil {
		return err
	}
	floor := leaseFloor(c.Procs*leaseGoroutines, c.Phase)
	steal1 := readMachineCPU()
	steal := time.Duration(-1)
	if steal0.ok && steal1.ok {
		steal = time.Duration((steal1.steal - steal0.steal) / ticksPerSecond * float64(time.Second))
	}

	fmt.Fprintf(w, "\n### Hot key with leases (limit %.0f/s, burst %d; %d processes x %d goroutines, %v per run)\n\n",
		leaseLimit.Rate, leaseLimit.Burst, c.Procs, leaseGoroutines, c.Phase)
	fmt.Fprintln(w, "| leases | call | admissions/s | Redis CPU µs per admission | Redis calls per admission | slots granted unused | Waits moved to a fresh slot | client CPU µs per admission | fallbacks |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range runs {
		fmt.Fprintf(w, "| %s | %s%s | %.0f | %.3f | %.4f | %d | %d | %.2f | %d |\n", onOff(r.Leases), callName(r.Wait), quickName(r.QuickStart), r.perSecond(), r.RedisCPUUse,
			float64(r.RedisCalls)/float64(max(r.Admissions, 1)), r.Granted-r.Admissions, r.Moved,
			float64(r.ClientCPU.Microseconds())/float64(max(r.Admissions, 1)), r.Fallbacks)
	}
	fmt.Fprintf(w, "\nx/time/rate in one process, %d goroutines (the machine's floor): %.0f admissions/s\n", c.Procs*leaseGoroutines, floor)
	fmt.Fprintln(w, "\nOne caller's Reserve (1 goroutine, same limit; alternating rounds):")
	fmt.Fprintln(w, "\n| leases | calls | p50 | p99 |")
	fmt.Fprintln(w, "|---|---:|---:|---:|")
	for _, l := range lone {
		fmt.Fprintf(w, "| %s | %d | %v | %v |\n", l.Variant, l.Calls, l.P50, l.P99)
	}
	if steal >= 0 {
		fmt.Fprintf(w, "\nSteal time over the phase (/proc/stat): %v of %v.\n", steal.Round(time.Millisecond), 2*runtime.NumCPU())
	} else {
		fmt.Fprintln(w, "\nSteal time over the phase: unknown.")
	}
	return nil
}

func callName(wait bool) string {
	if wait {
		return "Wait"
	}
	return "Reserve"
}

// quickName labels a run on the quick-start client.
func quickName(quick bool) string {
	if quick {
		return ", quick-start client"
	}
	return ""
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// leaseFleet runs c.Procs lease children for d, leases on or off.
func (b *bench) leaseFleet(ctx context.Context, on, wait bool, d time.Duration) (leaseRun, error) {
	span := time.Duration(-1)
	if on {
		span = 0 // the default
	}
	return b.jobFleet(ctx, leaseJob{Goroutines: leaseGoroutines, LeaseSpan: span, Wait: wait}, d)
}

// jobFleet runs c.Procs lease children on j (its RedisURL and Key filled
// in here) for d, and sums what they report.
func (b *bench) jobFleet(ctx context.Context, j leaseJob, d time.Duration) (leaseRun, error) {
	c := b.cfg
	if err := b.flush(ctx); err != nil {
		return leaseRun{}, err
	}
	j.RedisURL, j.Key = b.url, "hot"
	on, wait := j.LeaseSpan >= 0, j.Wait
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: leaseChildEnv, Procs: c.Procs, Stdin: true, Spec: j})
	if err != nil {
		return leaseRun{}, err
	}
	if err := awaitReady(ctx, f); err != nil {
		return leaseRun{}, fmt.Errorf("lease %w", err)
	}
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return leaseRun{}, err
	}
	beginRun(f, d)
	if err := f.Wait(); err != nil {
		var errs []error
		for _, ch := range f.Children() {
			errs = append(errs, fmt.Errorf("lease process %d: %s", ch.Index, ch.Stderr()))
		}
		return leaseRun{}, fmt.Errorf("lease fleet: %w: %w", err, errors.Join(errs...))
	}
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return leaseRun{}, err
	}
	r := leaseRun{Leases: on, Wait: wait, QuickStart: j.QuickStart, Seconds: d.Seconds(), RedisCPU: time.Duration(u.CPU * float64(time.Second))}
	for _, ch := range f.Children() {
		if os.Getenv(leaseTraceEnv) != "" {
			fmt.Fprintf(os.Stderr, "lease process %d (rate %.0f, wait %v, quick %v):\n%s", ch.Index, j.Rate, j.Wait, j.QuickStart, ch.Stderr())
		}
		lines := ch.Lines()
		js, ok := strings.CutPrefix(lines[len(lines)-1], "end ")
		var e leaseEnd
		if !ok || json.Unmarshal([]byte(js), &e) != nil {
			return leaseRun{}, fmt.Errorf("lease process %d: bad last line %q", ch.Index, lines[len(lines)-1])
		}
		r.Admissions += e.Admissions
		r.ClientCPU += e.CPU
		r.Fallbacks += e.Fallbacks
		r.Moved += e.Moved
	}
	for name, st := range u.Stats {
		if name == "evalsha" || name == "eval" || name == "get" {
			r.RedisCalls += st.Calls
		}
	}
	// The key's last number: every slot granted, used or not. The key
	// lives a second after its last write.
	state, err := b.admin.Get(ctx, "pacer:{hot}").Result()
	if err == nil {
		r.Granted = keyGranted(state)
	}
	if r.Admissions > 0 {
		r.RedisCPUUse = u.CPU * 1e6 / float64(r.Admissions)
	}
	return r, nil
}

// keyGranted is the last number of a key's state, in any format: the
// slots it granted. Before, the text formats' field was read from format
// 3's binary state too, and the tables showed nonsense: "slots granted
// unused" of -818,208 or 5,669,304 in a 5 s run at 50,000/s
// (TestKeyGranted).
func keyGranted(state string) int64 {
	_, seq := layout.StateHead(state)
	return seq
}

// runAsLeaseChild runs this process as one process of the lease phase's
// fleet, if it is one, and returns its exit code and true.
func runAsLeaseChild() (code int, isChild bool) {
	return runChild(leaseChildEnv, "pacerbench lease child", leaseChild)
}

// leaseChild is one process of the lease phase: a Limiter, "ready", the
// start and end times from stdin, then j.Goroutines goroutines calling
// Wait (or Reserve) on the key until the end; its last line "end <leaseEnd as JSON>".
func leaseChild(j leaseJob) error {
	lim := leaseLimit
	if j.Rate > 0 {
		lim = reserve.Limit{Rate: j.Rate, Burst: j.Burst}
	}
	var rdb *redis.Client
	var err error
	var tracer *waitTracer
	if os.Getenv(leaseTraceEnv) != "" {
		tracer = newWaitTracer()
	}
	if j.QuickStart {
		u, perr := redis.ParseURL(j.RedisURL)
		if perr != nil {
			return perr
		}
		qo := &redis.Options{Addr: u.Addr, DB: u.DB}
		if j.QuickPool {
			qo.PoolSize = j.Goroutines + 8
		}
		if j.QuickIdle {
			qo.MinIdleConns = j.Goroutines + 8
		}
		if tracer != nil {
			// Counts the connections of pacer's copy of this client too
			// (the copy keeps its options: reserve's tunedClient), at
			// each one's first use.
			qo.OnConnect = func(context.Context, *redis.Conn) error {
				tracer.connected()
				return nil
			}
		}
		rdb = redis.NewClient(qo)
	} else if rdb, err = newClient(j.RedisURL, j.Goroutines, nil); err != nil {
		return err
	}
	defer rdb.Close()
	counts := &pacerCounts{}
	opts := reserve.Options{LeaseSpan: j.LeaseSpan, Metrics: counts}
	if j.QuickStart {
		opts = reserve.Options{RequireRedis: true, Metrics: counts}
	}
	if tracer != nil {
		opts.Tracer, opts.Metrics = tracer, tracedCounts{counts, tracer}
	}
	l, err := reserve.New(rdb, opts)
	if err != nil {
		return err
	}
	defer l.Close()
	if !j.QuickStart {
		// The tuned client is pacer's own (set up for it, not copied):
		// its connections open before the run.
		if err := dial(context.Background(), rdb, j.Goroutines); err != nil {
			return err
		}
	}
	warm := "warmup:" + strconv.Itoa(os.Getpid())
	for range 10 {
		if err := l.Wait(context.Background(), warm, lim); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	end, err := readyToStart()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	if dir := os.Getenv(leaseProfileEnv); dir != "" {
		name := fmt.Sprintf("lease-%s-%.0f%s-%d.pprof", strings.ToLower(callName(j.Wait)), lim.Rate,
			map[bool]string{true: "-quick"}[j.QuickStart], fleetproc.Index())
		stop, err := startCPUProfile(dir, name)
		if err != nil {
			return err
		}
		defer stop()
	}
	var m0 []metrics.Sample
	if tracer != nil {
		m0 = runtimeSamples()
		tracer.started.Store(0) // the warm-up's Waits are not the run's
		tracer.startRun(rdb, j.QuickStart)
	}
	cpu0 := cpuTime()
	var (
		admissions atomic.Int64
		wg         sync.WaitGroup
		errs       = make([]error, j.Goroutines)
	)
	for i := range j.Goroutines {
		wg.Go(func() {
			n := int64(0)
			defer func() { admissions.Add(n) }()
			for {
				var err error
				if j.Wait {
					err = l.Wait(ctx, j.Key, lim)
				} else {
					_, err = l.Reserve(ctx, j.Key, lim)
				}
				if err != nil {
					if !endOfRun(ctx, err) {
						errs[i] = err
					}
					return
				}
				if !time.Now().Before(end) {
					return
				}
				n++
			}
		})
	}
	wg.Wait()
	if tracer != nil {
		tracer.report(os.Stderr, m0, rdb, j.QuickStart)
	}
	if err := l.Close(); err != nil {
		return err
	}
	if err := firstErr(errs); err != nil {
		return err
	}
	js, err := json.Marshal(leaseEnd{Admissions: admissions.Load(), CPU: cpuTime() - cpu0, Fallbacks: counts.fallbacks.Load(), Moved: counts.moved.Load()})
	if err != nil {
		return err
	}
	fmt.Printf("end %s\n", js)
	return nil
}

// leaseLone measures one caller's Reserve on leaseLimit, leases on and
// off, in alternating rounds.
func (b *bench) leaseLone(ctx context.Context, d time.Duration) ([]latency, error) {
	const rounds = 4
	took := [2][]time.Duration{}
	for round := range 2 * rounds {
		on := round%2 == 0
		if err := b.flush(ctx); err != nil {
			return nil, err
		}
		span := time.Duration(-1)
		if on {
			span = 0
		}
		l, err := reserve.New(b.rdb, reserve.Options{LeaseSpan: span, Logger: b.log})
		if err != nil {
			return nil, err
		}
		for range 100 {
			if _, err := l.Reserve(ctx, "lone", leaseLimit); err != nil {
				l.Close()
				return nil, err
			}
		}
		runtime.GC()
		i := 1
		if on {
			i = 0
		}
		end := time.Now().Add(d / rounds)
		for time.Now().Before(end) {
			t0 := time.Now()
			if _, err := l.Reserve(ctx, "lone", leaseLimit); err != nil {
				l.Close()
				return nil, err
			}
			took[i] = append(took[i], time.Since(t0))
		}
		if err := l.Close(); err != nil {
			return nil, err
		}
	}
	out := make([]latency, 2)
	for i, name := range []string{"on", "off"} {
		t := took[i]
		slices.Sort(t)
		out[i] = latency{Variant: name, Calls: int64(len(t)), P50: quantile(t, 0.5), P99: quantile(t, 0.99), Max: t[len(t)-1]}
	}
	return out, nil
}

// leaseFloor is golang.org/x/time/rate at leaseLimit in this process, g
// goroutines Waiting for d: admissions per second.
func leaseFloor(g int, d time.Duration) float64 {
	n, secs := rateFloor(g, rate.NewLimiter(rate.Limit(leaseLimit.Rate), leaseLimit.Burst), d)
	return float64(n) / secs
}
