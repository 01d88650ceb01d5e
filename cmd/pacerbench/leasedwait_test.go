package main

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// BenchmarkLeasedWait is one process of the lease phase's leased Wait: 64
// goroutines (32 x GOMAXPROCS 2) call Wait on one hot key whose limit
// (10M/s, burst 10,000) nobody waits for, each with a context deadline as
// the phase's callers have, on the client the README's quick start builds
// (state format 3, leases on by default). Most Waits are handed a slot of
// a lease the process holds, without a Redis call: allocations and CPU per
// Wait (cpu-µs/op, user-µs/op) are the leased path's own, the figures to
// compare between builds.
//
//	go test -run '^$' -bench BenchmarkLeasedWait -benchtime 2000000x ./cmd/pacerbench/
func BenchmarkLeasedWait(b *testing.B) {
	s := redistest.New(b)
	l := benchLimiter(b, s.URL)
	lim := reserve.Limit{Rate: 10_000_000, Burst: 10_000}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := l.Wait(ctx, "hot", lim); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	cpu0, user0 := processCPU()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Wait(ctx, "hot", lim); err != nil {
				b.Error(err)
				return
			}
		}
	})
	cpu1, user1 := processCPU()
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
	b.ReportMetric(float64(user1-user0)/float64(b.N)/1e3, "user-µs/op")
}
