package luastore

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// reservePolicies are the policies BenchmarkReserve and
// BenchmarkReserveRedis run lua.Reserve on: a Limit ("L" and two doubles)
// and a policy of three bands (two buckets and a window, core.lua's
// general path), each request costing what the caller charges.
var reservePolicies = []struct {
	name    string
	policy  string    // ARGV[3]
	cost    []float64 // one request's max_wait_us and costs
	spacing time.Duration
}{
	{"limit", "L" + doubles(1000, 10), []float64{-1, 1}, time.Millisecond},
	{"policy=3bands", "2 requests tokens 3 rps 1 b 1000 10 tpm 2 b 100000 2000 day 1 w 1000000000 86400000000:0", []float64{-1, 1, 20}, time.Millisecond},
}

// BenchmarkReserve runs lua.Reserve, as a Limiter sends it, on a Store: a
// batch of 1 and of 64 requests per call. The client clock moves on by the
// batch's spacing each call, so the queue stays as long.
func BenchmarkReserve(b *testing.B) {
	for _, p := range reservePolicies {
		for _, batch := range []int{1, 64} {
			b.Run(p.name+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				keys := []string{"{bench}", "{bench}:limit", "{bench}:shadow"}
				benchReserve(b, New(nil), nil, keys, p.policy, p.cost, batch, p.spacing)
			})
		}
	}
}

// BenchmarkReserveRedis is BenchmarkReserve on a real redis-server, for
// comparison: ns/op is the wall time of a call, round trip included;
// server-µs/call is INFO commandstats' usec_per_call for evalsha, the
// script's own cost on the server (reported on a server the test started).
func BenchmarkReserveRedis(b *testing.B) {
	srv := redistest.New(b)
	for _, p := range reservePolicies {
		for _, batch := range []int{1, 64} {
			b.Run(p.name+"/batch="+strconv.Itoa(batch), func(b *testing.B) {
				prefix := redistest.Prefix(b)
				keys := []string{"{" + prefix + "bench}", "{" + prefix + "bench}:limit", "{" + prefix + "bench}:shadow"}
				b.Cleanup(func() { srv.Client.Del(context.Background(), keys...) })
				benchReserve(b, srv.Client, srv, keys, p.policy, p.cost, batch, p.spacing)
			})
		}
	}
}

// benchReserve runs the benchmark on sc, a Store or srv's client, on a
// client clock: a batch of one plain request (cost 1 per unit, no maximum
// wait) as the common call, without the floor and requests arguments;
// others with the requests as little-endian doubles.
func benchReserve(b *testing.B, sc redis.Scripter, srv *redistest.Server, keys []string, policy string, cost []float64, batch int, spacing time.Duration) {
	ctx := context.Background()
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC).UnixNano()
	args := []any{"", "", policy}
	plain := batch == 1 && !slices.ContainsFunc(cost, func(c float64) bool { return c != 1 && c != -1 }) && cost[0] == -1
	if !plain {
		var reqs []float64
		for range batch {
			reqs = append(reqs, cost...)
		}
		args = append(args, "", doubles(reqs...))
	}
	run := func() {
		args[1] = "t" + strconv.FormatInt(now/1000, 10) + ":" + strconv.FormatInt(now%1000, 10) + " 1"
		if err := reserveScript.Run(ctx, sc, keys, args...).Err(); err != nil {
			b.Fatal(err)
		}
		now += int64(batch) * int64(spacing)
	}
	run() // loads the script (and, on Redis, sends it once)
	statsOK := srv != nil && srv.Source == redistest.SourceProcess
	if statsOK {
		// Our own server: its statistics are ours to reset.
		srv.Client.ConfigResetStat(ctx)
	}
	b.ReportAllocs()
	for b.Loop() {
		run()
	}
	if statsOK {
		st, err := redistest.CommandStats(ctx, srv.Client)
		if err != nil {
			b.Fatal(err)
		}
		if es, ok := st["evalsha"]; ok {
			b.ReportMetric(es.UsecPerCall(), "server-µs/call")
		}
	}
}
