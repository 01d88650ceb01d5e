package main

// The faircost phase (issue 43, "fair calls coalesced"): what a fair
// admission costs against a FIFO one on the same load. One process: 1,000
// calls at once (WaitN, one goroutine each) spread over 50 tenants on one
// key; and 4 processes, each flooding the key from 50 goroutines, one
// tenant each. Measured per admission: the script calls (EVALSHA and
// EVAL, from INFO commandstats: only clients send them); in one process
// the other commands its client sent (counted on the client: commandstats
// also counts the commands scripts run, a GET of the key's state in each
// fair or reserve call); the client's CPU (the process's rusage, for the
// processes their children's, start-up included, the same in both runs)
// and Redis's (INFO cpu).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// fairCostRun is one run's figures.
type fairCostRun struct {
	Load       string
	Fair       bool
	Admissions int64
	Took       time.Duration
	Scripts    int64            // EVALSHA and EVAL
	Others     int64            // every other command the clients sent
	ByName     map[string]int64 // the others, by name
	CPU        time.Duration    // the clients'
	RedisCPU   time.Duration    // the server's (INFO cpu)
}

type fairCostResults struct {
	Rate    float64
	Tenants int
	Runs    []fairCostRun
}

// fairCostScripts counts the script calls in INFO commandstats: EVALSHA
// and EVAL, which only clients send. (Its other counts hold the commands
// scripts ran, a GET of the key's state in each among them.)
func fairCostScripts(u usage) int64 {
	return u.Stats["evalsha"].Calls + u.Stats["eval"].Calls
}

// fairCostOthers are the commands but scripts a client sent (sent).
func fairCostOthers(s sent) (others int64, byName map[string]int64) {
	byName = map[string]int64{}
	for name, n := range s.Commands {
		if name != "evalsha" && name != "eval" {
			others += n
			byName[name] = n
		}
	}
	return others + s.Queued, byName
}

func childCPU() time.Duration { return rusage(syscall.RUSAGE_CHILDREN) }

func (b *bench) runFairCost(ctx context.Context, progress func(string, ...any)) (*fairCostResults, error) {
	const rate, tenants = 200, 50
	calls, procs, span := 1000, 4, 5*time.Second
	if b.cfg.Quick {
		calls, span = 200, time.Second
	}
	res := &fairCostResults{Rate: rate, Tenants: tenants}
	lim := reserve.Limit{Rate: rate, Burst: 1}
	for _, fair := range []bool{false, true} {
		if err := b.flush(ctx); err != nil {
			return nil, err
		}
		// The quick-start client's options, as New would set them, so
		// that New uses it and the counter sees its commands.
		u, err := redis.ParseURL(b.url)
		if err != nil {
			return nil, err
		}
		u.MaxRetries, u.ContextTimeoutEnabled, u.DialerRetries = -1, true, 1
		rdb := redis.NewClient(u)
		count := newCounter()
		rdb.AddHook(count)
		l, err := reserve.New(rdb, reserve.Options{Logger: b.log})
		if err != nil {
			rdb.Close()
			return nil, err
		}
		base, err := startUsage(ctx, b.admin)
		if err != nil {
			l.Close()
			rdb.Close()
			return nil, err
		}
		count.take()
		cpu0, start := cpuTime(), time.Now()
		var wg sync.WaitGroup
		var ok atomic.Int64
		rctx, cancel := context.WithTimeout(ctx, 3*time.Duration(calls)*time.Second/rate+5*time.Second)
		for i := range calls {
			wg.Go(func() {
				req := reserve.Single("cost", lim, 1)
				if fair {
					req.Tenant = "t" + strconv.Itoa(i%tenants)
				}
				if l.WaitN(rctx, req) == nil {
					ok.Add(1)
				}
			})
		}
		wg.Wait()
		cancel()
		run := fairCostRun{Load: fmt.Sprintf("1 process, %d calls at once", calls), Fair: fair, Admissions: ok.Load(),
			Took: time.Since(start), CPU: cpuTime() - cpu0}
		us, err := endUsage(ctx, b.admin, base)
		l.Close()
		rdb.Close()
		if err != nil {
			return nil, err
		}
		run.Scripts = fairCostScripts(us)
		run.Others, run.ByName = fairCostOthers(count.take())
		run.RedisCPU = time.Duration(us.CPU * 1e9)
		res.Runs = append(res.Runs, run)
		progress("faircost    %s (fair %v): %d admitted in %v; %s", run.Load, fair, run.Admissions, run.Took.Round(time.Millisecond), run.perAdmission())
	}
	for _, fair := range []bool{false, true} {
		run, err := fairCostProcs(ctx, procs, tenants, rate, span, fair)
		if err != nil {
			return nil, err
		}
		res.Runs = append(res.Runs, run)
		progress("faircost    %s (fair %v): %d admitted; %s", run.Load, fair, run.Admissions, run.perAdmission())
	}
	return res, nil
}

// fairCostProcs floods one key from procs processes, each from tenants
// goroutines (one tenant each when fair), for span, on a redis-server of
// its own.
func fairCostProcs(ctx context.Context, procs, tenants int, rate float64, span time.Duration, fair bool) (fairCostRun, error) {
	srv, err := redisproc.Start(redisproc.Spec{})
	if err != nil {
		return fairCostRun{}, fmt.Errorf("faircost: %w", err)
	}
	defer srv.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	cpu0 := childCPU()
	job := seamsJob{RedisURL: srv.URL(), KeyPrefix: "faircost:", Key: "api", Call: callTenants, Rate: rate, Burst: 1,
		Goroutines: tenants, Fair: fair, Tenants: tenants}
	f, err := startSeamsFleet(ctx, job, procs)
	if err != nil {
		return fairCostRun{}, fmt.Errorf("faircost: %w", err)
	}
	defer f.kill()
	base, err := startUsage(ctx, admin)
	if err != nil {
		return fairCostRun{}, err
	}
	start := time.Now().Add(50 * time.Millisecond)
	f.begin(start, start.Add(span))
	o, err := f.finish()
	if err != nil {
		return fairCostRun{}, fmt.Errorf("faircost: %w", err)
	}
	u, err := endUsage(ctx, admin, base)
	if err != nil {
		return fairCostRun{}, err
	}
	run := fairCostRun{Load: fmt.Sprintf("%d processes x %d goroutines, %v", procs, tenants, span), Fair: fair,
		Admissions: int64(len(o.Calls)), Took: span, CPU: childCPU() - cpu0}
	run.Scripts, run.Others = fairCostScripts(u), -1 // the children's commands are not counted
	run.RedisCPU = time.Duration(u.CPU * 1e9)
	return run, nil
}

func (r fairCostRun) perAdmission() string {
	n := float64(max(r.Admissions, 1))
	return fmt.Sprintf("per admission: %.3f script calls, %s other commands, %s client CPU, %s Redis CPU",
		float64(r.Scripts)/n, r.others(), dur(time.Duration(float64(r.CPU)/n)), dur(time.Duration(float64(r.RedisCPU)/n)))
}

// others is the other commands per admission, by name.
func (r fairCostRun) others() string {
	if r.Others < 0 {
		return "–"
	}
	n := float64(max(r.Admissions, 1))
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(r.ByName)) {
		parts = append(parts, fmt.Sprintf("%s %.3f", name, float64(r.ByName[name])/n))
	}
	return fmt.Sprintf("%.3f (%s)", float64(r.Others)/n, strings.Join(parts, ", "))
}

func (r *fairCostResults) tables() string {
	t := table{
		title: "What a fair admission costs",
		intro: fmt.Sprintf("One key at %s/s, burst 1; fair calls name one of %d tenants, FIFO the same calls without. "+
			"Script calls (EVALSHA, EVAL) from INFO commandstats; the other commands the client sent counted on the client "+
			"(1 process; a GET is a sleeper's check for a pause), client CPU from rusage "+
			"(the processes': start-up included), Redis CPU from INFO cpu. \"took\": until the last call returned "+
			"(1 process), the run's span (processes).", thousands(r.Rate), r.Tenants),
		header: []string{"load", "run", "admitted", "took", "script calls / adm.", "other commands / adm.", "client CPU / adm.", "Redis CPU / adm."},
	}
	for _, x := range r.Runs {
		mode := "FIFO"
		if x.Fair {
			mode = "fair"
		}
		n := float64(max(x.Admissions, 1))
		t.rows = append(t.rows, []string{x.Load, mode, strconv.FormatInt(x.Admissions, 10), dur(x.Took), fmt.Sprintf("%.3f", float64(x.Scripts)/n),
			x.others(), dur(time.Duration(float64(x.CPU) / n)), dur(time.Duration(float64(x.RedisCPU) / n))})
	}
	return t.markdown()
}
