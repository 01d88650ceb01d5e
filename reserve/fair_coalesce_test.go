package reserve_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fair requests coalesced (issue 43): a key's fair queues in one process
// share the fair script's calls, one batch per queue in each, as FIFO
// requests share reserve.lua's (coalesce_test.go).

// TestFairCoalesced: 300 tenants' requests queued on one key behind a fair
// call in flight are booked by the fewest calls MaxBatch allows: the held
// call, then ceil(299 / MaxBatch) more. Before, each tenant's queue had a
// pump of its own, which made a call of its own: 300.
func TestFairCoalesced(t *testing.T) {
	ctx := context.Background()
	l, g, _ := gated(t, tunedClient(t, redistest.New(t)))
	lim := reserve.Limit{Rate: 1e6, Burst: 1000}
	const n = 300
	entered, release := g.arm()
	defer release()
	res := make(chan outcome, n)
	for i := range n {
		go func() {
			req := reserve.Single("k", lim, 1)
			req.Tenant = "t" + strconv.Itoa(i)
			r, err := l.ReserveN(ctx, req)
			res <- outcome{r, err}
		}()
		if i == 0 {
			<-entered
		}
	}
	var got []outcome
	require.Eventually(t, func() bool {
		for len(res) > 0 {
			got = append(got, <-res)
		}
		return l.FairWaiting("k")+len(got) == n-1
	}, 10*time.Second, time.Millisecond, "the other requests queue or are served")
	release()
	for len(got) < n {
		got = append(got, <-res)
	}
	for _, o := range got {
		require.NoError(t, o.err)
		require.NotNil(t, o.r)
	}
	assert.EqualValues(t, 1+(n-1+reserve.MaxBatch-1)/reserve.MaxBatch, g.scripts.Load(), "script calls")
}

// TestFairGroupsAsCalls: one call of the fair script for several queues'
// batches serves each exactly as calls of their own, one after the other,
// would: the same slots and the same retries, over random tenants, lanes,
// weights and batch sizes (two prefixes of one Redis, on one clock).
func TestFairGroupsAsCalls(t *testing.T) {
	opts := reserve.Options{MinShare: map[reserve.Lane]float64{reserve.Batch: 0.1}}
	t.Run("Redis", func(t *testing.T) {
		// The keys' TTLs run on Redis's own clock, not the fake ones: a
		// key left alone for over a second of real time (CI beside a CPU
		// hog: a slot 2 ms off in round 146) expires, and the twins'
		// histories part. Such a run proves nothing: it is run again (up
		// to five times, on a server of its own, whose expired keys are
		// this test's); a mismatch on a run with no key expired fails.
		s := redistest.NewProcess(t)
		const attempts = 5
		for attempt := 1; ; attempt++ {
			expired := expiredKeys(t, s.Client)
			one, clk1 := fairLimiterOn(t, s, opts)
			each, clk2 := fairLimiterOn(t, s, opts)
			err := fairGroupsAsCalls(t, one, each, clk1, clk2)
			if err == nil {
				return
			}
			n := expiredKeys(t, s.Client) - expired
			switch {
			case n == 0:
				t.Fatalf("attempt %d: %v (no key expired on the server meanwhile)", attempt, err)
			case attempt == attempts:
				t.Skipf("attempt %d: %v; in each of %d runs keys expired on the server's clock: the machine is too loaded for this check", attempt, err, attempts)
			default:
				t.Logf("attempt %d: %v; but %d keys expired on the server meanwhile (the real clock): again", attempt, err, n)
			}
		}
	})
	t.Run("Local", func(t *testing.T) {
		// The local fallback runs the same script on its own store.
		one, clk1 := localFairLimiter(t, opts)
		each, clk2 := localFairLimiter(t, opts)
		if err := fairGroupsAsCalls(t, one, each, clk1, clk2); err != nil {
			t.Fatal(err)
		}
	})
}

// fairGroupsAsCalls runs TestFairGroupsAsCalls's rounds on one (a call for
// the groups) and each (a call per group), and returns the first
// difference.
func fairGroupsAsCalls(t *testing.T, one, each *reserve.Limiter, clk1, clk2 *fakeclock.Clock) error {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(43, 3))
	lim := reserve.Limit{Rate: 200, Burst: 3}
	lanes := []reserve.Lane{reserve.Urgent, reserve.Normal, reserve.Batch}
	for round := range 200 {
		var groups []reserve.FairGroup
		for range 1 + rng.IntN(6) {
			req := reserve.Single("g", lim, 1+rng.IntN(2))
			req.Tenant = "t" + strconv.Itoa(rng.IntN(5))
			req.Lane = lanes[rng.IntN(3)]
			req.Weight = float64(1 + rng.IntN(3))
			groups = append(groups, reserve.FairGroup{Req: req, N: 1 + rng.IntN(3), Last: rng.IntN(3) > 0})
		}
		slots, retries, err := reserve.FairAskGroups(ctx, one, groups)
		require.NoError(t, err)
		for i, g := range groups {
			want, retry, err := reserve.FairAsk(ctx, each, g.Req, g.N, g.Last)
			require.NoError(t, err)
			msg := fmt.Sprintf("round %d, group %d of %d (%s, lane %v)", round, i, len(groups), g.Req.Tenant, g.Req.Lane)
			if !slices.Equal(want, slots[i]) {
				return fmt.Errorf("%s: slots %v, want %v", msg, slots[i], want)
			}
			if !retry.Equal(retries[i]) {
				return fmt.Errorf("%s: retry %v, want %v", msg, retries[i], retry)
			}
		}
		d := time.Duration(rng.IntN(20)) * time.Millisecond
		clk1.Advance(d)
		clk2.Advance(d)
	}
	return nil
}

// TestFairCallsCarryTheirReach: on a key whose horizon holds a few slots,
// a pump's call carries the queues that can book and a few more, not
// every queue (a call that carried 50 tenants' queues took 2.8 ms of
// Redis to book one or two slots, and the slots it booked were then late),
// and the bookings stay in the tenants' turns: with equal weights, every
// prefix of the slots keeps each tenant's count within 3 of every other's
// (the first call's 3, then turns).
func TestFairCallsCarryTheirReach(t *testing.T) {
	const tenants, each = 40, 5
	got, most := heldFairCalls(t, reserve.Options{}, tenants*each, func(i int) reserve.Request {
		req := reserve.Single("k", reserve.Limit{Rate: 1000, Burst: 1}, 1)
		req.Tenant = "t" + strconv.Itoa(i%tenants)
		return req
	})
	// reach at 1,000/s, burst 1: (1 + 2 ms * 1,000) + 1 = 4 requests.
	assert.LessOrEqual(t, most, int64(4+reserve.FairSlack), "queues in one call")
	assert.Positive(t, most, "fair calls seen")
	// The first call finds no tenant waiting: its first queue books what
	// the horizon holds (3 slots), and from then on every tenant waits.
	counts := map[string]int{}
	for i, b := range got {
		counts[b.req.Tenant]++
		lo, hi := each, 0
		for k := range tenants {
			n := counts["t"+strconv.Itoa(k)]
			lo, hi = min(lo, n), max(hi, n)
		}
		require.LessOrEqual(t, hi-lo, 3, "after %d slots: counts %v", i+1, counts)
	}
}

// TestFairCallsCarryEveryLane: a call that cannot carry every queue still
// carries each lane's first, so that a lower lane's minimum share holds
// behind a flood of a higher lane's tenants: 30 urgent tenants' 120
// requests and one Batch tenant's 10, MinShare 0.25 for Batch (a slot
// every 4 ms of the server's clock while the urgent tenants wait, more
// before they do). The Batch tenant's 10 slots all come before the urgent
// tenants' last; a selection by the pump's turns alone put them after the
// 120 urgent ones. Where among the slots they come depends on the
// machine's speed (the share is counted in time, and the calls' order in
// when they return): within the first 15 to 31 on a quiet machine, 33
// under CI's load; a selection that carries the Batch queue only in its
// turn among the queues carried least recently gave 32 to 42, so this
// cannot tell it from the rule: TestFairSelectCarriesEveryLane checks
// the selection itself, exactly.
func TestFairCallsCarryEveryLane(t *testing.T) {
	const urgent, each, batch = 30, 4, 10
	opts := reserve.Options{MinShare: map[reserve.Lane]float64{reserve.Batch: 0.25}}
	got, most := heldFairCalls(t, opts, urgent*each+batch, func(i int) reserve.Request {
		req := reserve.Single("k", reserve.Limit{Rate: 1000, Burst: 1}, 1)
		if i < urgent*each {
			req.Tenant, req.Lane = "u"+strconv.Itoa(i%urgent), reserve.Urgent
		} else {
			req.Tenant, req.Lane = "b", reserve.Batch
		}
		return req
	})
	assert.LessOrEqual(t, most, int64(4+reserve.FairSlack), "queues in one call")
	lastBatch, lastUrgent, seen := -1, -1, 0
	for i, b := range got {
		if b.req.Lane == reserve.Batch {
			seen++
			lastBatch = i
		} else {
			lastUrgent = i
		}
	}
	require.Equal(t, batch, seen, "the Batch tenant's slots")
	t.Logf("the Batch tenant's last slot: %d of %d", lastBatch+1, len(got))
	assert.Less(t, lastBatch, lastUrgent, "the Batch tenant's last slot comes before the urgent tenants' last")
}

// fairBooked is a fair request and the slot ReserveN gave it.
type fairBooked struct {
	req reserve.Request
	at  time.Time
}

// heldFairCalls makes n fair ReserveN on a Limiter of opts on a Redis of
// their own, request(i) the i-th, all queued behind a first call held
// until they are, and returns what each booked, by slot, and the most
// queues a call of the fair script carried.
func heldFairCalls(t *testing.T, opts reserve.Options, n int, request func(i int) reserve.Request) ([]fairBooked, int64) {
	t.Helper()
	ctx := context.Background()
	c := tunedClient(t, redistest.New(t))
	g := &gate{}
	c.AddHook(g)
	groups := &fairGroupCounter{}
	c.AddHook(groups)
	opts.KeyPrefix, opts.Logger = redistest.Prefix(t), quiet
	l, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, l)
	res := make(chan fairBooked, n)
	errs := make(chan error, n)
	entered, release := g.arm()
	defer release()
	for i := range n {
		go func() {
			req := request(i)
			r, err := l.ReserveN(ctx, req)
			if err != nil {
				errs <- err
				return
			}
			res <- fairBooked{req, r.Time()}
		}()
		if i == 0 {
			<-entered // the first call is held until every request queued
		}
	}
	require.Eventually(t, func() bool { return l.FairWaiting("k") == n-1 }, 10*time.Second, time.Millisecond)
	release()
	var got []fairBooked
	for len(got) < n {
		select {
		case b := <-res:
			got = append(got, b)
		case err := <-errs:
			t.Fatal(err)
		}
	}
	slices.SortFunc(got, func(a, b fairBooked) int { return a.at.Compare(b.at) })
	return got, groups.most.Load()
}

// fairGroupCounter records the most queues (spec and tenant pairs) one
// call of the fair script carried.
type fairGroupCounter struct {
	passHook
	most atomic.Int64
}

func (h *fairGroupCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := fairGroups(cmd); int64(n) > h.most.Load() {
			h.most.Store(int64(n)) // (one pump: calls do not overlap)
		}
		return next(ctx, cmd)
	}
}

// fairSpec matches a fair script's spec argument (lua/fair.lua).
var fairSpec = regexp.MustCompile(`^[123] \S+ \S+ \S+ [01] \S+ \d+ \d+ \S+( \d+)?$`)

// fairGroups is how many queues cmd, a call of the fair script, carries;
// 0 for any other command.
func fairGroups(cmd redis.Cmder) int {
	if name := cmd.Name(); name != "evalsha" && name != "eval" {
		return 0
	}
	n := 0
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && fairSpec.MatchString(s) {
			n++
		}
	}
	return n
}
