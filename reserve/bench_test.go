package reserve_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// BenchmarkReserve measures one Reserve (no sleeping) on a real Redis: on one
// hot key and spread over 10,000 keys, from 16 goroutines at once (parallel)
// and from one (serial); with a default go-redis client (pacer bounds each
// call in its own goroutine) and with ContextTimeoutEnabled (the bound is a
// context deadline); with coalescing (the default) and without. It reports
// redis-µs/op, the Redis CPU time per reservation from INFO commandstats, and
// scripts/op, when the server is one the test started. cmd/pacerbench
// compares pacer with other limiters.
//
//	go test -run '^$' -bench BenchmarkReserve -benchtime 2s ./reserve/
func BenchmarkReserve(b *testing.B) {
	s := redistest.New(b)
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
		for _, off := range []bool{false, true} {
			l, err := reserve.New(cl.c, reserve.Options{KeyPrefix: redistest.Prefix(b), Logger: quiet, DisableCoalescing: off})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			name := cl.name + "/coalesce=" + strconv.FormatBool(!off)
			benchReserve(b, s, l, name, lim)
		}
	}
}

func benchReserve(b *testing.B, s *redistest.Server, l *reserve.Limiter, name string, lim reserve.Limit) {
	ctx := context.Background()
	{
		for _, keys := range []int{1, 10000} {
			names := make([]string, keys)
			for i := range names {
				names[i] = "bench" + strconv.Itoa(i)
			}
			b.Run(name+"/keys="+strconv.Itoa(keys)+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.SetParallelism(8) // 8 x GOMAXPROCS goroutines
				resetStats(b, s)
				var next atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := names[next.Add(1)%uint64(keys)]
						if _, err := l.Reserve(ctx, key, lim); err != nil {
							b.Error(err)
							return
						}
					}
				})
				reportRedisCPU(b, s)
			})
			b.Run(name+"/keys="+strconv.Itoa(keys)+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				resetStats(b, s)
				i := 0
				for b.Loop() {
					i++
					if _, err := l.Reserve(ctx, names[i%keys], lim); err != nil {
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

// reportRedisCPU reports Redis's CPU time for EVALSHA per reservation, and
// the script calls per reservation.
func reportRedisCPU(b *testing.B, s *redistest.Server) {
	if s.Source != redistest.SourceProcess {
		return
	}
	st, err := redistest.CommandStats(context.Background(), s.Client)
	if err != nil {
		b.Fatal(err)
	}
	if es, ok := st["evalsha"]; ok {
		b.ReportMetric(float64(es.Usec)/float64(b.N), "redis-µs/op")
		b.ReportMetric(float64(es.Calls)/float64(b.N), "scripts/op")
	}
}

// BenchmarkReserveLocal measures one Reserve paced by the local fallback
// (Redis behind a proxy that refuses every connection), serial, on one
// key: a Limit, and a policy of a bucket and a window band, whose grants
// the Limiter follows window by window for the handback (localKey.closed).
// Each reservation runs reserve.lua on the in-process store.
//
//	go test -run '^$' -bench BenchmarkReserveLocal ./reserve/
func BenchmarkReserveLocal(b *testing.B) {
	s := redistest.New(b)
	p := redistest.NewProxy(b, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	defer c.Close()
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(b), Logger: quiet, FailAfter: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1e6, Burst: 1000}
	pols := []struct {
		name string
		req  reserve.Request
	}{
		{"limit", reserve.Single("local-limit", lim, 1)},
		{"window", reserve.Request{Key: "local-window", Cost: reserve.Permits(1), Policy: reserve.Policy{
			{Name: "rps", Unit: reserve.PermitsUnit, Limit: lim},
			{Name: "win", Unit: reserve.PermitsUnit, Window: reserve.Window{N: 1e12, Length: time.Second}},
		}}},
	}
	p.Disable(b)
	for _, pol := range pols {
		b.Run(pol.name, func(b *testing.B) {
			// Until the Limiter paces locally: the first calls find Redis gone.
			for {
				r, err := l.ReserveN(ctx, pol.req)
				if err != nil {
					b.Fatal(err)
				}
				if r.Local() {
					break
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				r, err := l.ReserveN(ctx, pol.req)
				if err != nil {
					b.Fatal(err)
				}
				if !r.Local() {
					b.Fatal("a reservation on Redis: the proxy lets calls through")
				}
			}
		})
	}
}
