// Command opchange measures when the provider sees an operator's change:
// a fleet of 24 goroutines on one Limiter calls key "api" at 10/s (burst
// 1), each noting the time its Wait returns (the call's send); after 4 s
// it runs one pacer command (set, unset, pause or resume on "api"), then
// prints what pacer printed and, for each time pacer said the provider
// sees the change from ("from", "goes at"), the calls around it: the last
// before, the first at or after it, and the gaps between calls there.
//
//	redis-server --port 6481 --bind 127.0.0.1 --save '' &
//	go build -o /tmp/pacer ./cmd/pacer
//	go run ./integration/cmd/opchange -redis 127.0.0.1:6481 -pacer /tmp/pacer set api --rate 20 --burst 1 --reason test
//
// docs/ops.md ("When the provider sees a change") gives its figures.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "the Redis address")
	prefix := flag.String("prefix", "pacer:opchange:", "the fleet's key prefix")
	bin := flag.String("pacer", "pacer", "the pacer binary")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: opchange [flags] PACER-COMMAND...")
		os.Exit(2)
	}
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: *prefix, HeartbeatInterval: 100 * time.Millisecond, RequireRedis: true})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	lim := reserve.Limit{Rate: 10, Burst: 1}
	var mu sync.Mutex
	var calls []time.Time
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := l.Wait(ctx, "api", lim); err != nil {
					return
				}
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
			}
		})
	}
	time.Sleep(4 * time.Second)
	ran := time.Now()
	out, err := exec.Command(*bin, append([]string{"-redis", *addr, "-prefix", *prefix}, flag.Args()...)...).CombinedOutput()
	fmt.Printf("$ pacer %s   (run at %s)\n%s", strings.Join(flag.Args(), " "), clock(ran), out)
	if err != nil {
		log.Fatal(err)
	}
	time.Sleep(8 * time.Second)
	cancel()
	wg.Wait()
	slices.SortFunc(calls, func(a, b time.Time) int { return a.Compare(b) })

	at := func(t time.Time) int { return slices.IndexFunc(calls, func(c time.Time) bool { return !c.Before(t) }) }
	show := func(what string, t time.Time) {
		i := at(t)
		switch {
		case i < 0:
			fmt.Printf("%s %s: no call at or after it\n", what, clock(t))
			return
		case i == 0:
			fmt.Printf("%s %s: no call before it (since the fleet started), the first at %s (%v after it)\n",
				what, clock(t), clock(calls[0]), calls[0].Sub(t).Round(time.Millisecond))
			return
		}
		fmt.Printf("%s %s: the last call before at %s, the first at or after at %s (%v after it); gaps from there:",
			what, clock(t), clock(calls[i-1]), clock(calls[i]), calls[i].Sub(t).Round(time.Millisecond))
		for j := i - 2; j < min(i+5, len(calls)); j++ {
			if j > 0 {
				fmt.Printf(" %v", calls[j].Sub(calls[j-1]).Round(time.Millisecond))
			}
			if j == i-1 {
				fmt.Print(" |")
			}
		}
		fmt.Println()
	}
	show("the command ran at", ran)
	for _, m := range regexp.MustCompile(`(from|goes at) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)`).FindAllStringSubmatch(string(out), -1) {
		t, err := time.Parse("2006-01-02T15:04:05.000Z", m[2])
		if err != nil {
			log.Fatal(err)
		}
		show("pacer's \""+m[1]+"\"", t)
	}
}

// clock is t to the ms, UTC.
func clock(t time.Time) string { return t.UTC().Format("15:04:05.000") }
