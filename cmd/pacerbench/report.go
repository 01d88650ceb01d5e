package main

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// table is one Markdown table.
type table struct {
	title  string
	intro  string
	header []string
	rows   [][]string
	notes  []string
}

func (t table) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", t.title)
	if t.intro != "" {
		fmt.Fprintf(&b, "%s\n\n", t.intro)
	}
	fmt.Fprintf(&b, "| %s |\n|", strings.Join(t.header, " | "))
	for i := range t.header {
		if i == 0 {
			b.WriteString("---|")
		} else {
			b.WriteString("--:|")
		}
	}
	b.WriteString("\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s |\n", strings.Join(r, " | "))
	}
	for _, n := range t.notes {
		fmt.Fprintf(&b, "\n%s\n", n)
	}
	b.WriteString("\n")
	return b.String()
}

// tables renders every measurement.
func (r *results) tables() string {
	c := r.Config
	var ts []table
	for _, g := range c.Hot {
		t := table{
			title: fmt.Sprintf("Hot key, %d goroutines", g),
			intro: fmt.Sprintf("%d goroutines in one process call `take` on one key as fast as they can for %v, limit %s/s burst %s (nobody waits).",
				g, c.Phase, thousands(hotLimit.Rate), thousands(float64(hotLimit.Burst))),
			header: append([]string{"limiter", "reservations/s", "refused"}, redisHeader...),
		}
		for _, x := range r.Throughput {
			if x.Goroutines != g {
				continue
			}
			t.rows = append(t.rows, append([]string{x.Variant, thousands(x.PerSecond()), strconv.FormatInt(x.Refused, 10)}, r.redisCells(x.Variant, x.Redis)...))
			t.notes = append(t.notes, fallbackNote(x.Variant, x.Fallbacks)...)
		}
		ts = append(ts, t)
	}
	lat := table{
		title: "Lone caller",
		intro: fmt.Sprintf("One goroutine calls `take` on one key, one call after another, for %v per limiter, same limit: the time of one call. "+
			"Each limiter's %v is cut into %d parts and the limiters take turns, so that a disturbance falls on every row.", c.Phase, c.Phase, latencyRounds),
		header: []string{"limiter", "calls", "p50", "p99", "max"},
	}
	for _, x := range r.Latency {
		lat.rows = append(lat.rows, []string{x.Variant, thousands(float64(x.Calls)), dur(x.P50), dur(x.P99), dur(x.Max)})
		lat.notes = append(lat.notes, fallbackNote(x.Variant, x.Fallbacks)...)
	}
	ts = append(ts, lat)

	allow100 := float64(c.FleetBurst) + c.FleetRate*0.1
	allow1s := float64(c.FleetBurst) + c.FleetRate
	seen := table{
		title: "Fleet: what the provider sees",
		intro: fmt.Sprintf("%d processes x %d goroutines share one key at %s/s, burst %d, for %v; each goroutine loops {wait; record the time}. "+
			"The limit allows at most %s calls in any 100 ms and %s in any 1 s (burst + rate x T). "+
			"429s (leaky bucket): the calls a leaky-bucket provider at the same rate would refuse "+
			"(a millisecond clock, one call of tolerance, as nginx's limit_req; internal/provider.Leaky), "+
			"judged on the fleet's call times. The floor runs the same %d goroutines in one process on one in-process limiter: "+
			"what this machine's scheduling costs with nothing to coordinate. A fleet that draws no more 429s than the floor adds no bunching of its own.",
			c.Procs, c.Goroutines, thousands(c.FleetRate), c.FleetBurst, c.Fleet, trim(allow100), trim(allow1s), c.Procs*c.Goroutines),
		header: []string{"limiter", "calls", "mean rate /s", "busiest 100 ms", "busiest 1 s", "gap p1", "gap p50", "gap p99", "429s (leaky bucket)"},
	}
	cost := table{
		title:  "Fleet: what it costs",
		intro:  "Same run. Wait is from asking to permission; Redis figures are per call made, retries included; client CPU is the fleet processes' user + system time over the run, per call.",
		header: append(append([]string{"limiter", "wait p50", "wait p99", "wait max"}, redisHeader...), "client CPU µs / call"),
	}
	for _, x := range r.Fleet {
		seen.rows = append(seen.rows, x.seenRow())
		cost.rows = append(cost.rows, append(append([]string{x.Variant, dur(x.WaitP50), dur(x.WaitP99), dur(x.WaitMax)},
			r.redisCells(x.Variant, x.Redis)...), fmt.Sprintf("%.1f", x.ClientCPUUsec)))
		cost.notes = append(cost.notes, fallbackNote(x.Variant, x.Fallbacks)...)
	}
	ts = append(ts, seen, cost)

	if len(r.BusyFleet) > 0 {
		busy := table{
			title: "Fleet on a busy machine",
			intro: fmt.Sprintf("The same fleet, again, with %d CPU hogs beside it (this program re-run, each keeping a CPU busy; the machine has %d), for pacer and for x/time/rate in process: "+
				"a loaded machine delays every wake-up, and the reference shows by how much with nothing to coordinate. "+
				"At rate/procs per process, x/time/rate is what %d uncoordinated processes would do.", c.BusyHogs, runtime.NumCPU(), c.Procs),
			header: seen.header,
		}
		for _, x := range r.BusyFleet {
			busy.rows = append(busy.rows, x.seenRow())
			busy.notes = append(busy.notes, fallbackNote(x.Variant, x.Fallbacks)...)
		}
		ts = append(ts, busy)
	}

	if len(r.Memory) > 0 {
		mem := table{
			title: "Memory per idle key",
			intro: fmt.Sprintf("%s distinct keys, one call each, limit %s/s burst 1. MEMORY USAGE is of one key (the last written); growth is INFO used_memory's, per key. "+
				"pacer's key should expire 1/rate + 2 s after its first write (DESIGN.md: once the bucket would be full again, plus a margin; lua/core.lua sets 2 s, and a later write moves it only when less than 1 s would be left).",
				thousands(float64(c.MemKeys)), trim(c.MemRate)),
			header: []string{"limiter", "keys stored", "MEMORY USAGE (B)", "used_memory growth / key (B)", "PTTL right after (ms)", "TTL by design (ms)", "expiry"},
		}
		for _, x := range r.Memory {
			design, expiry := "–", "not measured"
			if x.ExpiryChecked {
				design = strconv.FormatInt(x.DesignTTL.Milliseconds(), 10)
				if x.Left == 0 {
					expiry = fmt.Sprintf("all gone %.1f s after the last write", x.GoneAfter.Seconds())
				} else {
					expiry = fmt.Sprintf("%d left %.1f s after the last write", x.Left, x.GoneAfter.Seconds())
				}
			}
			mem.rows = append(mem.rows, []string{x.Variant, thousands(float64(x.Stored)), strconv.FormatInt(x.SampleBytes, 10),
				fmt.Sprintf("%.0f", x.PerKeyBytes), strconv.FormatInt(x.PTTL.Milliseconds(), 10), design, expiry})
		}
		ts = append(ts, mem)
	}
	if len(r.Eviction) > 0 {
		x0 := r.Eviction[0]
		lim := x0.Limit
		ev := table{
			title: "Redis out of memory",
			intro: fmt.Sprintf("%d goroutines in one process loop {wait; record the time} on one key at %s/s, burst %d, for %v (pacer's default Options). "+
				"Halfway, Redis runs out of memory: maxmemory is set 2 MB above what it uses, and keys without a TTL are written until pacer's bucket is evicted "+
				"or a write is refused (OOM); under noeviction, maxmemory then goes down to 1 byte for %v, so that every write is refused. Then maxmemory is lifted. "+
				"Every key pacer writes has a TTL, so volatile-lru evicts pacer's keys first: an evicted bucket comes back full, and the slots it had queued are forgotten. "+
				"noeviction is the setting docs/security.md asks for: Redis refuses the scripts' writes; pacer waits a spell shorter than its blip budget (one CallTimeout) out, and paces locally through a longer one, until Redis has room. "+
				"The limit allows at most %s calls in any 100 ms and %s in any 1 s.",
				x0.Goroutines, trim(lim.Rate), lim.Burst, x0.Run, x0.Run/6, trim(float64(lim.Burst)+lim.Rate*0.1), trim(float64(lim.Burst)+lim.Rate)),
			header: []string{"maxmemory-policy", "New warned", "keys evicted", "writes refused", "switches to local", "local reservations", "errors",
				"busiest 100 ms", "busiest 1 s", "busiest 1 s before", "calls in the 1 s after"},
		}
		for _, x := range r.Eviction {
			warned := "no"
			if x.Warned != "" {
				warned = "yes"
			}
			ev.rows = append(ev.rows, []string{x.Policy, warned, strconv.FormatInt(x.Evicted, 10), strconv.FormatInt(x.Refused, 10),
				strconv.FormatInt(x.Fallbacks, 10), strconv.FormatInt(x.Local, 10), strconv.FormatInt(x.Errors, 10),
				strconv.Itoa(x.Busiest100ms), strconv.Itoa(x.Busiest1s), strconv.Itoa(x.Before1s), strconv.Itoa(x.After1s)})
		}
		ts = append(ts, ev)
	}
	var b strings.Builder
	for _, t := range ts {
		if len(t.rows) == 0 {
			continue // a phase this run did not run (-phases)
		}
		b.WriteString(t.markdown())
	}
	return b.String()
}

// redisKept reports whether the variant named name keeps state in Redis,
// and whether its clients' round trips and commands were counted.
func (r *results) redisKept(name string) (kept, counted bool) {
	for _, v := range r.Variants {
		if v.Name == name {
			return v.Redis, !v.Uncounted
		}
	}
	return false, false
}

// redisHeader heads the columns of redisCells.
var redisHeader = []string{"round trips / call", "commands / call", "Redis µs / call", "Redis CPU µs / call"}

// redisCells are the Redis figures of the limiter named name: "–" where it
// keeps no state in Redis, or where its client's round trips and commands
// were not counted (variant.Uncounted).
func (r *results) redisCells(name string, p perCall) []string {
	kept, counted := r.redisKept(name)
	if !kept {
		return []string{"–", "–", "–", "–"}
	}
	trips, cmds := "–", "–"
	if counted {
		trips, cmds = fmt.Sprintf("%.2f", p.Trips), fmt.Sprintf("%.2f", p.Commands)
	}
	return []string{trips, cmds, fmt.Sprintf("%.1f", p.Usec), fmt.Sprintf("%.1f", p.CPUUsec)}
}

func fallbackNote(name string, n int64) []string {
	if n == 0 {
		return nil
	}
	return []string{fmt.Sprintf("**%s switched to local pacing %d times in this phase** (a Redis call took longer than reserve.Options.CallTimeout): its figures do not measure Redis alone.", name, n)}
}

// document is BENCHMARKS.md: how the run was made, the limiters, the
// tables, and how to read them.
func (r *results) document(tables string) string {
	c, e := r.Config, r.Env
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Written by `cmd/pacerbench`; every figure below comes from the run described here. Rerun the command to measure your machine.\n\n")
	b.WriteString("What the figures mean for a deployment's Redis (cores, memory, Cluster shards): [docs/sizing.md](docs/sizing.md).\n\n")
	fmt.Fprintf(&b, "```\n%s\n```\n\n", e.Command)
	fmt.Fprintf(&b, "- date: %s\n", e.Date.Format(time.RFC3339))
	cpu := fmt.Sprintf("%d CPUs", e.CPUs)
	if e.CPUModel != "" {
		cpu += " (" + e.CPUModel + ")"
	}
	fmt.Fprintf(&b, "- machine: %s, GOMAXPROCS %d, %s\n", cpu, e.GOMAXPROCS, e.Go)
	idle := "unknown"
	if e.IdleBefore >= 0 {
		idle = fmt.Sprintf("%.0f%%", 100*e.IdleBefore)
	}
	others := "unknown"
	if e.Others >= 0 && e.Elapsed > 0 {
		others = fmt.Sprintf("%.1f CPU-seconds (%.1f%% of the machine's %d CPUs over the run's %.0f s)",
			e.Others.Seconds(), 100*e.Others.Seconds()/(e.Elapsed.Seconds()*float64(e.CPUs)), e.CPUs, e.Elapsed.Seconds())
	}
	steal := "unknown"
	if e.Steal >= 0 {
		steal = fmt.Sprintf("%.1f CPU-seconds", e.Steal.Seconds())
	}
	fmt.Fprintf(&b, "- other work on the machine: CPUs %s idle over the second before the run; during it, other processes used %s "+
		"(/proc/stat user + system time, less this run's processes and its redis-server), and the hypervisor took %s for other guests "+
		"(/proc/stat steal); load average (1, 5, 15 min) %s before, %s after (this run's own processes included)\n",
		idle, others, steal, e.LoadStart, e.LoadEnd)
	fmt.Fprintf(&b, "- Redis %s: %s, on the same machine as the clients\n", e.Redis, e.RedisSource)
	if e.Commit != "" {
		fmt.Fprintf(&b, "- pacer commit: %s\n", e.Commit)
	}
	if c.Quick {
		b.WriteString("- **a smoke run (-quick)**: short phases, figures only roughly right\n")
	}
	b.WriteString("\n## The limiters\n\n")
	b.WriteString("Each runs alone against the same Redis (flushed before each), with one go-redis client per process " +
		"(`ContextTimeoutEnabled: true`, `MaxRetries: -1`, a connection per goroutine). `take` is one request for a permit without sleeping " +
		"(the hot-key and lone-caller rows); `wait` is the loop a user writes (the fleet rows).\n\n")
	b.WriteString("| limiter | take | wait |\n|---|---|---|\n")
	for _, v := range r.Variants {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", v.Name, v.Take, v.Wait)
	}
	allow100 := float64(c.FleetBurst) + c.FleetRate*0.1
	allow1s := float64(c.FleetBurst) + c.FleetRate
	w, n := windowOf(limit{Rate: c.FleetRate, Burst: c.FleetBurst})
	fmt.Fprintf(&b, "\nIn the fleet, redis_rate gets `Limit{Rate: %d, Period: %v, Burst: %d}`; the fixed window is %v long and admits %d calls; "+
		"x/time/rate, rate/procs gets %s/s, burst %d in each of the %d processes.\n\n",
		gcraLimit(limit{Rate: c.FleetRate, Burst: c.FleetBurst}).Rate, gcraLimit(limit{Rate: c.FleetRate, Burst: c.FleetBurst}).Period, c.FleetBurst,
		w, n, trim(c.FleetRate/float64(c.Procs)), max(c.FleetBurst/c.Procs, 1), c.Procs)
	b.WriteString("## How to read this\n\n")
	b.WriteString("pacer's rows differ only in their Options. By default, concurrent callers on one key in one process share script calls " +
		"(coalescing: while a call for the key is in flight, new callers queue, and the next call reserves for all of them); " +
		"`DisableCoalescing` makes every reservation a script call of its own. Either way, on one Redis server the script calls a process " +
		"makes while one of its calls is in flight go together as one pipeline (`DisablePipelining` turns that off). By default `Wait` hands over from Go's timer to a precise " +
		"sleep just before the slot (`PreciseWake`); `PreciseWake: -1` keeps Go's timer only, which wakes up to about a millisecond late " +
		"for less CPU: the fleet's gaps and client CPU show the trade.\n\n")
	fmt.Fprintf(&b, "The hot-key and lone-caller tables measure the machinery alone: the limit is so high that nobody waits, so a row says how many "+
		"permits one Redis (or, for x/time/rate, one process) can hand out, and what each costs. Round trips and commands are counted on the "+
		"clients (a go-redis hook; connection handshakes left out): more than one per call means retries, or a transaction's MULTI and EXEC; "+
		"the quick-start row's are not counted (\"–\"), because pacer talks to Redis through a client of its own, made from the quick-start one with the settings it needs. "+
		"Redis µs is the time Redis spent running those commands (INFO commandstats: all of EVALSHA and EXEC, which include the commands they run, "+
		"and not those commands again; this program's own INFO and CONFIG calls left out); Redis CPU is the whole server's CPU time over the "+
		"phase (INFO cpu), network work included. The clients and Redis share the machine's %d CPUs, so a client that burns CPU slows Redis too.\n\n",
		e.CPUs)
	fmt.Fprintf(&b, "The fleet tables are the workload pacer is for: what a provider allowing %s/s would see. A limiter that coordinates the fleet keeps the "+
		"mean rate at %s/s, the busiest 100 ms at or near %s calls and the busiest 1 s at or near %s; the gaps show whether calls come evenly "+
		"(p50 near %s) or in bursts (p1 near 0). Calls land a little after their slots (timers, scheduling), which can put a call or two more in a "+
		"window than the slots have. Wait is what callers pay: a limiter that serves callers in order gives each about the same wait, one where callers race "+
		"for permits gives some of them much longer ones. Figures move from run to run, more so on a busy machine (see \"other work\" above): "+
		"compare the rows of one run.\n\n",
		thousands(c.FleetRate), thousands(c.FleetRate), trim(allow100), trim(allow1s), dur(time.Duration(float64(time.Second)/c.FleetRate)))
	b.WriteString("## Results\n\n")
	b.WriteString(tables)
	return b.String()
}

// dur formats d for a table: µs below 1 ms, ms below 1 s, else s.
func dur(d time.Duration) string {
	switch {
	case d < 10*time.Microsecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
}

// thousands formats x rounded to an integer, with commas.
func thousands(x float64) string {
	s := strconv.FormatInt(int64(math.Round(x)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// trim formats x with no trailing zeros.
func trim(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }

// seenRow is x's row in the tables of what the provider sees.
func (x fleet) seenRow() []string {
	return []string{x.Variant, thousands(float64(x.Calls)), fmt.Sprintf("%.1f", x.Rate),
		strconv.Itoa(x.Busiest100ms), strconv.Itoa(x.Busiest1s), dur(x.GapP1), dur(x.GapP50), dur(x.GapP99),
		fmt.Sprintf("%d (%.2f%%)", x.LeakyRejected, 100*float64(x.LeakyRejected)/max(float64(x.Calls), 1))}
}
