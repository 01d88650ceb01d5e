package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
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
// time, and waitTurnsEnv measures each rate's two clients more than once,
// in turns.

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

// waitTurnsEnv is how many times the waitrate phase measures each rate's
// two clients (default 1), in the order tuned, quick-start, quick-start,
// tuned, and so on, so that neither always runs first (the machine's slow
// spells and what one run leaves in Redis fall on both alike); the phase
// then adds, per rate, the tuned client's share of the rate less the
// quick-start client's in each turn, and their median.
const waitTurnsEnv = "PACERBENCH_WAITRATE_TURNS"

// maxWaitTurns bounds waitTurnsEnv: a turn at both default rates takes
// about 25 s (four runs of 5 s, and their start).
const maxWaitTurns = 50

// waitTurns reads waitTurnsEnv.
func waitTurns() (int, error) {
	env := os.Getenv(waitTurnsEnv)
	if env == "" {
		return 1, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(env))
	if err != nil || n < 1 || n > maxWaitTurns {
		return 0, fmt.Errorf("%s=%q: want a whole number of turns from 1 to %d", waitTurnsEnv, env, maxWaitTurns)
	}
	return n, nil
}

// quickFirst reports whether turn t (from 0) of the waitrate phase runs
// the quick-start client first: every other turn, so that the runs go
// tuned, quick; quick, tuned; tuned, quick; ... and over an even number of
// turns each client runs first as often.
func quickFirst(t int) bool { return t%2 == 1 }

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
	Turn    int      // from 1; 0 with one turn
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
	turns, err := waitTurns()
	if err != nil {
		return err
	}
	type variant struct {
		name  string
		quick bool
	}
	tuned, quick := variant{"pacer", false}, variant{quickLabel(tune), true}
	var rows []waitRow
	for _, r := range rates {
		for t := range turns {
			order := []variant{tuned, quick}
			if quickFirst(t) {
				order = []variant{quick, tuned}
			}
			for _, v := range order {
				job := leaseJob{Goroutines: leaseGoroutines, Wait: true, Rate: r, Burst: 1, QuickStart: v.quick, QuickPool: v.quick && tune.pool, QuickIdle: v.quick && tune.idle}
				run, err := b.jobFleet(ctx, job, c.Phase)
				if err != nil {
					return fmt.Errorf("waitrate %s at %.0f/s: %w", v.name, r, err)
				}
				row := waitRow{Rate: r, Variant: v.name, Run: run}
				name := v.name
				if turns > 1 {
					row.Turn = t + 1
					name = fmt.Sprintf("%s, turn %d", v.name, t+1)
				}
				progress("waitrate    %-26s %7.0f/s: %9.0f admissions/s (%5.1f%%), %d moved, %d granted unused, %d never granted; CPU per admission: clients %.2f µs, Redis %.2f µs, %.3f Redis calls",
					name, r, run.perSecond(), 100*run.perSecond()/r, run.Moved, run.Granted-run.Admissions, int64(r*run.Seconds)-run.Granted,
					float64(run.ClientCPU.Microseconds())/float64(max(run.Admissions, 1)), run.RedisCPUUse, float64(run.RedisCalls)/float64(max(run.Admissions, 1)))
				rows = append(rows, row)
			}
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
		name := r.Variant
		if r.Turn > 0 {
			name = fmt.Sprintf("%s, turn %d", r.Variant, r.Turn)
		}
		if r.Floor {
			fmt.Fprintf(w, "| %.0f | %s | %.0f | %.1f%% | – | – | – | – | – | – |\n", r.Rate, name, r.Run.perSecond(), 100*r.Run.perSecond()/r.Rate)
			continue
		}
		adm := float64(max(r.Run.Admissions, 1))
		fmt.Fprintf(w, "| %.0f | %s | %.0f | %.1f%% | %d | %d | %d | %.2f | %.2f | %.3f |\n", r.Rate, name, r.Run.perSecond(), 100*r.Run.perSecond()/r.Rate,
			r.Run.Moved, r.Run.Granted-r.Run.Admissions, max(int64(r.Rate*r.Run.Seconds)-r.Run.Granted, 0),
			float64(r.Run.ClientCPU.Microseconds())/adm, r.Run.RedisCPUUse, float64(r.Run.RedisCalls)/adm)
	}
	if turns > 1 {
		fmt.Fprintln(w)
		for _, line := range turnGaps(rows, tuned.name, quick.name) {
			fmt.Fprintln(w, line)
		}
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

// turnGaps says, for each rate of rows with turns, the tuned client's
// share of the rate less the quick-start client's (named tuned and quick)
// in each turn, in points, and their median.
func turnGaps(rows []waitRow, tuned, quick string) []string {
	type pair struct{ tuned, quick float64 }
	var rates []float64
	byRate := map[float64]map[int]*pair{}
	for _, r := range rows {
		if r.Floor || r.Turn == 0 {
			continue
		}
		turns := byRate[r.Rate]
		if turns == nil {
			turns = map[int]*pair{}
			byRate[r.Rate] = turns
			rates = append(rates, r.Rate)
		}
		p := turns[r.Turn]
		if p == nil {
			p = &pair{math.NaN(), math.NaN()}
			turns[r.Turn] = p
		}
		share := 100 * r.Run.perSecond() / r.Rate
		switch r.Variant {
		case tuned:
			p.tuned = share
		case quick:
			p.quick = share
		}
	}
	var out []string
	for _, rate := range rates {
		turns := byRate[rate]
		var gaps []float64
		var words []string
		for t := 1; t <= len(turns); t++ {
			p := turns[t]
			if p == nil || math.IsNaN(p.tuned) || math.IsNaN(p.quick) {
				continue
			}
			gaps = append(gaps, p.tuned-p.quick)
			words = append(words, fmt.Sprintf("%.1f", p.tuned-p.quick))
		}
		if len(gaps) == 0 {
			continue
		}
		ahead := 0
		for _, g := range gaps {
			if g > 0 {
				ahead++
			}
		}
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		median := sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
		}
		out = append(out, fmt.Sprintf("At %.0f/s, the tuned client's share of the rate less the quick-start client's, by turn (the quick-start client first in turns 2, 4, ...): %s points; median %.1f; tuned ahead in %d of %d.",
			rate, strings.Join(words, ", "), median, ahead, len(gaps)))
	}
	return out
}
