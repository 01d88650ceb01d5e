package reserve_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// leaseChild reserves single permits (Reserve, no sleeping) from many
// goroutines on one hot key from the start time until the end time, and
// prints for each the slot Redis granted (server clock, Unix ns) and its
// number, then a last line "leases <granted> <handed> <lapsed> <held>
// <seq>", seq the key's last number read half a second after the end.
func leaseChild(s childSpec) error {
	opts, err := redis.ParseURL(s.Redis)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	// FailClosed and a long CallTimeout: a slow call on a loaded machine is
	// an error, not a local grant the accounting could not see.
	l, err := reserve.New(rdb, reserve.Options{KeyPrefix: s.Prefix, FailClosed: true, CallTimeout: 10 * time.Second})
	if err != nil {
		return err
	}
	time.Sleep(time.Until(time.Unix(0, s.Start)))
	end := time.Unix(0, s.End)
	lim := reserve.Limit{Rate: s.Rate, Burst: s.Burst}
	var (
		mu       sync.Mutex
		calls    [][2]int64
		firstErr error
		wg       sync.WaitGroup
	)
	for range s.Goroutines {
		wg.Go(func() {
			var mine [][2]int64
			defer func() {
				mu.Lock()
				calls = append(calls, mine...)
				mu.Unlock()
			}()
			for time.Now().Before(end) {
				r, err := l.Reserve(context.Background(), "shared", lim)
				if err != nil {
					mu.Lock()
					firstErr = cmpOr(firstErr, err)
					mu.Unlock()
					return
				}
				slot, ok := reserve.ServerSlot(r)
				if !ok {
					mu.Lock()
					firstErr = cmpOr(firstErr, fmt.Errorf("a reservation of the local fallback"))
					mu.Unlock()
					return
				}
				mine = append(mine, [2]int64{slot, reserve.SeqOf(r)})
			}
		})
	}
	wg.Wait()
	l.AwaitPrefetch("shared", lim) // a lease fetched ahead by the last hand-outs
	granted, handed, lapsed, held := l.LeaseCounts()
	// The key's last number, once every process's calls have returned
	// (read before the key expires, a second after its last write).
	time.Sleep(time.Until(end.Add(500 * time.Millisecond)))
	state, err := rdb.Get(context.Background(), s.Prefix+"{shared}").Result()
	if err != nil {
		return err
	}
	if err := l.Close(); err != nil {
		return err
	}
	last, err := reserve.StateSeq(state)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(os.Stdout)
	for _, c := range calls {
		fmt.Fprintln(w, c[0], c[1])
	}
	fmt.Fprintln(w, "leases", granted, handed, lapsed, held, last)
	if err := w.Flush(); err != nil {
		return err
	}
	return firstErr
}

// TestLeaseAcrossProcesses runs two OS processes of 32 goroutines each,
// reserving single permits on one key at 1,000,000/s with burst 1 (slots 1
// µs apart): the key is hot in both, and they lease. Asserted exactly: no
// slot and no number is granted twice; the slots of both processes
// together satisfy the window invariant (burst + rate*T in every interval
// T, on the server's clock, to the ns grid's rounding); and every number
// the key handed out is accounted for: the key's last number equals the
// admissions plus the leased slots that lapsed or were still held at
// Close. Logged: the admissions, the leases and the lapses.
func TestLeaseAcrossProcesses(t *testing.T) {
	// Mostly waiting, on a server of its own: beside the other parallel
	// tests (the package's time in CI).
	t.Parallel()
	s := redistest.New(t)
	const (
		procs      = 2
		goroutines = 32
		rate       = 1e6
		burst      = 1
		run        = 1500 * time.Millisecond
	)
	out := runProcesses(t, procs, childSpec{Redis: s.URL, Prefix: redistest.Prefix(t), Rate: rate, Burst: burst, Goroutines: goroutines, Lease: true}, run, nil)

	var (
		slots, seqs              []int64
		granted, lapsed, handed  int64
		last                     int64
		perChild, leasedPerChild [procs]int64
	)
	for i, lines := range out.Lines {
		var g, h, lp, held, seq int64
		_, err := fmt.Sscanf(lines[len(lines)-1], "leases %d %d %d %d %d", &g, &h, &lp, &held, &seq)
		require.NoError(t, err, "child %d: last line %q", i, lines[len(lines)-1])
		for _, line := range lines[:len(lines)-1] {
			var slot, seq int64
			scanLine(t, i, line, &slot, &seq)
			slots = append(slots, slot)
			seqs = append(seqs, seq)
		}
		if last != 0 && seq != last {
			t.Fatalf("the children read the key's last number as %d and %d: a call returned more than 500 ms after the end", last, seq)
		}
		last = seq
		perChild[i] = int64(len(lines) - 1)
		leasedPerChild[i] = g
		granted += g
		handed += h
		lapsed += lp + held
		require.Equal(t, g, h+lp+held, "child %d: leased slots = handed out + lapsed + held", i)
	}
	for i := range procs {
		require.NotZero(t, perChild[i], "child %d made no calls", i)
	}
	require.NotZero(t, granted, "no process leased: the test would prove nothing about leases")

	admissions := int64(len(seqs))
	require.Equal(t, last, admissions+lapsed,
		"the key granted %d numbers; admissions %d + lapsed or held %d = %d", last, admissions, lapsed, admissions+lapsed)

	slices.Sort(seqs)
	for i := 1; i < len(seqs); i++ {
		require.NotEqual(t, seqs[i-1], seqs[i], "number %d granted twice", seqs[i])
	}
	require.GreaterOrEqual(t, seqs[0], int64(1))
	require.LessOrEqual(t, seqs[len(seqs)-1], last)

	slices.Sort(slots)
	for i := 1; i < len(slots); i++ {
		require.NotEqual(t, slots[i-1], slots[i], "two calls were granted the same slot with burst 1")
	}
	// Slots lie on the ns grid, each at most 1 ns after its exact time:
	// allow rate*2ns.
	excess := worstExcess(slots, rate, burst)
	require.LessOrEqual(t, excess, rate*2e-9,
		"the slots granted to both processes break the window invariant: some interval T holds more than burst + rate*T")
	t.Logf("%d admissions %v from %d processes x %d goroutines in %v; leased %d slots %v (%d handed out, %d lapsed or held); worst excess %.4f permits",
		admissions, perChild, procs, goroutines, run, granted, leasedPerChild, handed, lapsed, excess)
}
