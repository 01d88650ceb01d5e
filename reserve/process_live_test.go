package reserve_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestLiveChangeAcrossProcesses: 3 OS processes of 8 goroutines pace one key
// at the 50/s (burst 5) their code passes. An operator then stores 100/s
// (burst 5), then 20/s (burst 2), then puts 10/s in shadow mode (the code's
// 50/s again). On the slots Redis granted (server clock), exactly:
//
//   - raised: from the change on, no interval T holds more than the new
//     burst + rate x T (the old queue, slower, included);
//   - lowered: the old queue drains at the old limit, and from the end of
//     the longest queue possible (each goroutine holds one reservation at
//     most: 24 at 100/s, 240 ms) every interval keeps the new limit;
//   - shadow: the code's limit is enforced, and the shadow figures count
//     calls the stored limit would have delayed.
//
// How fast the rate follows is printed, not asserted:
//
//	go test -count=1 -run TestLiveChangeAcrossProcesses -v ./reserve
func TestLiveChangeAcrossProcesses(t *testing.T) {
	// Mostly waiting, on a server of its own: beside the other parallel
	// tests (the package's time in CI).
	t.Parallel()
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	const procs, goroutines = 3, 8
	code := reserve.Limit{Rate: 50, Burst: 5}
	const phase = 2 * time.Second
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	type change struct {
		lim    reserve.Limit
		shadow bool
		at     time.Time // Redis's clock, ms
	}
	changes := []change{{lim: reserve.Limit{Rate: 100, Burst: 5}}, {lim: reserve.Limit{Rate: 20, Burst: 2}}, {lim: reserve.Limit{Rate: 10, Burst: 1}, shadow: true}}
	// The shadow phase is twice as long: its first second drains the 20/s
	// queue.
	out := runProcesses(t, procs, childSpec{Redis: s.URL, Prefix: prefix, Rate: code.Rate, Burst: code.Burst, Goroutines: goroutines}, 5*phase,
		func(start, _ time.Time) {
			for i := range changes {
				time.Sleep(time.Until(start.Add(time.Duration(i+1) * phase)))
				ch, err := a.SetLimit(ctx, "shared", changes[i].lim.Policy(), changes[i].shadow, "test", fmt.Sprint("phase ", i+1))
				require.NoError(t, err)
				changes[i].at = ch.At
			}
		})
	start, end := out.Start, out.End
	var slots []int64
	for i, lines := range out.Lines {
		for _, line := range lines {
			var slot, woke int64
			scanLine(t, i, line, &slot, &woke)
			slots = append(slots, slot)
		}
	}
	slices.Sort(slots)
	require.NotEmpty(t, slots)

	// between returns the slots in [from, to).
	between := func(from, to time.Time) []int64 {
		i, _ := slices.BinarySearch(slots, from.UnixNano())
		j, _ := slices.BinarySearch(slots, to.UnixNano())
		return slots[i:j]
	}
	excess := func(part []int64, lim reserve.Limit) float64 {
		ones := make([]float64, len(part))
		for i := range ones {
			ones[i] = 1
		}
		// Slots sit on a ns grid, rounded up: allow 1 µs of the rate.
		return weightedExcess(part, ones, lim.Rate, float64(lim.Burst)) - lim.Rate*1e-6
	}
	ms := time.Millisecond
	raise, lower, shadow := changes[0], changes[1], changes[2]
	maxQueue := func(lim reserve.Limit) time.Duration {
		return time.Duration(float64(procs*goroutines) / lim.Rate * float64(time.Second))
	}
	checks := []struct {
		what     string
		from, to time.Time
		lim      reserve.Limit
	}{
		{"the code's 50/s", start, raise.at, code},
		{"raised to 100/s, from the change on", raise.at, lower.at, raise.lim},
		{"lowered: the old queue, at 100/s", lower.at, shadow.at, raise.lim},
		{"lowered to 20/s, after the longest old queue", lower.at.Add(maxQueue(raise.lim) + ms), shadow.at, lower.lim},
		{"10/s in shadow: the code's 50/s enforced", shadow.at.Add(maxQueue(lower.lim) + ms), end, code},
	}
	for _, c := range checks {
		part := between(c.from, c.to)
		require.NotEmpty(t, part, c.what)
		require.LessOrEqual(t, excess(part, c.lim), 0.0, "%s: more than burst + rate x T in some interval", c.what)
	}

	// The figures: calls per 250 ms around each change, and the time until
	// a whole second held 90% of the new rate.
	for _, c := range changes {
		var line strings.Builder
		for k := -2; k < 6; k++ {
			from := c.at.Add(time.Duration(k) * 250 * ms)
			fmt.Fprintf(&line, " %d", len(between(from, from.Add(250*ms))))
		}
		want := c.lim
		if c.shadow {
			want = code
		}
		reached := "never"
		for d := time.Duration(0); c.at.Add(d + time.Second).Before(end); d += 10 * ms {
			if float64(len(between(c.at.Add(d), c.at.Add(d+time.Second)))) >= 0.9*want.Rate {
				reached = fmt.Sprint(d)
				break
			}
		}
		t.Logf("set %g/s burst %d (shadow %v): calls per 250 ms from 0.5 s before:%s; 90%% of %g/s held over 1 s from %s after",
			c.lim.Rate, c.lim.Burst, c.shadow, line.String(), want.Rate, reached)
	}
	st, err := a.Status(ctx, "shared")
	require.NoError(t, err)
	require.NotNil(t, st.ShadowFigures)
	sf := *st.ShadowFigures
	t.Logf("shadow 10/s over the last phase: %d calls, %d would have waited, mean %v, max %v", sf.Calls, sf.Delayed, sf.MeanWait, sf.MaxWait)
	require.Greater(t, sf.Calls, int64(0), "shadow calls")
	require.Greater(t, sf.Delayed, int64(0), "50/s of calls against a shadow 10/s: some would have waited")
	require.LessOrEqual(t, sf.Delayed, sf.Calls)
}
