package reserve_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// BenchmarkReserve measures one Reserve (one script call, no sleeping) on a
// real Redis: on one hot key and spread over 10,000 keys, from 16 goroutines
// at once (parallel) and from one (serial).
//
//	go test -run '^$' -bench BenchmarkReserve -benchtime 2s ./reserve/
func BenchmarkReserve(b *testing.B) {
	s := redistest.New(b)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1e6, Burst: 1000}
	for _, keys := range []int{1, 10000} {
		names := make([]string, keys)
		for i := range names {
			names[i] = "bench" + strconv.Itoa(i)
		}
		b.Run("keys="+strconv.Itoa(keys)+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.SetParallelism(8) // 8 x GOMAXPROCS goroutines
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
		})
		b.Run("keys="+strconv.Itoa(keys)+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				if _, err := l.Reserve(ctx, names[i%keys], lim, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
