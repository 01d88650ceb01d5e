package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/outage"
	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The heartbeat phase: what a Limiter costs Redis when it does nothing but
// live. Each Limiter records itself in the fleet's keys every
// Options.HeartbeatInterval (1 s by default; reserve/heartbeat.go,
// lua/heartbeat.lua) and keeps a connection of its own open (its
// presence). The phase measures Redis with no Limiter for 2 x c.Phase (its
// own background work, the baseline), then with c.Heartbeats/10, 3/10 and
// all of c.Heartbeats idle Limiters in this process, each on a client of its own
// as README's quick start builds it (a process of a fleet has one), for as
// long, and prints per Limiter and second: Redis CPU above the baseline,
// the commands Redis ran and their µs, and what the fleet's keys and the
// Limiters' connections hold in Redis. Three fleet sizes show how a
// heartbeat's cost grows with the fleet. Each heartbeat's own Redis time
// (mean, p99, max) comes from SLOWLOG, and a last run has c.Procs Limiters
// report the same c.ColdKeys keys' policies from a cold start (beats.go).

// heartbeatEvery is reserve.Options.HeartbeatInterval's default.
const heartbeatEvery = outage.DefaultHeartbeatInterval

// heartbeatRun is one row of the heartbeat table.
type heartbeatRun struct {
	Limiters  int
	Seconds   float64
	RedisCPU  float64            // seconds, the baseline's share taken off
	Stats     map[string]cmdStat // commandstats but this program's commands
	Ops       map[string]int64   // the Limiters' Redis calls by operation
	ClientCPU time.Duration      // this process's, over the run
	MemGrowth int64              // used_memory's growth: the fleet's keys and the connections
	Conns     int64              // connected_clients' growth
	Fallbacks int64              // switches to local pacing: Redis too slow for a heartbeat
	Beats     beatStats          // each heartbeat's Redis time (SLOWLOG)
}

// heartbeatResults is the heartbeat phase.
type heartbeatResults struct {
	Idle    float64 // Redis CPU seconds per second with no Limiter
	Runs    []heartbeatRun
	Reports *reportsRun // Limiters reporting the same keys (beats.go)
	Format  int         // the state format the fleet writes (-format)
}

// runHeartbeat runs the heartbeat phase.
func (b *bench) runHeartbeat(ctx context.Context, progress func(string, ...any)) (*heartbeatResults, error) {
	c := b.cfg
	// At least two heartbeat intervals: a shorter window (a -phase of
	// 300 ms gave 0.6 s) may hold none of a Limiter's heartbeats, and
	// measures nothing.
	d := max(2*c.Phase, 2*heartbeatEvery)
	if err := b.flush(ctx); err != nil {
		return nil, err
	}
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return nil, err
	}
	time.Sleep(d)
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return nil, err
	}
	res := &heartbeatResults{Idle: u.CPU / d.Seconds(), Format: c.Format}
	for _, n := range []int{c.Heartbeats / 10, 3 * c.Heartbeats / 10, c.Heartbeats} {
		r, err := b.heartbeatRun(ctx, n, d, res.Idle)
		if err != nil {
			return nil, err
		}
		progress("heartbeat   %5d idle Limiters: Redis CPU %.2f µs per Limiter per second above idle, %.2f commands", n,
			r.RedisCPU*1e6/float64(n)/r.Seconds, float64(r.calls())/float64(n)/r.Seconds)
		res.Runs = append(res.Runs, r)
	}
	if res.Reports, err = b.reportsRun(ctx); err != nil {
		return nil, err
	}
	st := res.Reports.Beats
	progress("heartbeat   reports, %d Limiters on %d keys: %d calls (%d report calls), Redis µs per call mean %.0f, p99 %.0f, max %.0f, %d over 1 ms",
		res.Reports.Limiters, res.Reports.Keys, st.Calls, st.ReportCalls, us(st.Mean), us(st.P99), us(st.Max), st.Over1ms)
	return res, nil
}

// calls is every command Redis ran in r, a script's own included.
func (r heartbeatRun) calls() int64 {
	var n int64
	for _, st := range r.Stats {
		n += st.Calls
	}
	return n
}

// heartbeatRun opens n Limiters, lets them settle for a heartbeat, and
// measures them idle for d.
func (b *bench) heartbeatRun(ctx context.Context, n int, d time.Duration, idle float64) (heartbeatRun, error) {
	if err := b.flush(ctx); err != nil {
		return heartbeatRun{}, err
	}
	mem0, err := usedMemory(ctx, b.admin)
	if err != nil {
		return heartbeatRun{}, err
	}
	conns0, err := connectedClients(ctx, b.admin)
	if err != nil {
		return heartbeatRun{}, err
	}
	u, err := redis.ParseURL(b.url)
	if err != nil {
		return heartbeatRun{}, err
	}
	m := &coldMetrics{pacerCounts: &pacerCounts{}, ops: map[string]int64{}}
	lims := make([]*reserve.Limiter, n)
	rdbs := make([]*redis.Client, n)
	defer closeLimiters(lims, rdbs)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rdbs[i] = redis.NewClient(&redis.Options{Addr: u.Addr, DB: u.DB})
			// Not RequireRedis: on a busy machine a large fleet's first
			// heartbeats may take longer than CallTimeout; the row then
			// counts the switches to local pacing instead of failing.
			lims[i], errs[i] = reserve.New(rdbs[i], reserve.Options{Logger: b.log, Metrics: m})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return heartbeatRun{}, fmt.Errorf("heartbeat: opening %d Limiters: %w", n, err)
	}
	time.Sleep(heartbeatEvery)
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return heartbeatRun{}, err
	}
	const logLen = 1_000_000
	restore, err := slowlogAll(ctx, b.admin, logLen)
	if err != nil {
		return heartbeatRun{}, err
	}
	defer restore()
	m.take()
	cpu0 := cpuTime()
	time.Sleep(d)
	cpu := cpuTime() - cpu0
	ops := m.take()
	end, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return heartbeatRun{}, err
	}
	beats, err := heartbeatCalls(ctx, b.url, logLen)
	if err != nil {
		return heartbeatRun{}, err
	}
	mem1, err := usedMemory(ctx, b.admin)
	if err != nil {
		return heartbeatRun{}, err
	}
	conns1, err := connectedClients(ctx, b.admin)
	if err != nil {
		return heartbeatRun{}, err
	}
	r := heartbeatRun{Limiters: n, Seconds: d.Seconds(), RedisCPU: end.CPU - idle*d.Seconds(), Ops: ops,
		ClientCPU: cpu, MemGrowth: mem1 - mem0, Conns: conns1 - conns0, Stats: maps.Clone(end.Stats), Beats: beats}
	maps.DeleteFunc(r.Stats, func(name string, _ cmdStat) bool { return benchCommands[name] })
	r.Fallbacks = m.fallbacks.Load()
	return r, nil
}

// connectedClients returns INFO clients' connected_clients.
func connectedClients(ctx context.Context, admin *redis.Client) (int64, error) {
	info, err := admin.Info(ctx, "clients").Result()
	if err != nil {
		return 0, fmt.Errorf("pacerbench: INFO clients: %w", err)
	}
	return strconv.ParseInt(redisproc.InfoField(info, "connected_clients"), 10, 64)
}

// table returns the heartbeat phase's table, in Markdown.
func (hr *heartbeatResults) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Idle Limiters: the heartbeat's cost (each Limiter on a client of its own, heartbeat every %v)\n\n", heartbeatEvery)
	if hr.Format == 3 {
		b.WriteString("The fleet is switched to format 3 (`pacer format 3`, pacerbench's `-format 3`) before its Limiters start: they keep the heartbeat's indexes (docs/protocol.md, Heartbeat). ")
	} else {
		fmt.Fprintf(&b, "The fleet writes format %d (pacerbench's `-format %d`): its members keep no indexes, and every heartbeat reads every member. ", hr.Format, hr.Format)
	}
	fmt.Fprintf(&b, "Redis with no Limiter (its own background work): %.0f µs of CPU per second, taken off the rows below. "+
		"Per Limiter and second of an idle fleet of the row's size:\n\n", hr.Idle*1e6)
	b.WriteString("| Limiters | Redis CPU µs | commands Redis ran (a script's own included) | Redis µs (commandstats, EVALSHA and the rest sent) | Limiter's Redis calls, by operation | client CPU µs | Redis bytes per Limiter (its connections included) | connections per Limiter | fallbacks |\n")
	b.WriteString("|---:|---:|---:|---:|---|---:|---:|---:|---:|\n")
	for _, r := range hr.Runs {
		per := float64(r.Limiters) * r.Seconds
		var usec float64
		for name, st := range r.Stats {
			if outer[name] || name == "client" { // CLIENT: presence checks, never inside a script
				usec += float64(st.Usec)
			}
		}
		var ops []string
		for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
			ops = append(ops, fmt.Sprintf("%s %.3f", op, float64(r.Ops[op])/per))
		}
		fmt.Fprintf(&b, "| %d | %.2f | %.2f | %.2f | %s | %.2f | %.0f | %.2f | %d |\n", r.Limiters, r.RedisCPU*1e6/per, float64(r.calls())/per,
			usec/per, strings.Join(ops, ", "), float64(r.ClientCPU.Microseconds())/per,
			float64(r.MemGrowth)/float64(r.Limiters), float64(r.Conns)/float64(r.Limiters), r.Fallbacks)
	}
	b.WriteString("\nEach heartbeat EVALSHA's Redis time, from SLOWLOG (slower-than 0, the command's own execution):\n\n")
	b.WriteString("| Limiters | heartbeats | mean µs | p50 µs | p99 µs | max µs | over 1 ms |\n|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range hr.Runs {
		st := r.Beats
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.0f | %.0f | %.0f | %d |\n", r.Limiters, st.Calls, us(st.Mean), us(st.P50), us(st.P99), us(st.Max), st.Over1ms)
	}
	b.WriteString("\nCommands Redis ran per Limiter and second, by name (the largest run):\n\n")
	last := hr.Runs[len(hr.Runs)-1]
	per := float64(last.Limiters) * last.Seconds
	b.WriteString("| command | calls | µs per call |\n|---|---:|---:|\n")
	for _, name := range slices.Sorted(maps.Keys(last.Stats)) {
		if st := last.Stats[name]; st.Calls > 0 {
			fmt.Fprintf(&b, "| %s | %.3f | %.2f |\n", name, float64(st.Calls)/per, float64(st.Usec)/float64(st.Calls))
		}
	}
	if hr.Reports != nil {
		b.WriteString(hr.Reports.table())
	}
	return b.String()
}

// closeLimiters closes the Limiters opened so far and their clients (nil
// entries were not opened).
func closeLimiters(lims []*reserve.Limiter, rdbs []*redis.Client) {
	for i := range lims {
		if lims[i] != nil {
			lims[i].Close()
		}
		if rdbs[i] != nil {
			rdbs[i].Close()
		}
	}
}
