package main

// Fair share across processes and through a Redis outage (issue 23's
// "across processes" goal): procs real processes, each on the README's
// quick-start client, share one key; in each, one goroutine calls for a
// light tenant (a pause after each call: it asks for far less than its
// share) and the others flood it for another tenant. Redis is stopped in
// the middle of the run and restarted empty. Measured per phase (before,
// during, after the outage): the rate the key gave, the light tenant's
// calls and its wait for each (from the call to WaitN's return), fair
// against the same calls without tenants (first come, first served).

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
)

// fairProcsRun is one run: fair or FIFO.
type fairProcsRun struct {
	Fair   bool
	Phases []fairProcsPhase // before, during and after the outage
	// Busiest is the most calls returned in any 1 s of the run.
	Busiest int
	Errors  int
	ErrText []string
}

// fairProcsPhase is one phase of a run.
type fairProcsPhase struct {
	Name      string
	Length    time.Duration   // how long the phase lasted (a slow restart shortens "after")
	Rate      float64         // calls per second, every tenant
	Light     []time.Duration // the light tenant's waits, sorted
	LightRate float64         // its calls per second
}

// fairProcsConfig sizes the measurement.
type fairProcsConfig struct {
	Procs, Flooders int
	Rate            float64
	Think           time.Duration
	Normal, Fault   time.Duration // before, and during the outage (after: Normal)
}

func fairProcsCfg(quick bool) fairProcsConfig {
	if quick {
		// The outage outlasts the longest wait for a first local slot
		// (TestQuick judges it only then).
		return fairProcsConfig{Procs: 2, Flooders: 4, Rate: 100, Think: 200 * time.Millisecond, Normal: 1500 * time.Millisecond, Fault: 7 * time.Second}
	}
	return fairProcsConfig{Procs: 4, Flooders: 8, Rate: 100, Think: 200 * time.Millisecond, Normal: 5 * time.Second, Fault: 5 * time.Second}
}

// runFairProcs runs c once, fair or not, on a redis-server of its own.
func runFairProcs(ctx context.Context, c fairProcsConfig, fair bool) (fairProcsRun, error) {
	srv, err := redisproc.Start(redisproc.Spec{})
	if err != nil {
		return fairProcsRun{}, fmt.Errorf("fair, processes: %w", err)
	}
	defer srv.Close()
	job := seamsJob{RedisURL: srv.URL(), KeyPrefix: "fair-procs:", Key: "api", Call: callTenants, Rate: c.Rate, Burst: 1,
		Goroutines: 1 + c.Flooders, Fair: fair, Think: c.Think}
	f, err := startSeamsFleet(ctx, job, c.Procs)
	if err != nil {
		return fairProcsRun{}, fmt.Errorf("fair, processes: %w", err)
	}
	defer f.kill()
	start := time.Now().Add(50 * time.Millisecond)
	end := start.Add(2*c.Normal + c.Fault)
	f.begin(start, end)

	time.Sleep(time.Until(start.Add(c.Normal)))
	faultAt := time.Now()
	srv.Stop()
	time.Sleep(time.Until(start.Add(c.Normal + c.Fault)))
	err = srv.Restart()
	healAt := time.Now()
	time.Sleep(time.Until(end))
	o, ferr := f.finish()
	if err != nil || ferr != nil {
		return fairProcsRun{}, fmt.Errorf("fair, processes: %w", errors.Join(err, ferr))
	}

	r := fairProcsRun{Fair: fair, Errors: o.Errors, ErrText: o.ErrorText}
	var all []int64
	for _, ph := range []struct {
		name     string
		from, to time.Time
	}{{"before", start, faultAt}, {"Redis down", faultAt, healAt}, {"after", healAt, end}} {
		p := fairProcsPhase{Name: ph.name, Length: ph.to.Sub(ph.from)}
		n, light := 0, 0
		for _, call := range o.Calls {
			if call.At < ph.from.UnixNano() || call.At >= ph.to.UnixNano() {
				continue
			}
			n++
			if call.Tenant == "light" {
				light++
				p.Light = append(p.Light, time.Duration(call.At-call.Granted))
			}
		}
		secs := ph.to.Sub(ph.from).Seconds()
		p.Rate, p.LightRate = float64(n)/secs, float64(light)/secs
		slices.Sort(p.Light)
		r.Phases = append(r.Phases, p)
	}
	for _, call := range o.Calls {
		if call.At >= start.UnixNano() && call.At < end.UnixNano() {
			all = append(all, call.At)
		}
	}
	slices.Sort(all)
	r.Busiest = busiest(all, time.Second)
	return r, nil
}

// fairProcsRows are the table's rows for runs.
func fairProcsRows(runs []fairProcsRun) [][]string {
	var rows [][]string
	for _, r := range runs {
		mode := "FIFO"
		if r.Fair {
			mode = "fair"
		}
		for _, p := range r.Phases {
			waits := "no call"
			if len(p.Light) > 0 {
				waits = fmt.Sprintf("p50 %s, p99 %s, max %s", dur(pct(p.Light, 0.5)), dur(pct(p.Light, 0.99)), dur(p.Light[len(p.Light)-1]))
			}
			rows = append(rows, []string{mode, p.Name, fmt.Sprintf("%.1f/s", p.Rate), fmt.Sprintf("%.1f/s", p.LightRate), waits})
		}
		rows = append(rows, []string{mode, "whole run", fmt.Sprintf("busiest 1 s: %d calls", r.Busiest), "", fmt.Sprintf("%d errors", r.Errors)})
	}
	return rows
}
