package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// The waitrate phase: a fleet whose demand exceeds the limit must get the
// limit. c.Procs processes of leaseGoroutines goroutines each loop
// {Wait} on one key, burst 1, at each of waitRates, for c.Phase; a Wait
// returning nil is an admission. It prints, per rate, admissions per second
// as a share of the rate, the sleepers that took a fresh slot (woke too
// late, Metrics.Moved), the slots the key granted that nobody used (the
// key's last number less the admissions), the slots it never granted (the
// rate times the run less its last number: the key's queue ran dry), and
// the clients' and Redis's CPU and the Redis calls per admission, for pacer
// with the tuned client and with the client exactly as README's quick start
// builds it; and golang.org/x/time/rate with as many goroutines in one
// process at the same limit, the machine's floor. Steal time over the phase
// ends it. waitQuickEnv changes the quick-start client one difference at a
// time.

// waitRates are the limits of the waitrate phase (burst 1), unless
// waitRatesEnv names others ("200000" or "50000,200000"), for a quicker
// look at one.
var waitRates = []float64{50_000, 200_000}

const waitRatesEnv = "PACERBENCH_WAITRATE_RATES"

// phaseRates returns waitRates, or those waitRatesEnv names.
func phaseRates() ([]float64, error) {
	env := os.Getenv(waitRatesEnv)
	if env == "" {
		return waitRates, nil
	}
	var out []float64
	for _, f := range strings.Split(env, ",") {
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("%s=%q: want rates separated by commas", waitRatesEnv, env)
		}
		out = append(out, r)
	}
	return out, nil
}

// waitQuickEnv changes the quick-start client of the waitrate phase, to
// tell which of its differences from the tuned client costs it the rate,
// a list of: "pool" sizes its pool as the tuned client's, "idle" sets
// go-redis's MinIdleConns to as many (so that the client keeps them open).
// Unset: README's quick start exactly.
//
// There is no "dial" (open the connections before the run, as the tuned
// client's are): pacer copies a client not set up for it (reserve's
// tunedClient) and talks to Redis through its copy, whose pool a dial of
// the caller's client leaves empty. The copy keeps the caller's options,
// so "pool" and "idle" reach it. Runs with "dial" (2026-12-04) measured
// the same pacer client as without it.
const waitQuickEnv = "PACERBENCH_WAITRATE_QUICK"

// quickTuning reads waitQuickEnv.
func quickTuning() (t quickTune, err error) {
	env := os.Getenv(waitQuickEnv)
	if env == "" {
		return quickTune{}, nil
	}
	for _, f := range strings.Split(env, ",") {
		switch strings.TrimSpace(f) {
		case "pool":
			t.pool = true
		case "idle":
			t.idle = true
		case "dial":
			return quickTune{}, fmt.Errorf("%s=%q: no dial: pacer talks to Redis through its own copy of the quick-start client, whose pool a dial of the caller's leaves empty; idle keeps the copy's connections open", waitQuickEnv, env)
		default:
			return quickTune{}, fmt.Errorf("%s=%q: want a list of pool and idle (\"pool,idle\")", waitQuickEnv, env)
		}
	}
	return t, nil
}

// quickTune is what waitQuickEnv changes of the quick-start client.
type quickTune struct{ pool, idle bool }

// quickLabel names the quick-start variant of the waitrate phase.
func quickLabel(t quickTune) string {
	label := "pacer, quick-start client"
	if t.pool {
		label += ", pool sized"
	}
	if t.idle {
		label += ", MinIdleConns"
	}
	return label
}

// waitRow is one row of the waitrate table.
type waitRow struct {
	Rate    float64
	Variant string
	Run     leaseRun // Admissions, Moved, Granted, CPU
	Floor   bool     // x/time/rate in one process: Run.Admissions, Seconds only
}

func (b *bench) runWaitRate(ctx context.Context, w io.Writer, progress func(string, ...any)) error {
	c := b.cfg
	steal0 := readMachineCPU()
	rates, err := phaseRates()
	if err != nil {
		return err
	}
	tune, err := quickTuning()
	if err != nil {
		return err
	}
	var rows []waitRow
	for _, r := range rates {
		for _, v := range []struct {
			name  string
			quick bool
		}{{"pacer", false}, {quickLabel(tune), true}} {
			job := leaseJob{Goroutines: leaseGoroutines, Wait: true, Rate: r, Burst: 1, QuickStart: v.quick, QuickPool: v.quick && tune.pool, QuickIdle: v.quick && tune.idle}
			run, err := b.jobFleet(ctx, job, c.Phase)
			if err != nil {
				return fmt.Errorf("waitrate %s at %.0f/s: %w", v.name, r, err)
			}
			progress("waitrate    %-26s %7.0f/s: %9.0f admissions/s (%5.1f%%), %d moved, %d granted unused, %d never granted; CPU per admission: clients %.2f µs, Redis %.2f µs, %.3f Redis calls",
				v.name, r, run.perSecond(), 100*run.perSecond()/r, run.Moved, run.Granted-run.Admissions, int64(r*run.Seconds)-run.Granted,
				float64(run.ClientCPU.Microseconds())/float64(max(run.Admissions, 1)), run.RedisCPUUse, float64(run.RedisCalls)/float64(max(run.Admissions, 1)))
			rows = append(rows, waitRow{Rate: r, Variant: v.name, Run: run})
		}
		n, secs := rateFloor(c.Procs*leaseGoroutines, rate.NewLimiter(rate.Limit(r), 1), c.Phase)
		progress("waitrate    %-26s %7.0f/s: %9.0f admissions/s (%5.1f%%)", "x/time/rate, one process", r, float64(n)/secs, 100*float64(n)/secs/r)
		rows = append(rows, waitRow{Rate: r, Variant: "x/time/rate, one process (the floor)", Floor: true, Run: leaseRun{Admissions: n, Seconds: secs}})
	}
	steal1 := readMachineCPU()
	fmt.Fprintf(w, "\n### Wait at high rates (burst 1; %d processes x %d goroutines, %v per run)\n\n", c.Procs, leaseGoroutines, c.Phase)
	fmt.Fprintln(w, "| rate /s | limiter | admissions/s | share of the rate | moved to a fresh slot | slots granted unused | slots never granted | client CPU µs per admission | Redis CPU µs per admission | Redis calls per admission |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		if r.Floor {
			fmt.Fprintf(w, "| %.0f | %s | %.0f | %.1f%% | – | – | – | – | – | – |\n", r.Rate, r.Variant, r.Run.perSecond(), 100*r.Run.perSecond()/r.Rate)
			continue
		}
		adm := float64(max(r.Run.Admissions, 1))
		fmt.Fprintf(w, "| %.0f | %s | %.0f | %.1f%% | %d | %d | %d | %.2f | %.2f | %.3f |\n", r.Rate, r.Variant, r.Run.perSecond(), 100*r.Run.perSecond()/r.Rate,
			r.Run.Moved, r.Run.Granted-r.Run.Admissions, max(int64(r.Rate*r.Run.Seconds)-r.Run.Granted, 0),
			float64(r.Run.ClientCPU.Microseconds())/adm, r.Run.RedisCPUUse, float64(r.Run.RedisCalls)/adm)
	}
	if steal0.ok && steal1.ok {
		steal := time.Duration((steal1.steal - steal0.steal) / ticksPerSecond * float64(time.Second))
		fmt.Fprintf(w, "\nSteal time over the phase (/proc/stat): %v of %v CPUs.\n", steal.Round(time.Millisecond), runtime.NumCPU())
	} else {
		fmt.Fprintln(w, "\nSteal time over the phase: unknown.")
	}
	return nil
}

// rateFloor is lim, a golang.org/x/time/rate Limiter, in this process, g
// goroutines Waiting for d: admissions and the seconds they took.
func rateFloor(g int, lim *rate.Limiter, d time.Duration) (int64, float64) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			k := int64(0)
			for lim.Wait(ctx) == nil {
				k++
			}
			n.Add(k)
		})
	}
	wg.Wait()
	return n.Load(), time.Since(start).Seconds()
}
