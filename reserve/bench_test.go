package reserve_test

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// BenchmarkReserve measures one Reserve (one script call, no sleeping) on a
// real Redis: on one hot key and spread over 10,000 keys, from 16 goroutines
// at once (parallel) and from one (serial); with a default go-redis client
// (pacer bounds each call in its own goroutine) and with
// ContextTimeoutEnabled (the bound is a context deadline). It reports
// redis-µs/call, the Redis CPU time per script call from INFO commandstats,
// when the server is one the test started.
//
//	go test -run '^$' -bench BenchmarkReserve -benchtime 2s ./reserve/
func BenchmarkReserve(b *testing.B) {
	s := redistest.New(b)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1e6, Burst: 1000}
	clients := []struct {
		name string
		c    *redis.Client
	}{
		{"client=default", s.Client},
		{"client=ctxtimeout", redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})},
	}
	defer clients[1].c.Close()
	for _, cl := range clients {
		l, err := reserve.New(cl.c, reserve.Options{KeyPrefix: redistest.Prefix(b), Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		for _, keys := range []int{1, 10000} {
			names := make([]string, keys)
			for i := range names {
				names[i] = "bench" + strconv.Itoa(i)
			}
			b.Run(cl.name+"/keys="+strconv.Itoa(keys)+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(8) // 8 x GOMAXPROCS goroutines
				resetStats(b, s)
				var next atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := names[next.Add(1)%uint64(keys)]
						if _, err := l.Reserve(ctx, key, lim, 1); err != nil {
							b.Error(err)
							return
						}
					}
				})
				reportRedisCPU(b, s)
			})
			b.Run(cl.name+"/keys="+strconv.Itoa(keys)+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				resetStats(b, s)
				i := 0
				for b.Loop() {
					i++
					if _, err := l.Reserve(ctx, names[i%keys], lim, 1); err != nil {
						b.Fatal(err)
					}
				}
				reportRedisCPU(b, s)
			})
		}
	}
}

// resetStats clears INFO commandstats, on a server the test started only.
func resetStats(b *testing.B, s *redistest.Server) {
	if s.Source == redistest.SourceProcess {
		s.Client.ConfigResetStat(context.Background())
	}
}

// reportRedisCPU reports Redis's usec_per_call for EVALSHA.
func reportRedisCPU(b *testing.B, s *redistest.Server) {
	if s.Source != redistest.SourceProcess {
		return
	}
	info, err := s.Client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:"); ok {
			for _, f := range strings.Split(strings.TrimSpace(rest), ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					if x, err := strconv.ParseFloat(v, 64); err == nil {
						b.ReportMetric(x, "redis-µs/call")
					}
				}
			}
		}
	}
}
