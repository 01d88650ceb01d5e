package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/hog"
	"github.com/pacer-go/pacer/reserve"
)

// childEnv carries a child process's job: this program (or its test binary),
// re-run with it set, runs one process of the fleet and exits (see package
// internal/fleet).
const childEnv = "PACERBENCH_CHILD"

// childJob is what a child process is told in childEnv. The start and end
// times come later, on its stdin, once every child is ready.
type childJob struct {
	Variant    string
	RedisURL   string
	Key        string
	Limit      limit
	Procs      int
	Goroutines int
}

// fleet is one row of the fleet tables.
type fleet struct {
	Variant    string
	Procs      int
	Goroutines int // per process
	Limit      limit
	Seconds    float64
	Calls      int64 // calls made in [start, end)
	Rate       float64
	// The most calls in any window [t, t+100 ms) and [t, t+1 s).
	Busiest100ms, Busiest1s int
	// LeakyRejected is how many calls a leaky-bucket provider at the
	// fleet's rate would refuse (provider.LeakyRejections).
	LeakyRejected int
	// Gaps between consecutive calls of the whole fleet.
	GapP1, GapP50, GapP99 time.Duration
	// How long each caller waited for permission.
	WaitP50, WaitP99, WaitMax time.Duration
	Redis                     perCall
	// ClientCPUUsec is the CPU time the child processes spent in their run,
	// per call, µs.
	ClientCPUUsec float64
	Fallbacks     int64
}

// runFleet runs c.Procs child processes of c.Goroutines goroutines (the
// floor: one process of all of them), each looping {wait; record the time}
// on one key for c.Fleet.
func (b *bench) runFleet(ctx context.Context, v variant) (fleet, error) {
	c := b.cfg
	if err := b.flush(ctx); err != nil {
		return fleet{}, err
	}
	lim := limit{Rate: c.FleetRate, Burst: c.FleetBurst}
	procs, goroutines := c.Procs, c.Goroutines
	if v.OneProcess {
		procs, goroutines = 1, c.Procs*c.Goroutines
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // kills children left behind by an error
	f, err := fleetproc.Start(ctx, fleetproc.Options{Env: childEnv, Procs: procs, Stdin: true,
		Spec: childJob{Variant: v.Name, RedisURL: b.url, Key: "fleet", Limit: lim, Procs: procs, Goroutines: goroutines}})
	if err != nil {
		return fleet{}, fmt.Errorf("%s: %w", v.Name, err)
	}
	if err := awaitReady(ctx, f); err != nil {
		return fleet{}, fmt.Errorf("%s: fleet %w", v.Name, err)
	}
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return fleet{}, err
	}
	beginRun(f, c.Fleet)
	if err := f.Wait(); err != nil {
		return fleet{}, fmt.Errorf("%s: fleet: %w", v.Name, err)
	}
	var (
		calls, waits []int64
		total        childEnd
		errs         []error
	)
	for _, ch := range f.Children() {
		out, err := readChild(ch.Lines())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: fleet process %d: %w", v.Name, ch.Index, err))
			continue
		}
		calls = append(calls, out.calls...)
		waits = append(waits, out.waits...)
		total.CPU += out.end.CPU
		total.Fallbacks += out.end.Fallbacks
		total.Sent.add(out.end.Sent)
	}
	if err := errors.Join(errs...); err != nil {
		return fleet{}, err
	}
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return fleet{}, err
	}
	slices.Sort(calls)
	slices.Sort(waits)
	g := gaps(calls)
	n := int64(len(calls))
	r := fleet{
		Variant:       v.Name,
		Procs:         procs,
		Goroutines:    goroutines,
		Limit:         lim,
		Seconds:       c.Fleet.Seconds(),
		Calls:         n,
		Rate:          float64(n) / c.Fleet.Seconds(),
		Busiest100ms:  busiest(calls, 100*time.Millisecond),
		Busiest1s:     busiest(calls, time.Second),
		LeakyRejected: leakyRejections(calls, lim.Rate),
		GapP1:         quantile(g, 0.01),
		GapP50:        quantile(g, 0.50),
		GapP99:        quantile(g, 0.99),
		WaitP50:       time.Duration(quantile(waits, 0.50)),
		WaitP99:       time.Duration(quantile(waits, 0.99)),
		WaitMax:       time.Duration(quantile(waits, 1)),
		Fallbacks:     total.Fallbacks,
	}
	if n > 0 {
		r.ClientCPUUsec = float64(total.CPU.Microseconds()) / float64(n)
	}
	if v.Redis {
		r.Redis = cost(u, total.Sent, n)
	}
	return r, nil
}

// childOutput is what a child process reports.
type childOutput struct {
	calls, waits []int64 // Unix ns of each call; ns each caller waited
	end          childEnd
}

// childEnd is a child's last line, after its calls.
type childEnd struct {
	CPU       time.Duration // user + system time over the run
	Fallbacks int64         // pacer's switches to local pacing
	Sent      sent          // what it sent Redis over the run
}

// readChild reads a child's stdout lines: "ready", then a line "c <call
// Unix ns> <wait ns>" per call, then "end <childEnd as JSON>".
func readChild(lines []string) (childOutput, error) {
	var out childOutput
	if len(lines) == 0 || lines[0] != "ready" {
		return out, errors.New("no ready line")
	}
	ended := false
	for _, line := range lines[1:] {
		if js, ok := strings.CutPrefix(line, "end "); ok {
			if err := json.Unmarshal([]byte(js), &out.end); err != nil {
				return out, fmt.Errorf("bad end line %q: %w", line, err)
			}
			ended = true
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			return out, fmt.Errorf("bad line %q", line)
		}
		var nums []int64
		for _, s := range f[1:] {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return out, fmt.Errorf("bad line %q", line)
			}
			nums = append(nums, v)
		}
		if len(f) != 3 || f[0] != "c" || len(nums) != 2 {
			return out, fmt.Errorf("bad line %q", line)
		}
		out.calls = append(out.calls, nums[0])
		out.waits = append(out.waits, nums[1])
	}
	if !ended {
		return out, errors.New("no end line")
	}
	return out, nil
}

// runAsChild runs this process as one process of the fleet, if it is one
// (childEnv is set), and returns its exit code and true.
func runAsChild() (code int, isChild bool) {
	if os.Getenv(hogEnv) != "" {
		hog.Spin()
		return 0, true
	}
	return runChild(childEnv, "pacerbench child", childMain)
}

// runChild runs this process as a child whose job of type J is in env, if
// it is one, with main, and returns its exit code and true.
func runChild[J any](env, name string, main func(J) error) (code int, isChild bool) {
	var j J
	ok, err := fleetproc.Spec(env, &j)
	if !ok {
		return 0, false
	}
	if err == nil {
		err = main(j)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		return 1, true
	}
	return 0, true
}

// childMain is one process of the fleet: it opens the limiter, says "ready",
// reads the start and end times from stdin, and from its goroutines loops
// {wait; record the time} on the key until the end.
func childMain(j childJob) error {
	v, err := findVariant(j.Variant)
	if err != nil {
		return err
	}
	count := newCounter()
	rdb, err := newClient(j.RedisURL, j.Goroutines, count)
	if err != nil {
		return err
	}
	defer rdb.Close()
	counts := &pacerCounts{}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l, err := v.open(openOptions{rdb: rdb, url: j.RedisURL, lim: j.Limit, procs: j.Procs, log: log, counts: counts})
	if err != nil {
		return err
	}
	defer l.close()

	// Warm up on a key of this process's own: dial, load scripts.
	if err := dial(context.Background(), rdb, j.Goroutines); err != nil {
		return err
	}
	warm := "warmup:" + strconv.Itoa(os.Getpid())
	errs := make([]error, j.Goroutines)
	var wg sync.WaitGroup
	for i := range j.Goroutines {
		wg.Go(func() { _, errs[i] = l.take(context.Background(), warm) })
	}
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	end, err := readyToStart()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()

	count.take()
	cpu0 := cpuTime()
	type call struct{ at, wait int64 }
	calls := make([][]call, j.Goroutines)
	for i := range j.Goroutines {
		wg.Go(func() {
			for {
				t0 := time.Now()
				err := l.wait(ctx, j.Key)
				t1 := time.Now()
				if err != nil {
					if !endOfRun(ctx, err) {
						errs[i] = err
					}
					return
				}
				if !t1.Before(end) {
					return
				}
				calls[i] = append(calls[i], call{t1.UnixNano(), int64(t1.Sub(t0))})
			}
		})
	}
	wg.Wait()
	if err := l.close(); err != nil { // counted: part of what the limiter costs
		return err
	}
	last := childEnd{CPU: cpuTime() - cpu0, Fallbacks: counts.fallbacks.Load(), Sent: count.take()}
	if err := firstErr(errs); err != nil {
		return err
	}
	js, err := json.Marshal(last)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	for _, cs := range calls {
		for _, c := range cs {
			fmt.Fprintf(w, "c %d %d\n", c.at, c.wait)
		}
	}
	fmt.Fprintf(w, "end %s\n", js)
	return w.Flush()
}

// endOfRun reports whether err only says that the run's end came first: the
// context's deadline passed (go-redis, with ContextTimeoutEnabled, then
// fails a call in flight with an i/o timeout, maybe before ctx.Err says so),
// or the wait would have passed it.
func endOfRun(ctx context.Context, err error) bool {
	var tooLong *reserve.WaitTooLongError
	deadline, _ := ctx.Deadline()
	return ctx.Err() != nil || !time.Now().Before(deadline) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &tooLong) ||
		strings.Contains(err.Error(), "would exceed context deadline") // x/time/rate's Wait
}

// readyToStart is a child's start: it says "ready", reads the run's start
// and end times (Unix ns) from stdin, and returns the end once the start has
// come.
func readyToStart() (end time.Time, err error) {
	fmt.Println("ready")
	var startNs, endNs int64
	if _, err := fmt.Fscan(os.Stdin, &startNs, &endNs); err != nil {
		return end, fmt.Errorf("reading the start and end times: %w", err)
	}
	time.Sleep(time.Until(time.Unix(0, startNs)))
	return time.Unix(0, endNs), nil
}

// awaitReady waits, 30 s at most, until every child of f has said "ready"
// (its limiter made and warmed up); the error names the first that did not.
func awaitReady(ctx context.Context, f *fleetproc.Fleet) error {
	return awaitReadyWithin(ctx, f, 30*time.Second)
}

// awaitReadyWithin is awaitReady with a bound of d: a few hundred
// processes take a while to start on a small machine.
func awaitReadyWithin(ctx context.Context, f *fleetproc.Fleet, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for _, ch := range f.Children() {
		line, err := ch.FirstLine(ctx)
		if err == nil && line != "ready" {
			err = fmt.Errorf("no ready line (got %q)", line)
		}
		if err != nil {
			return fmt.Errorf("process %d: %w: %s", ch.Index, err, ch.Stderr())
		}
	}
	return nil
}

// startCPUProfile starts a CPU profile of this process into dir/name, for
// go tool pprof; stop ends it and closes the file.
func startCPUProfile(dir, name string) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// beginRun tells every child of f that the run starts 50 ms from now and
// lasts d, and returns its start and end.
func beginRun(f *fleetproc.Fleet, d time.Duration) (start, end time.Time) {
	start = time.Now().Add(50 * time.Millisecond)
	end = start.Add(d)
	for _, ch := range f.Children() {
		fmt.Fprintf(ch.Stdin, "%d %d\n", start.UnixNano(), end.UnixNano())
		ch.Stdin.Close()
	}
	return start, end
}
