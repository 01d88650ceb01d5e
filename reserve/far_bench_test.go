package reserve_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// BenchmarkFarSleep measures sleepers on a Redis far away: a proxy adds
// half the round trip to each command and half to each reply (rtt=1ms,
// 5ms, 20ms), and 20 goroutines make 10 Reserve+Sleep each on one key at
// 500/s, burst 1, with the quick start's client and default Options. Per
// round of 200 calls it reports moved/call, the moves for lateness per
// call, and the p50, p99 and max of how long after its final slot each
// call fired (ms). docs/measurements.md, "A Redis far away".
//
//	go test -run '^$' -bench BenchmarkFarSleep -benchtime 2x ./reserve/
func BenchmarkFarSleep(b *testing.B) {
	for _, rtt := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond} {
		b.Run("rtt="+rtt.String(), func(b *testing.B) {
			rec := newRecorder()
			l, _ := farLimiter(b, rtt, reserve.Options{Metrics: rec})
			ctx := context.Background()
			lim := reserve.Limit{Rate: 500, Burst: 1}
			var lates []time.Duration
			round := 0
			for b.Loop() {
				round++
				key := "far" + strconv.Itoa(round)
				var mu sync.Mutex
				var wg sync.WaitGroup
				for range 20 {
					wg.Go(func() {
						for range 10 {
							r, err := l.Reserve(ctx, key, lim)
							if err == nil {
								err = r.Sleep(ctx)
							}
							if err != nil {
								b.Error(err)
								return
							}
							late := time.Since(r.Time())
							mu.Lock()
							lates = append(lates, late)
							mu.Unlock()
						}
					})
				}
				wg.Wait()
			}
			if len(lates) == 0 {
				return
			}
			moved := 0
			for _, m := range rec.snapshot().moved {
				if m == reserve.MovedLate {
					moved++
				}
			}
			slices.Sort(lates)
			ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
			b.ReportMetric(float64(moved)/float64(len(lates)), "moved/call")
			b.ReportMetric(ms(lates[len(lates)/2]), "p50-late-ms")
			b.ReportMetric(ms(lates[len(lates)*99/100]), "p99-late-ms")
			b.ReportMetric(ms(lates[len(lates)-1]), "max-late-ms")
		})
	}
}
