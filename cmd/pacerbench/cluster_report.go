package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
)

// tables returns the cluster phase's tables, in Markdown.
func (res *clusterResults) tables() string {
	var b strings.Builder
	for _, r := range res.Runs {
		b.WriteString(r.tables())
	}
	if res.Failed > 0 {
		fmt.Fprintf(&b, "\n### Cluster: %d processes: the run failed\n\n`%s`\n", res.Failed, res.FailedErr)
	}
	if len(res.Runs) >= 2 {
		b.WriteString(res.fitTables())
	}
	return b.String()
}

// bound is what a judged key's busiest second may hold: Rate + Burst.
func (r *clusterRun) bound() float64 { return r.JudgedLimit.Rate + float64(r.JudgedLimit.Burst) }

func (r *clusterRun) tables() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n### Cluster: %d processes on a Redis Cluster of 3 masters and 3 replicas\n\n", r.Procs)
	fmt.Fprintf(&b, "Each process is a Limiter made as README's quick start makes it, on `redis.NewClusterClient` with go-redis's defaults "+
		"(`reserve.Options{RequireRedis: true}`, plus Metrics and a Logger at Warn to see the switches and failed calls). "+
		"Cold keys: %d host names, called %.0f times a second by the whole fleet, each once every %.0f s, by another process each round, limit %s/s burst %d (twice the calls: none waits). "+
		"Judged keys (limit %g/s burst %d, so at most %.0f calls in any second): %s, each called by %d goroutine(s) of every process in a loop of Wait; "+
		"a call fires when its Wait returns, and every window [t, t+1 s) of the run is counted. "+
		"The fleet writes state format %d (`-format`, set as `pacer format` sets it before the processes start). "+
		"cluster-node-timeout %v. The %d processes took %v from the first start to the last ready.\n\n",
		r.Keys, r.ColdRate, float64(r.Keys)/r.ColdRate, fmtRate(r.ColdLimit.Rate), r.ColdLimit.Burst,
		r.JudgedLimit.Rate, r.JudgedLimit.Burst, r.bound(), r.judgedList(), clusterWaiters,
		r.Format, r.NodeTimeout, r.Procs, r.StartTook.Round(time.Millisecond))
	if r.FIFO != 0 {
		fmt.Fprintf(&b, "Every node ran under SCHED_FIFO at priority %d (`-fifo`): the fleet's processes did not preempt Redis, so SLOWLOG's times are its own work (and the hypervisor's steal).\n\n", r.FIFO)
	}
	fmt.Fprintf(&b, "%s This program, its processes and its redis-servers used %.1f CPU-seconds over the run.\n\n", r.Machine.note(), r.OwnCPU.Seconds())
	fails, procs, text := 0, 0, ""
	for _, p := range r.Children {
		if p.NewFails > 0 {
			fails += p.NewFails
			procs++
			if text == "" {
				text = p.NewError
			}
		}
	}
	if fails > 0 {
		fmt.Fprintf(&b, "The processes start %v apart. New (RequireRedis) failed %d times in %d processes before it worked (each tried again a second later), the first: `%s`\n\n", clusterStartGap, fails, procs, shorten(text, 400))
	} else {
		fmt.Fprintf(&b, "The processes start %v apart; every New worked at its first try.\n\n", clusterStartGap)
	}

	b.WriteString("| segment | s | cold admissions/s | judged admissions/s | busiest 1 s of each judged key (× (rate + burst)) | Wait errors: cold, judged (processes; most in one) | switches to local, back | local grants | failed Redis calls by operation | client CPU per process: mean, most (ms/s) |\n")
	b.WriteString("|---|--:|--:|---|---|---|--:|--:|---|--:|\n")
	for _, s := range r.Segments {
		sec := s.To.Sub(s.From).Seconds()
		var judged, busiest []string
		for i := range s.Judged {
			judged = append(judged, fmt.Sprintf("%.1f", float64(s.Judged[i])/sec))
			busiest = append(busiest, fmt.Sprintf("%d (%.3f)", s.Busiest[i], float64(s.Busiest[i])/r.bound()))
		}
		var failed []string
		for _, op := range sortedOps(s.Failed) {
			failed = append(failed, fmt.Sprintf("%s %d", op, s.Failed[op]))
		}
		fmt.Fprintf(&b, "| %s | %.1f | %.1f | %s | %s | %d, %d (%d; %d) | %d, %d | %d | %s | %.1f, %.1f |\n",
			s.Name, sec, float64(s.Cold)/sec, strings.Join(judged, ", "), strings.Join(busiest, ", "),
			s.ColdErrors, s.JudgedErrors, s.ErrProcs, s.ErrMax, s.ToLocal, s.ToRedis, s.LocalGrants,
			orNone(strings.Join(failed, ", ")), s.ClientCPU*1e3, s.ClientCPUMax*1e3)
	}
	fmt.Fprintf(&b, "\nThe judged keys by segment: the busiest second of the fires (what the provider sees), of the slots those fires woke for (what pacer granted: Options.Tracer's reservation), the fires the local fallback granted, and the fires more than %v after their slot (their process was off the CPU):\n\n", clusterLate)
	b.WriteString("| segment | key | fires | busiest 1 s of fires (× (rate + burst)) | of slots (×) | granted locally | fired late |\n|---|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range r.Segments {
		for i := range s.Judged {
			fmt.Fprintf(&b, "| %s | %d | %d | %d (%.3f) | %d (%.3f) | %d | %d |\n", s.Name, i, s.Judged[i], s.Busiest[i], float64(s.Busiest[i])/r.bound(),
				s.BusiestSlots[i], float64(s.BusiestSlots[i])/r.bound(), s.LocalFires[i], s.LateFires[i])
		}
	}
	b.WriteString("\nThe fleet's records, read from Redis once a second: members silent for two heartbeat intervals (the others count them held and leave them their shares of every key), and members that say they pace locally:\n\n")
	b.WriteString("| segment | samples (failed) | silent: mean, most | pacing locally: most |\n|---|--:|--:|--:|\n")
	for _, s := range r.Segments {
		fmt.Fprintf(&b, "| %s | %d (%d) | %.1f, %d | %d |\n", s.Name, s.FleetSamples, s.FleetFails, s.SilentMean, s.SilentMax, s.LocalMax)
	}
	b.WriteString("\nThe fleet's Redis calls by operation (Metrics.RedisCall, each process's count between its first and last sample in the segment), per second, and all of them per admission:\n\n")
	b.WriteString("| segment | calls/s by operation | calls per admission |\n|---|---|--:|\n")
	for _, s := range r.Segments {
		var ops []string
		all := 0.0
		for _, op := range slices.Sorted(maps.Keys(s.Ops)) {
			ops = append(ops, fmt.Sprintf("%s %.1f", op, s.Ops[op]))
			all += s.Ops[op]
		}
		adm := float64(s.Cold)
		for _, n := range s.Judged {
			adm += float64(n)
		}
		per := "-"
		if adm > 0 {
			per = fmt.Sprintf("%.3f", all/(adm/s.To.Sub(s.From).Seconds()))
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", s.Name, orNone(strings.Join(ops, ", ")), per)
	}
	for _, s := range r.Segments {
		for _, t := range s.ErrTexts {
			fmt.Fprintf(&b, "\n%s, an error returned to a caller: `%s`\n", s.Name, shorten(t, 300))
		}
		for _, t := range s.FailTexts {
			fmt.Fprintf(&b, "\n%s, a failed Redis call: `%s`\n", s.Name, shorten(t, 300))
		}
	}

	b.WriteString("\nThe faults:\n\n")
	fmt.Fprintf(&b, "- resharding: %d slots and %d keys moved in %v, slot by slot as redis-cli --cluster reshard moves them (SETSLOT IMPORTING and MIGRATING, MIGRATE %d keys at a time, SETSLOT NODE): %s.\n",
		r.Reshard.Slots, r.Reshard.Keys, r.Reshard.Took.Round(time.Millisecond), redisproc.MigrateBatch, strings.Join(r.Reshard.Moves, "; "))
	if len(r.Reshard.Retries) > 0 {
		fmt.Fprintf(&b, "  The move of %d slot(s) failed and started again on the masters of the moment (a master failed over meanwhile), the first: `%s`.\n",
			len(r.Reshard.Retries), shorten(r.Reshard.Retries[0], 300))
	}
	k := r.Kill
	fmt.Fprintf(&b, "- kill -9 of %s, the master of the fleet's records (slot %d) and of judged key %q: its replica %s served the slot %v after the kill; %d processes switched to local pacing, the last back on Redis %v after the kill%s.\n",
		k.Node, r.FleetSlot, r.Judged[1], k.Replica, k.Served.Round(time.Millisecond), k.Switched, k.Back.Round(time.Millisecond), notBackNote(k.NotBack))
	fo := r.Failover
	fmt.Fprintf(&b, "- CLUSTER FAILOVER on %s, the replica of %s (judged key %q): roles swapped after %v; %d processes switched to local pacing, the last back on Redis %v after the command%s.\n",
		fo.Replica, fo.Node, r.Judged[2], fo.Took.Round(time.Millisecond), fo.Switched, fo.Back.Round(time.Millisecond), notBackNote(fo.NotBack))

	b.WriteString("\nEach node, by segment (CPU: INFO cpu, user + system; EVALSHA: INFO commandstats, every script, the keys' and the fleet's; connections, keys and used_memory_dataset at the segment's end):\n\n")
	b.WriteString("| segment | node | role | CPU ms/s | EVALSHA/s | EVALSHA ms/s | connections | keys | dataset MB |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|\n")
	for _, s := range r.Segments {
		for _, n := range s.Nodes {
			if !n.Up {
				fmt.Fprintf(&b, "| %s | %s | down | | | | | | |\n", s.Name, n.Addr)
				continue
			}
			cpu := "-"
			if n.CPU >= 0 {
				cpu = fmt.Sprintf("%.1f", n.CPU*1e3)
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.0f | %.1f | %d | %d | %.2f |\n", s.Name, n.Addr, n.Role, cpu,
				n.EvalCalls, n.EvalUsec/1e3, n.Clients, n.Keys, float64(n.Dataset)/1e6)
		}
	}
	b.WriteString(r.shardTable())
	return b.String()
}

// shardTable is the steady segment by master: what the fleet costs each
// shard, the figures the fit takes.
func (r *clusterRun) shardTable() string {
	var b strings.Builder
	rows := r.shardRows()
	if rows == nil {
		return ""
	}
	fmt.Fprintf(&b, "\nSteady segment, by master (CPU above the idle Cluster's, measured before the fleet started; heartbeats: SLOWLOG over the %v heartbeats segment, each heartbeat.lua EVALSHA's own time; a cold key's state %d B (MEMORY USAGE), the fleet's records %d B holding %d policies):\n\n",
		r.BeatsFor.Round(time.Millisecond), r.KeyBytes, r.FleetBytes, r.Reported)
	b.WriteString("| master | fleet's records | admissions/s | CPU above idle ms/s | Redis CPU µs per admission | heartbeat.lua calls/s | their ms/s | mean, p99, max µs | over 1 ms | connections | per process | keys | dataset B per key |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|---|--:|--:|--:|--:|--:|\n")
	for _, s := range rows {
		fleet := ""
		if s.Fleet {
			fleet = "yes"
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.0f, %.0f, %.0f | %d | %d | %.2f | %d | %.0f |\n",
			s.Addr, fleet, s.Admissions, s.CPU*1e3, s.PerAdmission, s.BeatCalls, s.BeatUsec/1e3,
			us(s.Beats.Mean), us(s.Beats.P99), us(s.Beats.Max), s.Beats.Over1ms,
			s.Clients, float64(s.Clients)/float64(r.Procs), s.Keys, s.BytesPerKey)
	}
	return b.String()
}

// shardRow is one master over the steady segment.
type shardRow struct {
	Addr         string
	Fleet        bool    // held the fleet's records
	Admissions   float64 // per second
	CPU          float64 // s/s above the idle Cluster's
	PerAdmission float64 // µs of CPU above idle per admission
	Beats        beatStats
	BeatCalls    float64 // heartbeat.lua calls per second
	BeatUsec     float64 // their µs per second
	Clients      int64
	Keys         int64
	BytesPerKey  float64
}

// shardRows returns the steady segment's figures by master, as created.
func (r *clusterRun) shardRows() []shardRow {
	s := r.segment("steady")
	if s == nil {
		return nil
	}
	sec := s.To.Sub(s.From).Seconds()
	adm := r.shardAdmissions(s)
	idle := map[string]float64{}
	for _, n := range r.Idle {
		idle[n.Addr] = n.CPU
	}
	var rows []shardRow
	for _, m := range r.Masters {
		row := shardRow{Addr: m.Addr, Fleet: m.Addr == r.fleetMaster(), Admissions: float64(adm[m.Addr]) / sec}
		for _, n := range s.Nodes {
			if n.Addr == m.Addr {
				row.CPU = n.CPU - idle[m.Addr]
				row.Clients, row.Keys = n.Clients, n.Keys
				if n.Keys > 0 {
					row.BytesPerKey = float64(n.Dataset) / float64(n.Keys)
				}
			}
		}
		if row.Admissions > 0 {
			row.PerAdmission = row.CPU * 1e6 / row.Admissions
		}
		row.Beats = r.Beats[m.Addr]
		row.BeatCalls = float64(row.Beats.Calls) / r.BeatsFor.Seconds()
		row.BeatUsec = us(row.Beats.Mean) * float64(row.Beats.Calls) / r.BeatsFor.Seconds()
		rows = append(rows, row)
	}
	return rows
}

func (r *clusterRun) judgedList() string {
	var out []string
	for i, k := range r.Judged {
		out = append(out, fmt.Sprintf("`%s` (slot %d, %s)", k, r.JudgedSlots[i], []string{"moved by the resharding", "on the master killed", "on the master failed over"}[i]))
	}
	return strings.Join(out, ", ")
}

func notBackNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d still pacing locally when the phase stopped waiting, %v after)", n, clusterSettle)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// fmtRate prints a small rate without trailing zeros.
func fmtRate(r float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", r), "0"), ".")
}
