package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// tables returns the cold phase's tables, in Markdown.
func (cr *coldResults) tables(c config) string {
	if len(cr.Runs) == 0 {
		return ""
	}
	var b strings.Builder
	allowed := float64(cr.Keys) * coldLimit.Rate
	fmt.Fprintf(&b, "\n### Many cold keys (%d keys at 1 call/s each; %d processes, a goroutine per %d keys; %v per run)\n\n",
		cr.Keys, c.Procs, coldChunk, c.ColdRun)
	fmt.Fprintf(&b, "Three shapes. `%s`: limit %g/s, burst %d; each goroutine waits on its keys in turn, over and over, so every key is called at its limit (%.0f admissions/s allowed). "+
		"`%s`: limit 2/s, burst 1; each goroutine calls each of its keys once a second on its own schedule, so no call waits. "+
		"`%s`: the same, but half the keys are called twice in a row every other second, so the second of each pair (a quarter of the calls) waits 0.5 s. "+
		"`%s` builds its client as README's quick start does (`redis.NewClient(&redis.Options{Addr: addr})`, `reserve.Options{RequireRedis: true}`); "+
		"`%s` runs on this program's tuned client (`ContextTimeoutEnabled`, `MaxRetries: -1`, a connection per goroutine); "+
		"`%s` loops Allow, and if refused sleeps RetryAfter and tries again. Redis CPU is INFO cpu over the run; "+
		"Redis µs counts the commands the clients sent (a script's own commands inside it); calls are the limiter's round trips; steal is the hypervisor's over the run.\n\n",
		coldAtLimit, coldLimit.Rate, coldLimit.Burst, allowed, coldNone, coldQuarter, coldQuickStart, coldTuned, coldGCRA)
	b.WriteString("| shape | limiter | admissions/s | Redis CPU µs per admission | Redis µs per admission (commandstats) | Redis calls per admission | client CPU µs per admission | fallbacks | steal |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range cr.Runs {
		steal := "unknown"
		if r.Steal >= 0 {
			steal = r.Steal.Round(10 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %.2f | %.3f | %.2f | %d | %s |\n", r.Shape, r.Variant, r.perSecond(),
			r.Redis.CPUUsec, r.Redis.Usec, r.Redis.Trips, r.clientUsec(), r.Fallbacks, steal)
	}
	for _, r := range cr.Runs {
		if r.CloseError != "" {
			fmt.Fprintf(&b, "\n%s, %s: a process's Close failed after the run: %s\n", r.Shape, r.Variant, r.CloseError)
		}
	}
	b.WriteString("\npacer on the quick-start client against redis_rate, per admission, in each shape:\n\n| shape | Redis CPU | client CPU |\n|---|---:|---:|\n")
	for _, sh := range coldShapes {
		if q, g, ok := cr.pair(sh.Name); ok {
			fmt.Fprintf(&b, "| %s | %.2f / %.2f µs = %.2f× | %.2f / %.2f µs = %.2f× |\n", sh.Name, q.Redis.CPUUsec, g.Redis.CPUUsec, q.Redis.CPUUsec/g.Redis.CPUUsec,
				q.clientUsec(), g.clientUsec(), q.clientUsec()/g.clientUsec())
		}
	}
	b.WriteString("\nWhat the keys hold in Redis: live keys (DBSIZE against the run's start), MEMORY USAGE of one key, and for pacer of the fleet's records " +
		"(`{limiters}`: the heartbeats, and the policy each Limiter reports for each key it uses, a hash field and a sorted-set member per key) at three quarters of each run; " +
		"then, once the processes have exited, the keys left (a redis_rate key lives a second after its last call, a pacer key 2 s more) " +
		"and INFO used_memory's fall when they are flushed, per key:\n\n")
	b.WriteString("| shape | limiter | live keys | MEMORY USAGE of a key | fleet records | keys reported in them | keys left | used_memory per key left |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range cr.Runs {
		per := "n/a"
		if r.EndKeys > 0 {
			per = fmt.Sprintf("%.0f B", float64(r.EndBytes)/float64(r.EndKeys))
		}
		fleet, reported := "–", "–"
		if r.Variant != coldGCRA {
			fleet, reported = fmt.Sprintf("%d B", r.FleetBytes), fmt.Sprint(r.Reported)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d B | %s | %s | %d | %s |\n", r.Shape, r.Variant, r.LiveKeys, r.SampleBytes, fleet, reported, r.EndKeys, per)
	}
	b.WriteString("\nWhere Redis's time goes (INFO commandstats: every command, a script's own commands counted again on their own):\n\n")
	b.WriteString("| shape | limiter | command | calls per admission | µs per call | µs per admission |\n|---|---|---|---:|---:|---:|\n")
	for _, r := range cr.Runs {
		n := float64(max(r.Admissions, 1))
		for _, name := range slices.Sorted(maps.Keys(r.Stats)) {
			st := r.Stats[name]
			if st.Calls == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %.4f | %.2f | %.2f |\n", r.Shape, r.Variant, name, float64(st.Calls)/n, float64(st.Usec)/float64(st.Calls), float64(st.Usec)/n)
		}
	}
	for _, r := range cr.Runs {
		if len(r.Ops) == 0 {
			continue
		}
		n := float64(max(r.Admissions, 1))
		var parts []string
		for _, op := range slices.Sorted(maps.Keys(r.Ops)) {
			parts = append(parts, fmt.Sprintf("%s %.4f", op, float64(r.Ops[op])/n))
		}
		fmt.Fprintf(&b, "\n`%s`, %s: its Redis calls per admission, by operation (Metrics.RedisCall): %s.\n", r.Variant, r.Shape, strings.Join(parts, ", "))
	}
	return b.String()
}
