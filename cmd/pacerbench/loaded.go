package main

// The loaded phase: the cold phase's shape (cold.go: c.ColdKeys keys at
// 1/s each, c.Procs processes, a goroutine per 25 keys waiting on each in
// turn) for c.LoadedRun on the machine as it is, then again beside
// c.LoadedHogs CPU hogs (busy.go), c.LoadedRuns times (a loaded machine's
// trouble comes and goes), with Redis healthy throughout: pacer on
// README's quick-start client, and redis_rate, the reference. A loaded
// machine makes calls slow; DESIGN.md says that must not make Redis
// absent. A failed wait is counted and the goroutine goes on (the
// crawler logs it and moves to its next host).

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// loadedRun is one run of the loaded phase.
type loadedRun struct {
	coldRun
	Hogs int
	Run  int // 1, 2, ... of the runs beside the hogs; 0 for the run without
	// Busy is the share of the machine's CPU time spent busy (user, nice,
	// system, irq, softirq; /proc/stat) over the run, setup included.
	Busy float64
	// The load average (1 min) when the run began and ended, and the
	// highest sampled every 500 ms in between.
	LoadStart, LoadMax, LoadEnd float64
}

// commands is Redis's commands per admission, from INFO commandstats:
// every command Redis ran (a script's own commands included), but this
// program's.
func (r loadedRun) commands() float64 {
	var n int64
	for _, st := range r.Stats {
		n += st.Calls
	}
	return float64(n) / float64(max(r.Admissions, 1))
}

// loadedResults is the loaded phase.
type loadedResults struct {
	Keys, Procs int
	Run         time.Duration
	Rounds      int // runs beside the hogs
	Runs        []loadedRun
}

// loadedVariants are the loaded phase's limiters.
var loadedVariants = []string{coldQuickStart, coldGCRA}

// runLoaded runs the loaded phase for the variants c.Only selects: each
// without hogs first, then each beside them, c.LoadedRuns rounds.
func (b *bench) runLoaded(ctx context.Context, progress func(string, ...any)) (*loadedResults, error) {
	c := b.cfg
	vs, err := c.selected()
	if err != nil {
		return nil, err
	}
	res := &loadedResults{Keys: c.ColdKeys, Procs: c.Procs, Run: c.LoadedRun, Rounds: c.LoadedRuns}
	for run := range c.LoadedRuns + 1 {
		hogs := c.LoadedHogs
		if run == 0 {
			hogs = 0
		}
		for _, name := range loadedVariants {
			if !slices.ContainsFunc(vs, func(v variant) bool { return v.Name == name }) {
				continue
			}
			r, err := b.loadedOnce(ctx, name, hogs)
			if err != nil {
				return nil, fmt.Errorf("loaded, %s, %d hogs: %w", name, hogs, err)
			}
			r.Run = run
			progress("loaded      %-28s %-22s %6.0f admissions/s, %d errors, %d switches to local, %d local grants, %.3f Redis calls and %.3f commands per admission, Redis CPU %.2f µs per admission, load %.2f-%.2f, CPU %.0f%% busy, steal %s",
				name, r.machine()+":", r.perSecond(), r.Errors, r.Fallbacks, r.Local, r.Redis.Trips, r.commands(), r.Redis.CPUUsec, r.LoadStart, r.LoadMax, 100*r.Busy, stealCell(r.Steal))
			res.Runs = append(res.Runs, r)
		}
	}
	return res, nil
}

// loadedOnce runs the cold shape of variant name once, beside n CPU hogs
// (none: the machine as it is).
func (b *bench) loadedOnce(ctx context.Context, name string, n int) (loadedRun, error) {
	var h *hogs
	if n > 0 {
		var err error
		if h, err = startHogs(n); err != nil {
			return loadedRun{}, err
		}
	}
	r := loadedRun{Hogs: n, LoadStart: load1()}
	cpu := readMachineCPU()
	stop, highest := make(chan struct{}), make(chan float64)
	go func() {
		top := r.LoadStart
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				highest <- top
				return
			case <-t.C:
				top = max(top, load1())
			}
		}
	}()
	cr, err := b.coldFleet(ctx, name, coldAtLimit, b.cfg.LoadedRun, true)
	close(stop)
	r.LoadMax = <-highest
	cpu1 := readMachineCPU()
	r.LoadEnd = load1()
	if h != nil {
		h.stop()
	}
	if err != nil {
		return loadedRun{}, err
	}
	r.coldRun = cr
	r.LoadMax = max(r.LoadMax, r.LoadEnd)
	if cpu.ok && cpu1.ok && cpu1.total > cpu.total {
		r.Busy = (cpu1.busy - cpu.busy) / (cpu1.total - cpu.total)
	}
	return r, nil
}

// load1 returns the 1-minute load average (/proc/loadavg), or -1.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// tables returns the loaded phase's tables, in Markdown.
func (lr *loadedResults) tables() string {
	if len(lr.Runs) == 0 {
		return ""
	}
	allowed := float64(lr.Keys) * coldLimit.Rate
	runs := table{
		title: "Cold keys on a loaded machine",
		intro: fmt.Sprintf("The cold phase's shape: %s keys at %g/s each, burst %d, %d processes, a goroutine per %d keys waiting on each in turn "+
			"(the keys allow %s admissions/s), for %v per run, with Redis healthy; first on the machine as it is (\"no hogs\": other work on it shows in CPU busy and the load average), "+
			"then beside CPU hogs (this program re-run, each spinning on one CPU), %d times. `%s`: README's quick start (`redis.NewClient(&redis.Options{Addr: addr})`, "+
			"`reserve.Options{RequireRedis: true}`, Metrics the one field added); `%s`: Allow, and if refused sleep RetryAfter and try again, on this program's client. "+
			"A failed wait is counted, and the goroutine goes on to its next key after 10 ms. Switches: Metrics.Fallback(true) and "+
			"failed Redis calls: Metrics.RedisCall with an error (pacer's CallTimeout, 250 ms, tripping among them), each from New on (the warm-up's included); "+
			"local grants: Metrics.Reserved with local set, over the run (an admission paced locally makes no Redis call: it lowers the calls per admission). "+
			"Redis calls are the limiter's round trips (pacer: Metrics.RedisCall; redis_rate: a hook on its client); "+
			"Redis commands are INFO commandstats' calls of every command but this program's (a script's own commands included), over the run; "+
			"Redis CPU is INFO cpu's used_cpu_user + used_cpu_sys over the run; client CPU is the processes' user + system time. "+
			"CPU busy is the machine's (/proc/stat) over the run, its setup included; the load average is the 1-minute one at the start, "+
			"the highest sampled every 500 ms, and at the end.",
			thousands(float64(lr.Keys)), coldLimit.Rate, coldLimit.Burst, lr.Procs, coldChunk, thousands(allowed), lr.Run, lr.Rounds, coldQuickStart, coldGCRA),
		header: []string{"limiter", "machine", "admissions/s", "of the keys' limit", "errors", "switches to local", "local grants", "failed Redis calls",
			"Redis calls / admission", "Redis commands / admission", "Redis CPU µs / admission", "client CPU µs / admission",
			"CPU busy", "load average (start, highest, end)", "steal"},
	}
	for _, r := range lr.Runs {
		n := float64(max(r.Admissions, 1))
		switches, local, failed := strconv.FormatInt(r.Fallbacks, 10), thousands(float64(r.Local)), thousands(float64(r.Failed))
		if r.Variant == coldGCRA {
			switches, local, failed = "–", "–", "–"
		}
		runs.rows = append(runs.rows, []string{r.Variant, r.machine(), thousands(r.perSecond()), fmt.Sprintf("%.1f%%", 100*r.perSecond()/allowed),
			thousands(float64(r.Errors)), switches, local, failed, fmt.Sprintf("%.3f", r.Redis.Trips), fmt.Sprintf("%.3f", r.commands()),
			fmt.Sprintf("%.2f", r.Redis.CPUUsec), fmt.Sprintf("%.2f", float64(r.ClientCPU.Microseconds())/n),
			fmt.Sprintf("%.0f%%", 100*r.Busy), fmt.Sprintf("%.2f, %.2f, %.2f", r.LoadStart, r.LoadMax, r.LoadEnd), stealCell(r.Steal)})
		if r.Errors > 0 {
			runs.notes = append(runs.notes, fmt.Sprintf("**%s, %s: %s failed waits**, one of them: %s",
				r.Variant, r.machine(), thousands(float64(r.Errors)), r.FirstError))
		}
		if r.WarmErrors > 0 {
			runs.notes = append(runs.notes, fmt.Sprintf("**%s, %s: %s failed waits in the processes' warm-up** (a wait on a key of its own per goroutine, before the run; not in the figures above), one of them: %s",
				r.Variant, r.machine(), thousands(float64(r.WarmErrors)), r.WarmFirstError))
		}
	}
	runs.notes = append(runs.notes, "What it shows: whether a loaded machine makes pacer leave Redis (DESIGN.md: a slow process is not an outage). "+
		"**The goal** (the issue): with two CPU hogs beside the fleet on a 2-core machine and Redis healthy, 0 switches to local pacing, 0 errors, "+
		"and Redis calls per admission within 5% of the quiet run (here: the run with no hogs). **Measured on the code before the rework** (the issue's figures, not this program's): "+
		"at load average 3-10 the Limiters switched to local pacing 8-11 times per 20 s and returned thousands of errors (\"no share to pace on\"), "+
		"with 6.9-9.5 Redis calls per admission and 10-15 x the Redis CPU of a quiet run; redis_rate, on the same machine and keys, kept its schedule.")

	ratio := table{
		title:  "Cold keys on a loaded machine: with hogs against without",
		intro:  "Each limiter's figures per admission beside the hogs, divided by its run's with no hogs (1.00: the load cost Redis nothing more per admission).",
		header: []string{"limiter", "machine", "Redis calls / admission", "Redis commands / admission", "Redis CPU / admission", "admissions/s"},
	}
	for _, q := range lr.Runs {
		if q.Hogs != 0 {
			continue
		}
		if q.Fallbacks > 0 || q.Local > 0 || q.Errors > 0 {
			ratio.notes = append(ratio.notes, fmt.Sprintf("**%s: its run without hogs was not quiet** (%d switches to local, %s local grants, %s errors): "+
				"the ratios below divide by a disturbed run.", q.Variant, q.Fallbacks, thousands(float64(q.Local)), thousands(float64(q.Errors))))
		}
		for _, l := range lr.Runs {
			if l.Variant != q.Variant || l.Hogs == 0 {
				continue
			}
			div := func(a, b float64) string {
				if b == 0 {
					return "–"
				}
				return fmt.Sprintf("%.2f", a/b)
			}
			ratio.rows = append(ratio.rows, []string{l.Variant, l.machine() + " / no hogs", div(l.Redis.Trips, q.Redis.Trips),
				div(l.commands(), q.commands()), div(l.Redis.CPUUsec, q.Redis.CPUUsec), div(l.perSecond(), q.perSecond())})
		}
	}
	out := runs.markdown()
	if len(ratio.rows) > 0 {
		out += ratio.markdown()
	}
	return out
}

// machine names r's machine.
func (r loadedRun) machine() string {
	if r.Hogs == 0 {
		return "no hogs"
	}
	return fmt.Sprintf("%d CPU hogs, run %d", r.Hogs, r.Run)
}
