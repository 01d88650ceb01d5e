package wake

import (
	"context"
	"syscall"
	"testing"
	"time"
)

// BenchmarkLoneSleep is a sleeper alone in the process, as a cold key's
// Wait usually is: each sleep of 3 ms ends on the shared precise timer
// (Sleeper{Margin: DefaultMargin}) or on Go's timer alone (Margin -1, the reference). It
// reports the process's CPU per sleep, all of it and in the kernel.
//
//	go test -run '^$' -bench BenchmarkLoneSleep -benchtime 2000x ./internal/wake/
func BenchmarkLoneSleep(b *testing.B) {
	for _, c := range []struct {
		name string
		s    Sleeper
	}{{"precise", Sleeper{Margin: DefaultMargin}}, {"go-timer", Sleeper{Margin: -1}}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			cpu0, sys0 := processCPU()
			for b.Loop() {
				_ = c.s.Sleep(ctx, time.Now().Add(3*time.Millisecond))
			}
			cpu1, sys1 := processCPU()
			b.ReportMetric(float64(cpu1-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
			b.ReportMetric(float64(sys1-sys0)/float64(b.N)/1e3, "sys-µs/op")
		})
	}
}

// processCPU returns the process's CPU time, all of it and in the kernel.
func processCPU() (all, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}
