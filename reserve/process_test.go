package reserve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// childMain reserves and sleeps (what Wait does) from many goroutines on one
// key, from the start time until the end time, and prints for each call the
// slot Redis granted (server clock) and the local time it woke, in Unix ns,
// and how long after the slot's place on the local clock (Reservation.Time)
// it woke, on the monotonic clock.
func childMain(s childSpec) error {
	l, end, done, err := childLimiter(s)
	if err != nil {
		return err
	}
	defer done()
	lim := reserve.Limit{Rate: s.Rate, Burst: s.Burst}

	var (
		mu       sync.Mutex
		calls    [][3]int64
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		firstErr = cmpOr(firstErr, err)
		mu.Unlock()
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	for range s.Goroutines {
		wg.Go(func() {
			for {
				maxWait := time.Until(end)
				if maxWait <= 0 {
					return // the run is over (TryReserveN refuses a maxWait <= 0)
				}
				r, err := l.TryReserveN(ctx, reserve.Single("shared", lim, 1), maxWait)
				if err != nil {
					var tooLong *reserve.WaitTooLongError
					if !errors.As(err, &tooLong) && !errors.Is(err, context.DeadlineExceeded) {
						fail(err)
					}
					return
				}
				if err := r.Sleep(ctx); err != nil {
					// At the end of the run a sleeper that woke too late
					// finds no fresh slot before the deadline.
					var tooLong *reserve.WaitTooLongError
					if !errors.Is(err, context.DeadlineExceeded) && !errors.As(err, &tooLong) {
						fail(err)
					}
					return
				}
				now := time.Now()
				woke, late := now.UnixNano(), int64(now.Sub(r.Time()))
				slot, ok := reserve.ServerSlot(r)
				if !ok {
					fail(fmt.Errorf("a reservation of the local fallback (Redis failed?)"))
					return
				}
				mu.Lock()
				calls = append(calls, [3]int64{slot, woke, late})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	w := bufio.NewWriter(os.Stdout)
	for _, c := range calls {
		fmt.Fprintln(w, c[0], c[1], c[2])
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return firstErr
}

// TestServerTimeAcrossProcesses runs two OS processes of 16 goroutines each,
// reserving and sleeping on one key at 500/s with burst 1, using Redis
// server time.
//
// It asserts what holds exactly, however busy the machine: the slots Redis
// granted to both processes together (on the server's clock) satisfy the
// window invariant, burst + rate*T in every interval T, so the processes
// share one bucket (two buckets would put twice that in some windows); no
// slot number is granted twice; no caller woke before its slot's place on
// its local clock (Reservation.Time; the monotonic clock); and none woke
// more than reserve.MaxEarly before its slot on the server's clock (server
// and processes share the machine's clock: with steady clocks none wakes
// before it at all, and how many did is logged). When the callers woke is timing:
// the reply's trip and the scheduler's delays move every call later, by
// more on a loaded machine. The test logs those figures (busiest windows,
// mean rate, the excess of the wake-up times over the invariant) and asserts
// none of them; cmd/pacerbench measures them properly.
func TestServerTimeAcrossProcesses(t *testing.T) {
	// Mostly waiting, on a server of its own: beside the other parallel
	// tests (the package's time in CI).
	t.Parallel()
	s := redistest.New(t)
	const (
		procs      = 2
		goroutines = 16
		rate       = 500
		burst      = 1
		run        = 4 * time.Second
	)
	out := runProcesses(t, procs, childSpec{Redis: s.URL, Prefix: redistest.Prefix(t), Rate: rate, Burst: burst, Goroutines: goroutines}, run, nil)

	var (
		slots, wakes []int64
		perChild     [procs]int
		early        int           // wake-ups before the slot on the server's clock
		mostEarly    time.Duration // the earliest of them
	)
	for i, lines := range out.Lines {
		for _, line := range lines {
			var slot, woke, late int64
			scanLine(t, i, line, &slot, &woke, &late)
			if late < 0 {
				t.Errorf("child %d woke %v before its slot's local time (server slot %d)", i, time.Duration(-late), slot)
			}
			if woke < slot {
				early++
				mostEarly = max(mostEarly, time.Duration(slot-woke))
				if time.Duration(slot-woke) > reserve.MaxEarly {
					t.Errorf("child %d woke %v before its server slot %d, more than MaxEarly", i, time.Duration(slot-woke), slot)
				}
			}
			slots = append(slots, slot)
			wakes = append(wakes, woke)
		}
		perChild[i] = len(lines)
	}
	slices.Sort(slots)
	for i := 1; i < len(slots); i++ {
		require.NotEqual(t, slots[i-1], slots[i], "two calls were granted the same slot with burst 1")
	}
	// Slots are whole µs apart at most 1 µs late of the exact schedule:
	// allow rate*1µs.
	slotExcess := worstExcess(slots, rate, burst)
	require.LessOrEqual(t, slotExcess, rate*1e-6,
		"the slots granted to both processes break the window invariant: some interval T holds more than burst + rate*T")

	slices.Sort(wakes)
	n := len(wakes)
	span := time.Duration(wakes[n-1] - wakes[0])
	from, to := wakes[0]+int64(500*time.Millisecond), wakes[n-1]-int64(500*time.Millisecond)
	inside := 0
	for _, c := range wakes {
		if c >= from && c < to {
			inside++
		}
	}
	excess := worstExcess(wakes, rate, burst)
	t.Logf("%d calls (%v) from %d processes x %d goroutines in %v; slots: busiest 100 ms %d, worst excess over burst+rate*T %.4f permits (exact); "+
		"wake-ups (timing, not asserted): mean rate %.2f/s (limit %d/s), busiest 100 ms %d, busiest 1 s %d, worst excess %.2f permits (%.2f ms of lateness), "+
		"%d before their slot on the server's clock, the earliest by %v (MaxEarly %v)",
		n, perChild, procs, goroutines, span.Round(time.Millisecond), busiest(slots, 100*time.Millisecond), slotExcess,
		float64(inside)/time.Duration(to-from).Seconds(), rate,
		busiest(wakes, 100*time.Millisecond), busiest(wakes, time.Second), excess, excess/rate*1000,
		early, mostEarly, reserve.MaxEarly)
}

// worstExcess returns the largest count - (burst + rate*T) over every window
// [t_i, t_j] of the sorted call times, in O(n): for a fixed j the excess is
// (j+1 - rate*t_j) + max over i <= j of (rate*t_i - i) - burst.
func worstExcess(calls []int64, rate float64, burst int) float64 {
	worst := -float64(burst)
	best := -1e300
	for j, c := range calls {
		tj := float64(c-calls[0]) / 1e9
		best = max(best, rate*tj-float64(j))
		worst = max(worst, float64(j+1)-rate*tj+best-float64(burst))
	}
	return worst
}

// busiest returns the most calls in any window of length w.
func busiest(calls []int64, w time.Duration) int {
	most, i := 0, 0
	for j := range calls {
		for calls[j]-calls[i] >= int64(w) {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}
