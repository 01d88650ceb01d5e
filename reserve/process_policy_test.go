package reserve_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// testPolicy is what TestPolicyAcrossProcesses reserves: a call takes 1
// request and reserves 10 or 250 tokens. The three bands allow 100 calls
// of 100 tokens a second in the long run, each shaped its own way (a smooth
// bucket of requests, a bucket of tokens with a burst of 500, a quota of
// tokens per aligned 250 ms): small calls meet the requests band, large
// ones the tokens bands, so each band is the one that holds a call back at
// some moment.
var testPolicy = reserve.Policy{
	{Name: "requests", Limit: reserve.Limit{Rate: 100, Burst: 1}},
	{Name: "tokens", Limit: reserve.Limit{Rate: 10_000, Burst: 500}},
	{Name: "tokens-250ms", Unit: "tokens", Window: reserve.Window{N: 2_500, Length: 250 * time.Millisecond}},
}

// policyChild reserves testPolicy from many goroutines until the end and
// then, at once, settles each call's actual tokens (what it reserved for 6
// calls in 10, a random amount below that for 3) or cancels it (1 in 10). It prints one line per
// call kept: the slot Redis granted (Unix ns, server clock) and the actual
// tokens.
func policyChild(s childSpec) error {
	l, end, done, err := childLimiter(s)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()

	var (
		mu       sync.Mutex
		lines    []string
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		firstErr = cmpOr(firstErr, err)
		mu.Unlock()
	}
	for g := range s.Goroutines {
		rng := rand.New(rand.NewPCG(uint64(s.Start), uint64(os.Getpid()*100+g)))
		wg.Go(func() {
			for {
				maxWait := time.Until(end)
				if maxWait <= 0 {
					return
				}
				reserved := []int{10, 250}[rng.IntN(2)]
				r, err := l.TryReserveN(ctx, reserve.Request{Key: "shared", Policy: testPolicy, Cost: reserve.Cost{"requests": 1, "tokens": float64(reserved)}}, maxWait)
				if err != nil {
					var tooLong *reserve.WaitTooLongError
					if !errors.As(err, &tooLong) && !errors.Is(err, context.DeadlineExceeded) {
						fail(err)
					}
					return
				}
				slot, ok := reserve.ServerSlot(r)
				if !ok {
					fail(errors.New("a reservation of the local fallback (Redis failed?)"))
					return
				}
				// Settle and cancel do not wait for the slot: a call may
				// be settled before or after later reservations build on
				// it, both of which the invariant must survive.
				dice := rng.IntN(10)
				if dice == 0 {
					if err := r.Cancel(context.Background()); err != nil {
						fail(err)
						return
					}
					continue
				}
				actual := float64(reserved)
				if dice <= 3 {
					actual = float64(rng.IntN(reserved))
				}
				if err := r.Settle(context.Background(), reserve.Cost{"tokens": actual}); err != nil {
					fail(err)
					return
				}
				mu.Lock()
				lines = append(lines, fmt.Sprint(slot, " ", actual))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	w := bufio.NewWriter(os.Stdout)
	for _, line := range lines {
		fmt.Fprintln(w, line)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return firstErr
}

// TestPolicyAcrossProcesses runs two OS processes of 8 goroutines each on
// one key with a policy of three bands, settling calls' actual tokens at or
// below the estimate or cancelling them, over 3 s of slots. On the slots Redis granted
// (server clock) and the actual costs, it asserts each band's invariant
// exactly: at most burst + rate x T requests and tokens in any interval T,
// at most N tokens in each aligned 250 ms window. A settle or cancel gives
// back only what later reservations have not built on, so the tokens given
// back are reused without ever breaking a band, whichever process gave
// them back.
func TestPolicyAcrossProcesses(t *testing.T) {
	s := redistest.New(t)
	const procs, goroutines, run = 2, 8, 3 * time.Second
	out := runProcesses(t, procs, childSpec{Redis: s.URL, Prefix: redistest.Prefix(t), Goroutines: goroutines, Policy: true}, run, nil)

	type call struct {
		slot   int64
		tokens float64
	}
	var calls []call
	var perChild [procs]int
	for i, lines := range out.Lines {
		for _, line := range lines {
			var k call
			scanLine(t, i, line, &k.slot, &k.tokens)
			calls = append(calls, k)
		}
		perChild[i] = len(lines)
	}
	slices.SortFunc(calls, func(a, b call) int { return int(a.slot - b.slot) })
	slots := make([]int64, len(calls))
	tokens, requests := make([]float64, len(calls)), make([]float64, len(calls))
	windows := map[int64]float64{}
	var total float64
	for i, k := range calls {
		slots[i], tokens[i], requests[i] = k.slot, k.tokens, 1
		windows[k.slot/int64(250*time.Millisecond)] += k.tokens
		total += k.tokens
	}
	// Slots sit on a ns grid, rounded up: allow each bucket 1 µs of its rate.
	req, tok := testPolicy[0].Limit, testPolicy[1].Limit
	reqExcess := weightedExcess(slots, requests, req.Rate, float64(req.Burst))
	tokExcess := weightedExcess(slots, tokens, tok.Rate, float64(tok.Burst))
	fullest := 0.0
	for _, v := range windows {
		fullest = max(fullest, v)
	}
	t.Logf("%d calls kept %v, %.0f tokens; worst excess over burst + rate x T: requests %.6f, tokens %.6f; fullest 250 ms window %.0f of %g",
		len(calls), perChild, total, reqExcess, tokExcess, fullest, testPolicy[2].Window.N)
	require.LessOrEqual(t, reqExcess, req.Rate*1e-6, "the requests band let more than burst + rate x T into some interval")
	require.LessOrEqual(t, tokExcess, tok.Rate*1e-6, "the tokens bucket let more than burst + rate x T into some interval")
	require.LessOrEqual(t, fullest, testPolicy[2].Window.N+1e-6, "a 250 ms window got more than its quota")
}

// weightedExcess returns the largest sum of amounts - (burst + rate*T) over
// every interval [t_i, t_j] of the sorted slots, in O(n): for a fixed j it
// is (S_j - rate*t_j) + max over i <= j of (rate*t_i - S_(i-1)) - burst,
// with S the prefix sums.
func weightedExcess(slots []int64, amounts []float64, rate, burst float64) float64 {
	worst, best, prefix := -burst, -1e300, 0.0
	for j, c := range slots {
		tj := float64(c-slots[0]) / 1e9
		best = max(best, rate*tj-prefix)
		prefix += amounts[j]
		worst = max(worst, prefix-rate*tj+best-burst)
	}
	return worst
}
