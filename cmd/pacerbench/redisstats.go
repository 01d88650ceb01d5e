package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// usage is what Redis spent on a phase, read from INFO commandstats (reset by
// CONFIG RESETSTAT at the phase's start) and INFO cpu (a difference).
type usage struct {
	// Stats holds commandstats by command name (lower case, without
	// "|subcommand"), every command Redis ran, inside scripts and EXEC too.
	Stats map[string]cmdStat
	CPU   float64 // used_cpu_sys + used_cpu_user of the whole server, seconds
}

type cmdStat struct{ Calls, Usec int64 }

// outer are the commands whose time includes the commands they run (and
// which commandstats counts again on their own).
var outer = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true, "exec": true}

// startUsage resets INFO commandstats and returns the CPU counters, the
// baseline for endUsage.
func startUsage(ctx context.Context, admin *redis.Client) (usage, error) {
	if err := admin.ConfigResetStat(ctx).Err(); err != nil {
		return usage{}, fmt.Errorf("pacerbench: CONFIG RESETSTAT: %w", err)
	}
	return readUsage(ctx, admin)
}

// endUsage returns what Redis spent since startUsage returned base.
func endUsage(ctx context.Context, admin *redis.Client, base usage) (usage, error) {
	u, err := readUsage(ctx, admin)
	if err != nil {
		return usage{}, err
	}
	u.CPU -= base.CPU
	return u, nil
}

func readUsage(ctx context.Context, admin *redis.Client) (usage, error) {
	info, err := admin.Info(ctx, "commandstats", "cpu").Result()
	if err != nil {
		return usage{}, fmt.Errorf("pacerbench: INFO: %w", err)
	}
	return parseUsage(info)
}

// parseUsage reads commandstats and the CPU counters from the text of INFO.
func parseUsage(info string) (usage, error) {
	u := usage{Stats: map[string]cmdStat{}}
	for line := range strings.SplitSeq(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_")
		if !ok {
			continue
		}
		name, fields, _ := strings.Cut(rest, ":")
		name, _, _ = strings.Cut(name, "|") // "client|setinfo"
		st := u.Stats[name]
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.Calls += n
			case "usec":
				st.Usec += n
			}
		}
		u.Stats[name] = st
	}
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(redisproc.InfoField(info, f), 64)
		if err != nil {
			return usage{}, fmt.Errorf("pacerbench: INFO cpu: %s: %w", f, err)
		}
		u.CPU += v
	}
	return u, nil
}

// perCall is what one admitted call cost.
type perCall struct {
	Trips    float64 // round trips to Redis
	Commands float64 // commands sent
	Usec     float64 // Redis µs running them (commandstats)
	CPUUsec  float64 // Redis process CPU µs (INFO cpu)
}

// cost divides what the limiters' clients sent (s) and what Redis spent
// (u) over calls. Redis's time counts the commands the clients sent, once:
// the whole of EVALSHA and EXEC (which include what they run), and of any
// other command the share its clients sent outside a transaction. Commands
// that only ran inside a script or EXEC, and this program's own (INFO,
// CONFIG, sent on another client), add nothing.
func cost(u usage, s sent, calls int64) perCall {
	if calls == 0 {
		return perCall{}
	}
	var usec float64
	for name, st := range u.Stats {
		switch {
		case outer[name]:
			usec += float64(st.Usec)
		case st.Calls > 0 && s.Commands[name] > 0:
			usec += float64(st.Usec) * min(1, float64(s.Commands[name])/float64(st.Calls))
		}
	}
	n := float64(calls)
	return perCall{
		Trips:    float64(s.Trips) / n,
		Commands: float64(s.total()) / n,
		Usec:     usec / n,
		CPUUsec:  u.CPU * 1e6 / n,
	}
}

// usedMemory returns INFO memory's used_memory, bytes.
func usedMemory(ctx context.Context, admin *redis.Client) (int64, error) {
	info, err := admin.Info(ctx, "memory").Result()
	if err != nil {
		return 0, fmt.Errorf("pacerbench: INFO memory: %w", err)
	}
	return strconv.ParseInt(redisproc.InfoField(info, "used_memory"), 10, 64)
}
