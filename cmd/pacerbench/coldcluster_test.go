package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// BenchmarkClusterCold is the cold phase's shape "every key at its limit"
// on a Redis Cluster of 3 masters, in one process: 3,000 keys at 1/s
// burst 1, a goroutine per 25 keys looping over them with a wait on each
// (120 goroutines), for clusterColdRun per row, in two shapes: after a
// warm-up that calls every key once from those goroutines at once (keys
// due together: each second's turn finds a goroutine's 25 keys due, as in
// the cold phase), and after one that calls them one after the other (keys
// due spread over the second: calls seldom overlap). Its rows: pacer with
// pipelining (a queue per master), pacer without (DisablePipelining), both
// on a Cluster client made with go-redis's defaults (as a user makes one;
// New then makes its own, set up as pacer needs it), and redis_rate's
// Allow on the same client (redisRate.wait: if refused, sleep RetryAfter
// and try again).
// Each reports per admission the process's CPU, the masters' CPU (INFO
// cpu, summed over the 3) and their script calls (commandstats), beside
// admissions per second and the machine's steal over the row.
//
//	go test -run '^$' -bench BenchmarkClusterCold -benchtime 1x ./cmd/pacerbench/
func BenchmarkClusterCold(b *testing.B) {
	c := redistest.NewCluster(b, 3)
	names := make([]string, 3000)
	for i := range names {
		names[i] = "cold:" + strconv.Itoa(i)
	}
	newClient := func(b *testing.B) *redis.ClusterClient {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
		b.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	pacerRow := func(opts reserve.Options, together bool) func(b *testing.B) {
		return func(b *testing.B) {
			cc := newClient(b)
			ctx := context.Background()
			if err := cc.Set(ctx, layout.FormatKey(reserve.DefaultKeyPrefix), "3", 0).Err(); err != nil {
				b.Fatal(err)
			}
			opts.RequireRedis = true
			l, err := reserve.New(cc, opts)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			lim := reserve.Limit{Rate: 1, Burst: 1}
			clusterColdRow(b, c, names, together, func(ctx context.Context, key string) error { return l.Wait(ctx, key, lim) })
		}
	}
	for _, together := range []bool{true, false} {
		shape := "keys due together"
		if !together {
			shape = "keys due spread"
		}
		b.Run(shape, func(b *testing.B) {
			b.Run("pacer, pipelined", pacerRow(reserve.Options{}, together))
			b.Run("pacer, DisablePipelining", pacerRow(reserve.Options{DisablePipelining: true}, together))
			b.Run("redis_rate", func(b *testing.B) {
				rr := &redisRate{l: redis_rate.NewLimiter(newClient(b)), lim: redis_rate.Limit{Rate: 1, Period: time.Second, Burst: 1}}
				clusterColdRow(b, c, names, together, rr.wait)
			})
		})
	}
}

// clusterColdRun is how long each row of BenchmarkClusterCold runs,
// after a warm-up of one call on each key.
const clusterColdRun = 10 * time.Second

// clusterColdRow runs wait on names from a goroutine per 25 of them, each
// looping over its keys, for clusterColdRun, after a warm-up, and reports
// the figures.
func clusterColdRow(b *testing.B, c *redistest.Cluster, names []string, together bool, wait func(ctx context.Context, key string) error) {
	ctx := context.Background()
	flush := func() {
		err := c.Client.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.FlushAll(ctx).Err() })
		if err != nil {
			b.Fatal(err)
		}
	}
	flush()
	defer flush()
	const chunk = 25
	// Warm-up: every key once. together: from the goroutines of the run,
	// at once, as the cold phase's processes start together; so each
	// second's turn finds a goroutine's keys due together, and the calls
	// overlap. Else one key after the other, from one goroutine: the keys'
	// turns spread over the second, and the calls seldom overlap.
	var warm sync.WaitGroup
	var warmErr atomic.Pointer[error]
	for i := 0; i < len(names); i += chunk {
		keys := names[i:min(i+chunk, len(names))]
		call := func() {
			for _, k := range keys {
				if err := wait(ctx, k); err != nil {
					warmErr.Store(&err)
				}
			}
		}
		if together {
			warm.Go(call)
		} else {
			call()
		}
	}
	warm.Wait()
	if err := warmErr.Load(); err != nil {
		b.Fatal(*err)
	}
	masters := func() (cpu float64, scripts int64) {
		var mu sync.Mutex
		err := c.Client.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			info, err := n.Info(ctx, "commandstats", "cpu").Result()
			if err != nil {
				return err
			}
			u, err := parseUsage(info)
			if err != nil {
				return err
			}
			mu.Lock()
			cpu += u.CPU
			scripts += u.Stats["evalsha"].Calls + u.Stats["eval"].Calls
			mu.Unlock()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return cpu, scripts
	}
	err := c.Client.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.ConfigResetStat(ctx).Err() })
	if err != nil {
		b.Fatal(err)
	}
	var admitted, failed atomic.Int64
	// Cancelled at the end, not a deadline: a Wait refuses at once a slot
	// past its context's deadline.
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	time.AfterFunc(clusterColdRun, cancel)
	redis0, scripts0 := masters()
	steal0 := readMachineCPU()
	cpu0, _ := processCPU()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < len(names); i += chunk {
		keys := names[i:min(i+chunk, len(names))]
		wg.Go(func() {
			for {
				for _, k := range keys {
					if err := wait(rctx, k); err != nil {
						if rctx.Err() == nil {
							failed.Add(1)
						}
						return
					}
					admitted.Add(1)
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	cpu1, _ := processCPU()
	steal1 := readMachineCPU()
	redis1, scripts1 := masters()
	n := float64(admitted.Load())
	if failed.Load() > 0 {
		b.Errorf("%d waits failed", failed.Load())
	}
	b.ReportMetric(n/took.Seconds(), "admissions/s")
	b.ReportMetric(float64(cpu1-cpu0)/n/1e3, "client-cpu-µs/adm")
	b.ReportMetric((redis1-redis0)*1e6/n, "redis-cpu-µs/adm")
	b.ReportMetric(float64(scripts1-scripts0)/n, "scripts/adm")
	if steal0.ok && steal1.ok {
		b.ReportMetric((steal1.steal-steal0.steal)/ticksPerSecond, "steal-s")
	}
}
