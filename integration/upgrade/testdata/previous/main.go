// The previous release's twin of integration/cmd/upgradedriver: the same
// program written against that release's API (commit in ../../PREVIOUS,
// v0.1.0, whose API this program's is).
// integration/upgrade_test.go copies it into a git worktree of that commit
// as cmd/upgradedriver/main.go and builds it there. It is not built here.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

type clock struct{}

func (clock) Now() time.Time { return time.Now() }

func main() {
	url := flag.String("redis", "", "Redis URL")
	prefix := flag.String("prefix", "", "key prefix")
	seed := flag.Uint64("seed", 1, "seed of the costs")
	workers := flag.Int("workers", 3, "goroutines per key")
	flag.Parse()
	opt, err := redis.ParseURL(*url)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	// The machine's clock, passed to the scripts: every process of the
	// test runs on one machine, so the slots they print are on one clock,
	// exactly as Redis granted them.
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: *prefix, Clock: clock{}, ClientTime: true, RequireRedis: true})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	lim := reserve.Limit{Rate: 40, Burst: 4}
	pol := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 30, Burst: 3}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 1500, Burst: 2000}},
		{Name: "per2s", Unit: "requests", Window: reserve.Window{N: 50, Length: 2 * time.Second}},
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		fmt.Printf(format+"\n", args...)
		out.Unlock()
	}
	var wg sync.WaitGroup
	for w := range *workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(*seed, uint64(w)))
			for ctx.Err() == nil {
				n := 1 + rng.IntN(2)
				r, err := l.ReserveN(ctx, reserve.Single("lim", lim, n))
				if err != nil {
					if ctx.Err() == nil {
						say("error lim %v", err)
					}
					continue
				}
				say("grant lim %d %t %d", r.Time().UnixNano(), r.Local(), n)
				sleepUntil(ctx, r.Time())
			}
		})
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(*seed, 100+uint64(w)))
			for ctx.Err() == nil {
				req, tok := float64(rng.IntN(3)), float64(rng.IntN(600))
				r, err := l.ReserveN(ctx, reserve.Request{Key: "pol", Policy: pol, Cost: reserve.Cost{"requests": req, "tokens": tok}})
				if err != nil {
					if ctx.Err() == nil {
						say("error pol %v", err)
					}
					continue
				}
				say("grant pol %d %t %g %g", r.Time().UnixNano(), r.Local(), req, tok)
				sleepUntil(ctx, r.Time())
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		log.Fatal(err)
	}
}

func sleepUntil(ctx context.Context, t time.Time) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Until(t)):
	}
}
