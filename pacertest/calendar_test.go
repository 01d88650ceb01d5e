package pacertest_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacer-go/pacer/pacertest"
	"github.com/pacer-go/pacer/reserve"
)

// A Gemini-like provider: 20 requests per day, the day from midnight to
// midnight in Los Angeles, a 429 for any request beyond. Three workers
// with endless demand, each Wait'ing on a calendar window of the same
// quota, for 100 days of the bubble's time from 2000-01-01 (across the
// change to daylight-saving time on 2000-04-02, a day of 23 hours): no
// request is refused and every whole day's quota is used.
func TestCalendarDailyQuota(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	synctest.Test(t, func(t *testing.T) {
		lim := pacertest.New(t, reserve.Options{})
		pol := reserve.Policy{{Name: "daily", Unit: "requests", Window: reserve.Window{N: n, Calendar: reserve.Day, Location: la}}}
		req := reserve.Request{Key: "gemini", Policy: pol, Cost: reserve.Cost{"requests": 1}}
		start := time.Now()
		end := start.Add(100 * 24 * time.Hour)
		var mu sync.Mutex
		perDay := map[string]int{}
		refused := 0
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				for {
					if err := lim.WaitN(context.Background(), req); err != nil {
						t.Error(err)
						return
					}
					now := time.Now()
					if !now.Before(end) {
						return
					}
					day := now.In(la).Format(time.DateOnly) // the provider's count
					mu.Lock()
					if perDay[day] >= n {
						refused++
					} else {
						perDay[day]++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if refused != 0 {
			t.Errorf("%d requests refused by the provider", refused)
		}
		// Every whole day in the run (the first starts at 16:00 on
		// 1999-12-31 in Los Angeles, the last ends after the run).
		days, short := 0, 0
		for d := time.Date(2000, 1, 1, 0, 0, 0, 0, la); d.Add(24 * time.Hour).Before(end); d = d.AddDate(0, 0, 1) {
			days++
			if got := perDay[d.Format(time.DateOnly)]; float64(got) < 0.99*n {
				short++
				t.Errorf("%s: %d of %d used", d.Format(time.DateOnly), got, n)
			}
		}
		if got := perDay["2000-04-02"]; got != n {
			t.Errorf("2000-04-02, 23 hours long: %d used", got)
		}
		t.Logf("%d whole days in Los Angeles, %d short of 99%% of %d, %d refused by the provider", days, short, n, refused)
	})
}
