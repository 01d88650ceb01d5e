package redistest

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats: how many times
// Redis ran it and the µs it spent in it.
type CommandStat struct {
	Calls int64
	Usec  int64
}

// UsecPerCall is the µs per call (0 with no calls).
func (s CommandStat) UsecPerCall() float64 {
	if s.Calls == 0 {
		return 0
	}
	return float64(s.Usec) / float64(s.Calls)
}

// CommandStats reads INFO commandstats at c, by command name in lower case
// ("evalsha", "get", ...): the figures the benchmarks report Redis's own
// time from.
func CommandStats(ctx context.Context, c redis.UniversalClient) (map[string]CommandStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]CommandStat{}
	for line := range strings.SplitSeq(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_")), ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		var st CommandStat
		for f := range strings.SplitSeq(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = st
	}
	return out, nil
}
