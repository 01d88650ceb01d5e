package reserve_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The child side of TestServerTimeAcrossProcesses: the test binary re-run
// with PACER_CHILD set runs childMain instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("PACER_CHILD") != "" {
		if err := childMain(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// childMain calls Wait from many goroutines on one key, from the start time
// until the end time, and prints the local time each call returned.
func childMain() error {
	env := func(k string) int64 {
		v, _ := strconv.ParseInt(os.Getenv(k), 10, 64)
		return v
	}
	opts, err := redis.ParseURL(os.Getenv("PACER_CHILD_REDIS"))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: os.Getenv("PACER_CHILD_PREFIX")})
	if err != nil {
		return err
	}
	defer l.Close()
	lim := reserve.Limit{Rate: float64(env("PACER_CHILD_RATE")), Burst: int(env("PACER_CHILD_BURST"))}
	start, end := time.Unix(0, env("PACER_CHILD_START")), time.Unix(0, env("PACER_CHILD_END"))
	time.Sleep(time.Until(start))

	var (
		mu       sync.Mutex
		calls    []int64
		firstErr error
		wg       sync.WaitGroup
	)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	for range env("PACER_CHILD_GOROUTINES") {
		wg.Go(func() {
			for {
				err := l.Wait(ctx, "shared", lim)
				if err != nil {
					var tooLong *reserve.WaitTooLongError
					if !errors.As(err, &tooLong) && !errors.Is(err, context.DeadlineExceeded) {
						mu.Lock()
						firstErr = cmpOr(firstErr, err)
						mu.Unlock()
					}
					return
				}
				now := time.Now().UnixNano()
				mu.Lock()
				calls = append(calls, now)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	w := bufio.NewWriter(os.Stdout)
	for _, c := range calls {
		fmt.Fprintln(w, c)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return firstErr
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestServerTimeAcrossProcesses runs two OS processes of 16 goroutines each,
// calling Wait on one key at 500/s with burst 1, using Redis server time.
//
// The slots Redis hands out satisfy the window invariant exactly (see the
// property test). A call returns at its slot plus a lateness: the reply's
// trip back, the timer's and the scheduler's delay. Lateness only moves calls
// later, so the calls in any window [a, a+T] had their slots in
// [a-δ, a+T] and number at most burst + rate*(T+δ), where δ is the largest
// lateness. The test allows δ = 20 ms: Go timers on a loaded 2-core machine
// under -race wake within a few ms; 20 ms leaves room for a GC pause or a
// descheduled process without letting a broken limiter through (a limiter
// that ignored the other process would put 2x the rate in every window). It
// logs the worst excess it saw, the busiest 100 ms and 1 s windows and the
// mean rate (over the run less its first and last half second), which must
// be within 1% of the limit.
func TestServerTimeAcrossProcesses(t *testing.T) {
	s := redistest.New(t)
	const (
		procs      = 2
		goroutines = 16
		rate       = 500
		burst      = 1
		run        = 4 * time.Second
		delta      = 20 * time.Millisecond
	)
	exe, err := os.Executable()
	require.NoError(t, err)
	start := time.Now().Add(time.Second) // time for the children to start
	end := start.Add(run)
	prefix := redistest.Prefix(t)

	var (
		mu    sync.Mutex
		calls []int64
		wg    sync.WaitGroup
	)
	for i := range procs {
		cmd := exec.Command(exe, "-test.run=^$")
		cmd.Env = append(os.Environ(),
			"PACER_CHILD=1",
			"PACER_CHILD_REDIS="+s.URL,
			"PACER_CHILD_PREFIX="+prefix,
			"PACER_CHILD_RATE="+strconv.Itoa(rate),
			"PACER_CHILD_BURST="+strconv.Itoa(burst),
			"PACER_CHILD_GOROUTINES="+strconv.Itoa(goroutines),
			"PACER_CHILD_START="+strconv.FormatInt(start.UnixNano(), 10),
			"PACER_CHILD_END="+strconv.FormatInt(end.UnixNano(), 10),
		)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Start())
		wg.Go(func() {
			err := cmd.Wait()
			if err != nil {
				t.Errorf("child %d: %v\n%s", i, err, stderr.String())
				return
			}
			var got []int64
			sc := bufio.NewScanner(&stdout)
			for sc.Scan() {
				v, err := strconv.ParseInt(sc.Text(), 10, 64)
				if err != nil {
					t.Errorf("child %d: bad line %q", i, sc.Text())
					return
				}
				got = append(got, v)
			}
			if len(got) == 0 {
				t.Errorf("child %d made no calls", i)
			}
			mu.Lock()
			calls = append(calls, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	slices.Sort(calls)
	n := len(calls)
	span := time.Duration(calls[n-1] - calls[0])
	// The mean rate of the steady state: the calls in the run less its
	// first and last half second, where a process starting or stopping late
	// on a loaded machine would move it.
	from, to := calls[0]+int64(500*time.Millisecond), calls[n-1]-int64(500*time.Millisecond)
	inside := 0
	for _, c := range calls {
		if c >= from && c < to {
			inside++
		}
	}
	mean := float64(inside) / time.Duration(to-from).Seconds()
	excess := worstExcess(calls, rate, burst)
	t.Logf("%d calls from %d processes x %d goroutines in %v: mean rate %.2f/s (limit %d/s); busiest 100 ms: %d, busiest 1 s: %d; worst window exceeds burst+rate*T by %.2f permits (%.2f ms of lateness)",
		n, procs, goroutines, span.Round(time.Millisecond), mean, rate,
		busiest(calls, 100*time.Millisecond), busiest(calls, time.Second), excess, excess/rate*1000)
	require.InEpsilon(t, float64(rate), mean, 0.01, "mean rate")
	require.LessOrEqual(t, excess, rate*delta.Seconds(),
		"some window holds more than burst + rate*(T + %v) calls", delta)
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
