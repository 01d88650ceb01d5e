package main

import (
	"context"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// BenchmarkColdClient is the cold phase's client side in one goroutine:
// a Wait (pacer, on the client README's quick start builds, in state format
// 3) or an Allow (redis_rate) on each of 8,000 keys in turn, at 10/s each,
// so that no call waits. It reports the process's CPU per call, all of it
// and in user mode (the system calls, a write and a read per call, cost
// both about the same), beside allocations: the figures to compare between
// builds of pacer's client path, each run beside redis_rate's.
//
//	go test -run '^$' -bench BenchmarkColdClient -benchtime 40000x ./cmd/pacerbench/
func BenchmarkColdClient(b *testing.B) {
	s := redistest.New(b)
	ctx := context.Background()
	names := make([]string, 8000)
	for i := range names {
		names[i] = "cold:" + strconv.Itoa(i)
	}
	b.Run("pacer", func(b *testing.B) {
		l := benchLimiter(b, s.URL)
		lim := reserve.Limit{Rate: 10, Burst: 1}
		measureCold(b, func(i int) error { return l.Wait(ctx, names[i%len(names)], lim) })
	})
	b.Run("redis_rate", func(b *testing.B) {
		rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
		defer rdb.Close()
		rl := redis_rate.NewLimiter(rdb)
		lim := redis_rate.Limit{Rate: 10, Period: time.Second, Burst: 1}
		prefix := redistest.Prefix(b)
		measureCold(b, func(i int) error {
			_, err := rl.Allow(ctx, prefix+names[i%len(names)], lim)
			return err
		})
	})
}

// benchLimiter is a Limiter on the client the README's quick start builds
// (quickStartClient), on a key prefix of b's own whose fleet writes state
// format 3; both are closed when b ends.
func benchLimiter(b *testing.B, url string) *reserve.Limiter {
	rdb, err := quickStartClient(url)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rdb.Close() })
	prefix := redistest.Prefix(b)
	if err := rdb.Set(context.Background(), layout.FormatKey(prefix), "3", 0).Err(); err != nil {
		b.Fatal(err)
	}
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: prefix, RequireRedis: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// measureCold runs call b.N times after one warm-up call, and reports CPU
// per call (cpu-µs/op, user-µs/op) beside allocations.
func measureCold(b *testing.B, call func(i int) error) {
	if err := call(0); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0, user0 := processCPU()
	i := 0
	for b.Loop() {
		i++
		if err := call(i); err != nil {
			b.Fatal(err)
		}
	}
	cpu1, user1 := processCPU()
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
	b.ReportMetric(float64(user1-user0)/float64(b.N)/1e3, "user-µs/op")
}

// processCPU returns the process's CPU time, all of it and in user mode.
func processCPU() (all, user time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Utime.Nano())
}

// TestFileSlug: each cold limiter's profile has a file name of its own
// (they once shared cold-<shape>-<index>.pprof, so the last limiter's
// overwrote the others').
func TestFileSlug(t *testing.T) {
	seen := map[string]string{}
	for _, v := range coldVariants {
		s := fileSlug(v)
		if s == "" || strings.ContainsAny(s, " ,()/") {
			t.Errorf("fileSlug(%q) = %q: not a file name's part", v, s)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("fileSlug(%q) = fileSlug(%q) = %q", v, other, s)
		}
		seen[s] = v
	}
	if got, want := fileSlug("pacer, quick-start client"), "pacer-quick-start-client"; got != want {
		t.Errorf("fileSlug = %q, want %q", got, want)
	}
}
