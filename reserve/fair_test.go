package reserve_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fair rule (lua/fair.lua) judged on its slots: a simulation drives the
// fair script on a real Redis with a client clock, as the tenants' pumps
// would (each asks for its queue's head, and asks again when told), with
// a fixed round trip per call, and the tests check exact properties of the
// slots booked: the limit, the weighted shares, a newcomer's wait and the
// lanes' order.

// simTenant is one tenant's queue in one process.
type simTenant struct {
	name    string
	lane    reserve.Lane
	weight  float64
	arrive  time.Duration // when its backlog queues, from the start
	backlog int

	next time.Time // when its pump asks next
}

// simGrant is a slot booked: for whom, when asked, and the slot.
type simGrant struct {
	tenant string
	lane   reserve.Lane
	asked  time.Time
	slot   time.Time
}

// simRTT is the time each call takes in the simulation.
const simRTT = 50 * time.Microsecond

// simulate runs tenants' pumps against l on key with policy pol until every
// backlog is booked; ties between pumps asking at one instant are broken by
// seed. It returns the grants in the order they were booked. A simulation
// that takes over 10 asks per slot (plus 1,000) fails as one that does not
// end: the fair rule's properties take at most 2.6 (a mutant of the script
// may book nothing, TestFairMutants).
func simulate(t testing.TB, l *reserve.Limiter, clk *fakeclock.Clock, key string, pol reserve.Policy, cost reserve.Cost, seed uint64, tenants ...*simTenant) []simGrant {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	start := clk.Now()
	asks := 1000
	for _, tn := range tenants {
		tn.next = start.Add(tn.arrive)
		asks += 10 * tn.backlog
	}
	var out []simGrant
	for range asks {
		var ready []*simTenant
		var at time.Time
		for _, tn := range tenants {
			if tn.backlog == 0 {
				continue
			}
			switch {
			case len(ready) == 0 || tn.next.Before(at):
				ready, at = []*simTenant{tn}, tn.next
			case tn.next.Equal(at):
				ready = append(ready, tn)
			}
		}
		if len(ready) == 0 {
			return out
		}
		tn := ready[rng.IntN(len(ready))]
		if at.After(clk.Now()) {
			clk.Set(at)
		}
		asked := clk.Now()
		n := min(tn.backlog, 16)
		req := reserve.Request{Key: key, Policy: pol, Cost: cost, Tenant: tn.name, Lane: tn.lane, Weight: tn.weight}
		slots, retry, err := reserve.FairAsk(context.Background(), l, req, n, n == tn.backlog)
		require.NoError(t, err)
		for _, s := range slots {
			out = append(out, simGrant{tn.name, tn.lane, asked, time.Unix(0, s)})
		}
		tn.backlog -= len(slots)
		clk.Advance(simRTT)
		tn.next = clk.Now()
		if !retry.IsZero() {
			require.Empty(t, slots[min(len(slots), n):])
			tn.next = retry
		}
	}
	t.Fatal("the simulation did not end")
	return nil
}

// fairLimiter is a Limiter on a client clock, for simulate.
func fairLimiter(t *testing.T, opts reserve.Options) (*reserve.Limiter, *fakeclock.Clock, *redistest.Server) {
	t.Helper()
	s := redistest.New(t)
	l, clk := fairLimiterOn(t, s, opts)
	return l, clk, s
}

// fairLimiterOn is fairLimiter on s, under a prefix of its own.
func fairLimiterOn(t *testing.T, s *redistest.Server, opts reserve.Options) (*reserve.Limiter, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(epoch)
	opts.Clock, opts.ClientTime = clk, true
	opts.KeyPrefix, opts.FailClosed, opts.CallTimeout, opts.Logger = redistest.Prefix(t), true, 10*time.Second, quiet
	l, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, l)
	return l, clk
}

// localFairLimiter is fairLimiter with no Redis: a fleet of one pacing
// locally, the fair rule kept by the local fallback (fair.lua on the local store).
func localFairLimiter(t *testing.T, opts reserve.Options) (*reserve.Limiter, *fakeclock.Clock) {
	t.Helper()
	clk := fakeclock.New(epoch)
	c := redis.NewClient(&redis.Options{Addr: deadAddr(t)})
	t.Cleanup(func() { c.Close() })
	opts.Clock, opts.ClientTime, opts.FleetSize, opts.Logger = clk, true, 1, quiet
	opts.HeartbeatInterval, opts.ProbeInterval = time.Hour, time.Hour
	l, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, l)
	return l, clk
}

// fairBackends are the two ways the rule runs: the fair script on Redis,
// and the local fallback.
var fairBackends = []struct {
	name string
	new  func(*testing.T, reserve.Options) (*reserve.Limiter, *fakeclock.Clock)
}{
	{"redis", func(t *testing.T, o reserve.Options) (*reserve.Limiter, *fakeclock.Clock) {
		l, clk, _ := fairLimiter(t, o)
		return l, clk
	}},
	{"local", localFairLimiter},
}

// simSeeds is how many seeds a fair property simulates on t's backend: n
// on Redis, a quarter of them (at least 1; the first, so both kinds of
// seed where even and odd ones differ) on the local fallback. The local
// store runs the same fair.lua (internal/luastore's differential tests
// hold it to Redis call for call) on gopher-lua, about 6 times Redis's
// time under -race: the local runs of TestFairWeightedShares and
// TestFairUrgentGoesFirst took 205 s of reserve's 645 s.
func simSeeds(t testing.TB, n uint64) uint64 {
	if strings.HasSuffix(t.Name(), "/local") {
		return max(n/4, 1)
	}
	return n
}

// checkFairBucket asserts that the slots keep to a bucket of rate and burst:
// no span [a, b] holds more than burst + rate*(b-a) of them.
func checkFairBucket(t testing.TB, grants []simGrant, rate float64, burst int) {
	t.Helper()
	slots := make([]time.Time, len(grants))
	for i, g := range grants {
		slots[i] = g.slot
	}
	slices.SortFunc(slots, func(a, b time.Time) int { return a.Compare(b) })
	for i := range slots {
		for j := i + burst; j < len(slots) && j < i+burst+50; j++ {
			// require only on a failure: called for each of the ~50,000
			// pairs, it took about 6% of a simulation's CPU under -race.
			if allowed := float64(burst) + rate*slots[j].Sub(slots[i]).Seconds() + 1e-6; float64(j-i+1) > allowed {
				require.LessOrEqualf(t, float64(j-i+1), allowed, "slots %d..%d (%v to %v) over the limit", i, j, slots[i], slots[j])
			}
		}
	}
}

// newFairLimiter makes a Limiter of one of fairBackends, or with a mutant
// of the fair script (TestFairMutants).
type newFairLimiter func(reserve.Options) (*reserve.Limiter, *fakeclock.Clock)

// A fairProp is a property of the fair rule on its slots: its test runs it
// on both backends, and TestFairMutants on the fair script's mutants, each
// of which one property at least must find.
type fairProp func(t testing.TB, newL newFairLimiter)

// runFairProp runs prop on each of fairBackends, side by side (the local
// fallback's script runs on the CPU, Redis's mostly waits for its replies).
//
// On Redis the keys' TTLs run on the server's own clock, not the fake one:
// on a machine so busy that the simulation's fake seconds take longer in
// real time, a key expires, Redis forgets its bucket, and a slot comes
// early (a CI run beside other work: 51 slots where 50 fit, once in each
// of two properties). Such a run proves nothing: it is run again, three
// times at most; a failure with no key expired fails at once.
func runFairProp(t *testing.T, prop fairProp) {
	for _, be := range fairBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			if be.name != "redis" {
				prop(t, func(o reserve.Options) (*reserve.Limiter, *fakeclock.Clock) { return be.new(t, o) })
				return
			}
			for attempt := 1; ; attempt++ {
				var servers []*redistest.Server
				msg, failed := probe(t, func(pt testing.TB) {
					prop(pt, func(o reserve.Options) (*reserve.Limiter, *fakeclock.Clock) {
						l, clk, s := fairLimiter(t, o)
						servers = append(servers, s)
						return l, clk
					})
				})
				if !failed {
					return
				}
				var expired int64
				for _, s := range servers {
					expired += expiredKeys(t, s.Client)
				}
				if expired == 0 || attempt == 3 {
					t.Fatalf("attempt %d: %s (%d keys expired on the servers meanwhile)", attempt, msg, expired)
				}
				t.Logf("attempt %d: %s; but %d keys expired on the servers meanwhile (the real clock): again", attempt, failure(msg), expired)
			}
		})
	}
}

func TestFairLoneTenantKeepsTheSchedule(t *testing.T) { runFairProp(t, fairLoneTenant) }

func fairLoneTenant(t testing.TB, newL newFairLimiter) {
	l, clk := newL(reserve.Options{})
	lim := reserve.Limit{Rate: 100, Burst: 1}
	grants := simulate(t, l, clk, "k", lim.Policy(), reserve.Permits(1), 1,
		&simTenant{name: "a", backlog: 200})
	require.Len(t, grants, 200)
	for i, g := range grants {
		// x/time/rate's schedule: a slot every 10 ms from the first.
		require.Equal(t, grants[0].slot.Add(time.Duration(i)*10*time.Millisecond), g.slot, "slot %d", i)
	}
}

func TestFairNewcomerWaitsTwoSlotsAtMost(t *testing.T) { runFairProp(t, fairNewcomer) }

func fairNewcomer(t testing.TB, newL newFairLimiter) {
	lim := reserve.Limit{Rate: 100, Burst: 1}
	for seed := range simSeeds(t, 8) {
		l, clk := newL(reserve.Options{})
		arrive := 500*time.Millisecond + time.Duration(seed)*1300*time.Microsecond
		start := clk.Now()
		// A backlog of 200: about 50 of the flood's slots are booked when
		// the light tenant comes and some 150 still queued. The fair rule
		// sees what is booked, not what a pump has left (a pump asks 16 at
		// most), so the slots up to the light tenant's are those of a
		// backlog of 1,000; after it, 800 more of the flood's alone (a lone
		// tenant's case) took most of the test's time.
		grants := simulate(t, l, clk, "k", lim.Policy(), reserve.Permits(1), seed,
			&simTenant{name: "flood", backlog: 200},
			&simTenant{name: "light", arrive: arrive, backlog: 1})
		checkFairBucket(t, grants, 100, 1)
		i := slices.IndexFunc(grants, func(g simGrant) bool { return g.tenant == "light" })
		require.Greaterf(t, countTenant(grants[i+1:], "flood"), 100, "seed %d: the flood was not backlogged when the light tenant came", seed)
		// Two slot intervals, plus the round trips of its two asks.
		wait := grants[i].slot.Sub(start.Add(arrive))
		require.LessOrEqualf(t, wait, 20*time.Millisecond+2*simRTT, "seed %d: the light tenant waited %v behind the flood's backlog", seed, wait)
	}
}

func TestFairWeightedShares(t *testing.T) { runFairProp(t, fairWeightedShares) }

func fairWeightedShares(t testing.TB, newL newFairLimiter) {
	lim := reserve.Limit{Rate: 100, Burst: 1}
	for seed := range simSeeds(t, 4) {
		l, clk := newL(reserve.Options{})
		grants := simulate(t, l, clk, "k", lim.Policy(), reserve.Permits(1), seed,
			&simTenant{name: "a", weight: 2, backlog: 400},
			&simTenant{name: "b", backlog: 400},
			&simTenant{name: "c", arrive: time.Second, backlog: 200})
		checkFairBucket(t, grants, 100, 1)
		// While all of them wait, every prefix of the grants since c's first
		// keeps each tenant's count over its weight within 2 of the others'.
		first := slices.IndexFunc(grants, func(g simGrant) bool { return g.tenant == "c" })
		count := map[string]float64{}
		weight := map[string]float64{"a": 2, "b": 1, "c": 1}
		backlog := map[string]int{"a": 400, "b": 400, "c": 200}
		for _, g := range grants[:first] {
			backlog[g.tenant]--
		}
		for i, g := range grants[first:] {
			count[g.tenant]++
			backlog[g.tenant]--
			if backlog["a"] == 0 || backlog["b"] == 0 || backlog["c"] == 0 {
				break
			}
			lo, hi := math.Inf(1), math.Inf(-1)
			for name, w := range weight {
				lo, hi = min(lo, count[name]/w), max(hi, count[name]/w)
			}
			require.LessOrEqualf(t, hi-lo, 2.0, "seed %d, grant %d since c came: counts %v", seed, i, count)
		}
		require.Greater(t, count["c"], 50.0, "c took part")
	}
}

func TestFairUrgentGoesFirst(t *testing.T) { runFairProp(t, fairUrgentFirst) }

func fairUrgentFirst(t testing.TB, newL newFairLimiter) {
	lim := reserve.Limit{Rate: 100, Burst: 1}
	for seed := range simSeeds(t, 8) {
		l, clk := newL(reserve.Options{})
		start := clk.Now()
		arrive := time.Second + time.Duration(seed)*3100*time.Microsecond
		// Behind the Batch lane alone, the urgent lane waits one slot
		// interval at most: the Batch lane books only slots that are due.
		// Behind the Normal lane too, two, as a newcomer in its lane.
		normal, bound := 0, 10*time.Millisecond+simRTT
		if seed%2 == 1 {
			normal, bound = 200, 20*time.Millisecond+2*simRTT
		}
		grants := simulate(t, l, clk, "k", lim.Policy(), reserve.Permits(1), seed,
			&simTenant{name: "bulk", lane: reserve.Batch, backlog: 500 - normal},
			&simTenant{name: "flood", lane: reserve.Normal, backlog: normal},
			&simTenant{name: "live", lane: reserve.Urgent, arrive: arrive, backlog: 20})
		checkFairBucket(t, grants, 100, 1)
		first := slices.IndexFunc(grants, func(g simGrant) bool { return g.tenant == "live" })
		last := first
		for i, g := range grants {
			if g.tenant == "live" {
				last = i
			}
		}
		wait := grants[first].slot.Sub(start.Add(arrive))
		require.LessOrEqualf(t, wait, bound, "seed %d: the urgent lane waited %v behind the lower lanes", seed, wait)
		for _, g := range grants[first : last+1] {
			require.Equalf(t, "live", g.tenant, "seed %d: a lower lane was booked while the urgent lane waited", seed)
		}
		// Normal before Batch, but for the one Batch slot booked before
		// Normal's first ask.
		for _, g := range grants[1:] {
			if g.tenant == "bulk" {
				require.Zerof(t, countTenant(grants[slices.Index(grants, g):], "flood"), "seed %d: the batch lane was booked while the normal lane waited", seed)
				break
			}
		}
		// The lower lanes take what the higher ones leave: no gap but the
		// hand-overs' round trips.
		end := grants[len(grants)-1].slot
		require.LessOrEqual(t, end.Sub(grants[0].slot), 519*10*time.Millisecond+20*time.Millisecond)
	}
}

func countTenant(grants []simGrant, tenant string) int {
	n := 0
	for _, g := range grants {
		if g.tenant == tenant {
			n++
		}
	}
	return n
}

func TestFairMinShare(t *testing.T) { runFairProp(t, fairMinShare) }

func fairMinShare(t testing.TB, newL newFairLimiter) {
	lim := reserve.Limit{Rate: 100, Burst: 1}
	l, clk := newL(reserve.Options{MinShare: map[reserve.Lane]float64{reserve.Batch: 0.2}})
	grants := simulate(t, l, clk, "k", lim.Policy(), reserve.Permits(1), 1,
		&simTenant{name: "live", lane: reserve.Urgent, backlog: 400},
		&simTenant{name: "bulk", lane: reserve.Batch, backlog: 100})
	checkFairBucket(t, grants, 100, 1)
	// The urgent lane yields to the batch lane's share when it is due: the
	// share is booked within its horizon (one slot interval), not behind
	// the urgent lane's next booking.
	for i, g := range grants {
		if g.tenant == "bulk" {
			require.LessOrEqualf(t, g.slot.Sub(g.asked), 10*time.Millisecond, "grant %d: the batch lane's slot %v after its ask", i, g.slot.Sub(g.asked))
		}
	}
	// In every 50 slots while both wait, the batch lane has at least 9
	// (a fifth, less one at the edges).
	for i := 0; i+50 <= len(grants); i++ {
		if grants[i+49].tenant == "bulk" && !slices.ContainsFunc(grants[i+50:], func(g simGrant) bool { return g.tenant == "bulk" }) {
			break
		}
		n := 0
		for _, g := range grants[i : i+50] {
			if g.tenant == "bulk" {
				n++
			}
		}
		require.GreaterOrEqualf(t, n, 9, "grants %d..%d: the batch lane had %d of 50", i, i+49, n)
	}
}

func TestFairPolicyKeepsEveryBand(t *testing.T) { runFairProp(t, fairPolicyBands) }

func fairPolicyBands(t testing.TB, newL newFairLimiter) {
	pol := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 50, Burst: 5}},
		{Name: "tokens", Unit: "tokens", Window: reserve.Window{N: 600, Length: time.Second}},
	}
	cost := reserve.Cost{"requests": 1, "tokens": 30}
	l, clk := newL(reserve.Options{})
	grants := simulate(t, l, clk, "k", pol, cost, 1,
		&simTenant{name: "a", backlog: 100},
		&simTenant{name: "b", backlog: 100},
		&simTenant{name: "c", lane: reserve.Urgent, arrive: 2 * time.Second, backlog: 10})
	require.Len(t, grants, 210)
	checkFairBucket(t, grants, 50, 5)
	perWindow := map[int64]int{}
	for _, g := range grants {
		perWindow[g.slot.UnixNano()/int64(time.Second)] += 30
	}
	for w, u := range perWindow {
		require.LessOrEqualf(t, u, 600, "window %d holds %d tokens", w, u)
	}
	// The window binds (20 requests a second): a and b split it.
	na := 0
	for _, g := range grants[:100] {
		if g.tenant == "a" {
			na++
		}
	}
	require.InDelta(t, 50, na, 6, "a's part of the first 100 grants")
}

func TestFairBadInput(t *testing.T) {
	l, _, s := fairLimiter(t, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1}
	for _, req := range []reserve.Request{
		{Tenant: "t", Lane: 2},
		{Tenant: "t", Lane: -2},
		{Tenant: "t", Weight: -1},
		{Tenant: "t", Weight: math.NaN()},
		{Tenant: "t", Weight: math.Inf(1)},
		{Tenant: "t", Weight: 1e9},
		{Tenant: strings.Repeat("x", 257)},
	} {
		req.Key, req.Policy, req.Cost = "bad", lim.Policy(), reserve.Permits(1)
		_, err := l.ReserveN(ctx, req)
		require.ErrorIs(t, err, reserve.ErrInvalidFairness, "%+v", req)
		require.ErrorIs(t, l.WaitN(ctx, req), reserve.ErrInvalidFairness)
	}
	keys, err := s.Client.Keys(ctx, redistest.Prefix(t)+"{bad}*").Result()
	require.NoError(t, err)
	require.Empty(t, keys, "bad input wrote to Redis")
	_, err = reserve.New(s.Client, reserve.Options{MinShare: map[reserve.Lane]float64{reserve.Urgent: 0.1}})
	require.ErrorIs(t, err, reserve.ErrInvalidOptions)
	_, err = reserve.New(s.Client, reserve.Options{MinShare: map[reserve.Lane]float64{reserve.Batch: 1}})
	require.ErrorIs(t, err, reserve.ErrInvalidOptions)
	_, err = reserve.New(s.Client, reserve.Options{FairHorizon: -time.Second})
	require.ErrorIs(t, err, reserve.ErrInvalidDuration)
}

func TestFairWrongType(t *testing.T) {
	l, _, s := fairLimiter(t, reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1}
	for _, suffix := range []string{":fair", ":fw:n", ":fp:n", ":fw:u"} {
		key := "wt" + suffix
		planted := l.RedisKey(key) + suffix
		require.NoError(t, s.Client.Set(ctx, planted, "x", 0).Err())
		req := reserve.Single(key, lim, 1)
		req.Tenant = "t"
		_, err := l.ReserveN(ctx, req)
		require.ErrorIs(t, err, reserve.ErrWrongType, suffix)
		n, err := s.Client.Exists(ctx, l.RedisKey(key)).Result()
		require.NoError(t, err)
		require.Zero(t, n, "%s: the key's state was written", suffix)
		v, err := s.Client.Get(ctx, planted).Result()
		require.NoError(t, err)
		require.Equal(t, "x", v)
	}
}

func TestFairForgetsTenants(t *testing.T) {
	// 4,000 round trips in a row, on a fake clock and a prefix of its own:
	// side by side with the other parallel tests.
	t.Parallel()
	fairForgets(t, func(o reserve.Options) (*reserve.Limiter, *fakeclock.Clock) {
		l, clk, _ := fairLimiter(t, o)
		return l, clk
	})
}

// fairForgets is a fairProp on Redis only: it reads the fair keys.
func fairForgets(t testing.TB, newL newFairLimiter) {
	l, clk := newL(reserve.Options{FairHorizon: 20 * time.Millisecond})
	rdb := l.Client().(redis.UniversalClient)
	lim := reserve.Limit{Rate: 1000, Burst: 1}
	ctx := context.Background()
	// Beside a tenant that keeps waiting, 2,000 tenants book 8 requests
	// each, one after the other, and leave: ahead of the steady one, which
	// books 4 between two of them and then passes them.
	ask := func(tenant string, n int, last bool) {
		req := reserve.Single("many", lim, 1)
		req.Tenant = tenant
		for n > 0 {
			slots, retry, err := reserve.FairAsk(ctx, l, req, n, last)
			require.NoError(t, err)
			n -= len(slots)
			if n > 0 {
				clk.Set(retry)
			}
		}
	}
	for i := range 2000 {
		ask("steady", 4, false)
		ask("t"+strconv.Itoa(i), 8, true)
	}
	passes, err := rdb.ZCard(ctx, l.RedisKey("many")+":fp:n").Result()
	require.NoError(t, err)
	require.LessOrEqual(t, passes, int64(3), "passes kept for tenants that left")
	waiting, err := rdb.ZCard(ctx, l.RedisKey("many")+":fw:n").Result()
	require.NoError(t, err)
	require.LessOrEqual(t, waiting, int64(1), "only the steady tenant waits")
	ttl, err := rdb.PTTL(ctx, l.RedisKey("many")+":fair").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, 11*time.Second)
}

// testFair runs fair requests through the Limiter's pumps on every kind of
// Redis (the contract suite): the fair script's keys share the key's hash
// tag (Cluster), its commands are the ACL's, and gopher-lua runs it
// (miniredis). Exact checks only: every request granted, the slots apart by
// the limit's spacing; Allow and TryReserveN keep their maximum.
func testFair(t *testing.T, b backend) {
	l := newLimiter(t, b, nil)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 200, Burst: 1}
	var mu sync.Mutex
	var slots []int64
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := reserve.Single("fair", lim, 1)
			req.Tenant = "a"
			if i%4 == 0 {
				req.Tenant, req.Weight = "b", 2
			}
			if i == 7 {
				req.Lane = reserve.Urgent
			}
			r, err := l.ReserveN(ctx, req)
			if !assert.NoError(t, err) {
				return
			}
			ns, ok := reserve.ServerSlot(r)
			assert.True(t, ok)
			mu.Lock()
			slots = append(slots, ns)
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, slots, 40)
	slices.Sort(slots)
	for i := 1; i < len(slots); i++ {
		require.GreaterOrEqual(t, slots[i]-slots[i-1], int64(5*time.Millisecond)-1, "slots %d and %d", i-1, i)
	}

	// One permit in 100 s: the second is far beyond any maximum, however
	// slow the machine.
	slow := reserve.Limit{Rate: 0.01, Burst: 1}
	req := reserve.Single("fair-allow", slow, 1)
	req.Tenant = "a"
	ok, err := l.AllowN(ctx, req)
	require.NoError(t, err)
	require.True(t, ok, "a fresh key's first permit")
	ok, err = l.AllowN(ctx, req)
	require.NoError(t, err)
	require.False(t, ok, "the next permit is 100 s away")
	_, err = l.TryReserveN(ctx, req, 100*time.Millisecond)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
}

func TestFairClose(t *testing.T) {
	before := countGoroutines()
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	// One permit every 10 s: the first is booked now, the second within
	// its horizon (10 s ahead), the others wait in the pump.
	lim := reserve.Limit{Rate: 0.1, Burst: 1}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 6)
	for range 6 {
		go func() {
			req := reserve.Single("closing", lim, 1)
			req.Tenant = "a"
			errs <- l.WaitN(ctx, req)
		}()
	}
	require.Eventually(t, func() bool {
		n, _ := s.Client.Exists(context.Background(), l.RedisKey("closing")+":fw:n").Result()
		return n == 1
	}, 10*time.Second, time.Millisecond, "the pump was deferred")
	require.NoError(t, l.Close())
	closed, other := 0, 0
	for range 6 {
		select {
		case err := <-errs:
			if errors.Is(err, reserve.ErrClosed) {
				closed++
			} else {
				other++
			}
		case <-time.After(time.Second):
			cancel() // the one booked 10 s ahead sleeps on; end it
		}
	}
	require.GreaterOrEqual(t, closed, 4, "the waiting requests end with ErrClosed")
	require.Eventually(t, func() bool { return countGoroutines() <= before }, 10*time.Second, 10*time.Millisecond, "a pump outlived Close")
}

// TestFairStoredWeight: a weight the operator stores for a tenant
// (admin.SetWeight, cmd/pacer weight) replaces the one its code gives, in
// the shares (exact, as TestFairWeightedShares); Status shows the stored
// weights and the tenants waiting; bad weights and tenants change nothing;
// a stored weights key of another type, or a weight that is not a number,
// fails fair calls with ErrWrongType and ErrStoredLimit.
func TestFairStoredWeight(t *testing.T) {
	l, clk, s := fairLimiter(t, reserve.Options{})
	ctx := context.Background()
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: strings.TrimSuffix(l.RedisKey("k"), "{k}")})
	require.NoError(t, err)
	for _, w := range []float64{0, -1, math.NaN(), math.Inf(1), 1e7} {
		_, err := a.SetWeight(ctx, "k", "a", w, "ops", "bad")
		require.ErrorIs(t, err, reserve.ErrInvalidFairness, "weight %v", w)
	}
	_, err = a.SetWeight(ctx, "k", strings.Repeat("x", 257), 2, "ops", "bad")
	require.ErrorIs(t, err, reserve.ErrInvalidFairness)
	_, err = a.SetWeight(ctx, "", "a", 2, "ops", "bad")
	require.ErrorIs(t, err, reserve.ErrEmptyKey)
	_, err = a.UnsetWeight(ctx, "k", "a", "ops", "none yet")
	require.ErrorIs(t, err, admin.ErrNotStored)
	n, err := s.Client.Exists(ctx, l.RedisKey("k")+":weights", l.RedisKey("k")+":history").Result()
	require.NoError(t, err)
	require.Zero(t, n, "bad input wrote to Redis")

	c, err := a.SetWeight(ctx, "k", "a", 3, "ops", "a pays more")
	require.NoError(t, err)
	require.Equal(t, admin.Change{At: c.At, Op: "weight", Tenant: "a", Who: "ops", Reason: "a pays more", After: "3"}, c)

	lim := reserve.Limit{Rate: 100, Burst: 1}
	grants := simulate(t, l, clk, "k", lim.Policy(), reserve.Permits(1), 1,
		&simTenant{name: "a", backlog: 400}, &simTenant{name: "b", backlog: 400})
	checkFairBucket(t, grants, 100, 1)
	count := map[string]float64{}
	for i, g := range grants {
		count[g.tenant]++
		if count["a"] == 400 || count["b"] == 400 {
			break
		}
		require.LessOrEqualf(t, math.Abs(count["a"]/3-count["b"]), 2.0, "grant %d: counts %v", i, count)
	}
	require.Greater(t, count["b"], 50.0)

	// Two tenants waiting on a key of one permit a second: Status (on
	// Redis's clock, so the client clock moves to now) shows them, and the
	// stored weight.
	clk.Set(time.Now())
	_, err = a.SetWeight(ctx, "slow", "a", 3, "ops", "a pays more")
	require.NoError(t, err)
	booked := map[string]int{}
	for _, tenant := range []string{"a", "b"} {
		req := reserve.Single("slow", reserve.Limit{Rate: 1, Burst: 1}, 1)
		req.Tenant = tenant
		slots, _, err := reserve.FairAsk(ctx, l, req, 8, false)
		require.NoError(t, err)
		booked[tenant] = len(slots)
	}
	st, err := a.Status(ctx, "slow")
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"a": 3}, st.Weights)
	var names []string
	for _, ts := range st.Tenants {
		require.Equal(t, "normal", ts.Lane)
		require.True(t, ts.Waiting, "%+v", ts)
		// Each queued 8 in its process: what was not booked is queued.
		require.Equal(t, 8-booked[ts.Tenant], ts.Queued, "%+v", ts)
		require.InDelta(t, float64(booked[ts.Tenant])/float64(booked["a"]+booked["b"]), ts.Share, 0.01, "%+v", ts)
		names = append(names, ts.Tenant)
	}
	slices.Sort(names)
	require.Equal(t, []string{"a", "b"}, names)
	hist, err := a.History(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, "weight", hist[0].Op)

	c, err = a.UnsetWeight(ctx, "k", "a", "ops", "back to code")
	require.NoError(t, err)
	require.Equal(t, "3", c.Before)
	require.Equal(t, "", c.After)

	req := reserve.Single("k", lim, 1)
	req.Tenant = "a"
	require.NoError(t, s.Client.HSet(ctx, l.RedisKey("k")+":weights", "a", "heavy").Err())
	_, _, err = reserve.FairAsk(ctx, l, req, 1, true)
	require.ErrorIs(t, err, reserve.ErrStoredLimit)
	require.NoError(t, s.Client.Set(ctx, l.RedisKey("k")+":weights", "x", 0).Err())
	_, _, err = reserve.FairAsk(ctx, l, req, 1, true)
	require.ErrorIs(t, err, reserve.ErrWrongType)
	_, err = a.SetWeight(ctx, "k", "a", 2, "ops", "over a string")
	require.ErrorIs(t, err, reserve.ErrWrongType)
}

// TestFairSleepingPump: a request queued behind a pump that sleeps until
// its next turn (here 100 s away) is refused at once when that turn comes
// after its maximum wait, rather than when the pump wakes: TryReserveN and
// AllowN keep their maximum even when the queue they join is asleep. (The
// bound on the test's context is 50 s: the bug waited 100 s.)
func TestFairSleepingPump(t *testing.T) {
	l := newLimiter(t, redisBackend(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	req := reserve.Single("sleepy", reserve.Limit{Rate: 0.01, Burst: 1}, 1)
	req.Tenant = "a"
	ok, err := l.AllowN(ctx, req)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = l.AllowN(ctx, req) // defers the pump 100 s
	require.NoError(t, err)
	require.False(t, ok)
	for range 3 {
		_, err = l.TryReserveN(ctx, req, 100*time.Millisecond)
		var tooLong *reserve.WaitTooLongError
		require.ErrorAs(t, err, &tooLong)
		require.Greater(t, tooLong.Wait, 10*time.Second, "the turn's wait")
		ok, err = l.AllowN(ctx, req)
		require.NoError(t, err)
		require.False(t, ok)
	}
}

// TestFairSleepingPumpRace: requests refused at once by a sleeping pump
// (AllowN) while the pump wakes and sleeps again for the WaitN callers of
// the same queue; under -race, the refusal reads the pump's state under
// its lock (the combination runner found it read after).
func TestFairSleepingPumpRace(t *testing.T) {
	l := newLimiter(t, redisBackend(t), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	req := reserve.Single("racy", reserve.Limit{Rate: 200, Burst: 1}, 1)
	req.Tenant = "a"
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = l.WaitN(ctx, req)
			}
		})
		wg.Go(func() {
			for ctx.Err() == nil {
				if ok, err := l.AllowN(ctx, req); err == nil && !ok {
					refused.Add(1)
				}
			}
		})
	}
	wg.Wait()
	require.Positive(t, refused.Load(), "no AllowN was refused")
}

// TestFairFigures: what Status shows of a key's tenants (lua/fair.lua's
// figures) adds up the processes' queues, each as of its last call, gives
// each tenant its part of the lane's bookings, and forgets the queue of a
// process that stops asking once its waiting lapses.
func TestFairFigures(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	newL := func() *reserve.Limiter {
		l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
		require.NoError(t, err)
		closeLimiter(t, l)
		return l
	}
	l1, l2 := newL(), newL()
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	// The Batch lane books a slot only when it is due: at 1/s, one now and
	// the rest deferred, by a second at most.
	ask := func(l *reserve.Limiter, tenant string, n int) int {
		req := reserve.Single("slow", reserve.Limit{Rate: 1, Burst: 1}, 1)
		req.Tenant, req.Lane = tenant, reserve.Batch
		slots, _, err := reserve.FairAsk(ctx, l, req, n, true)
		require.NoError(t, err)
		return len(slots)
	}
	figures := func() map[string]admin.TenantStatus {
		st, err := a.Status(ctx, "slow")
		require.NoError(t, err)
		out := map[string]admin.TenantStatus{}
		for _, ts := range st.Tenants {
			require.Equal(t, "batch", ts.Lane)
			out[ts.Tenant] = ts
		}
		return out
	}

	a1, a2, b2 := ask(l1, "a", 5), ask(l2, "a", 3), ask(l2, "b", 2)
	got := figures()
	require.Equal(t, 8-a1-a2, got["a"].Queued, "a's queue in both processes: %+v", got["a"])
	require.Equal(t, 2-b2, got["b"].Queued, "%+v", got["b"])
	require.InDelta(t, float64(a1+a2)/float64(a1+a2+b2), got["a"].Share, 0.01, "a's part of the lane's bookings")
	require.GreaterOrEqual(t, got["a"].Oldest, time.Duration(0))

	// l2 stops asking; after its waiting lapses (at most 1 s told, 100 ms
	// of grace), l1's next call drops l2's figures: a's queue is l1's alone.
	time.Sleep(1200 * time.Millisecond)
	a1 += ask(l1, "a", 5-a1)
	got = figures()
	require.Equal(t, 5-a1, got["a"].Queued, "a's queue once l2's lapsed: %+v", got["a"])
	require.Zero(t, got["b"].Queued, "b's queue once l2's lapsed: %+v", got["b"])
}

// TestFairRefusedAllowHoldsNobody: an AllowN refused (its turn or its slot
// further than now) leaves its tenant not waiting, so it holds no other
// tenant back: here a books its next slot once it is within its horizon,
// where it was deferred until b's waiting lapsed.
func TestFairRefusedAllowHoldsNobody(t *testing.T) { runFairProp(t, fairRefusedAllow) }

func fairRefusedAllow(t testing.TB, newL newFairLimiter) {
	l, clk := newL(reserve.Options{})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	req := func(tenant string) reserve.Request {
		r := reserve.Single("k", lim, 1)
		r.Tenant = tenant
		return r
	}
	// a books two slots (now and in 1 s, its horizon) and waits with
	// a third queued: its next start is ahead of the lane's.
	slots, _, err := reserve.FairAsk(ctx, l, req("a"), 3, false)
	require.NoError(t, err)
	require.Len(t, slots, 2)
	ok, err := l.AllowN(ctx, req("b"))
	require.NoError(t, err)
	require.False(t, ok, "b's slot is 2 s away")
	clk.Advance(time.Second)
	slots, _, err = reserve.FairAsk(ctx, l, req("a"), 1, true)
	require.NoError(t, err)
	require.Len(t, slots, 1, "a's third slot, 1 s away: b, refused, holds it back")
}

func TestFairBesidePlainCalls(t *testing.T) { runFairProp(t, fairBesidePlain) }

// fairBesidePlain: plain calls on the key (no tenant, the Normal lane)
// keep its queue five slots ahead of now, as a backlog of plain Waits
// does. A fair request is booked only within its horizon, so on that rule
// alone it was deferred at every ask: each time its slot came within the
// horizon, a plain call had taken it, and the tenants were never booked.
// Now a tenant in its turn is deferred for the horizon once, and booked
// when it asks as told wherever its slot lies: behind the plain backlog's
// five slots and the other tenant's last booking. No span of eight slot
// intervals (and the calls' round trips) goes by without a fair booking,
// in either lane, and every band holds over the plain and fair slots
// together.
func fairBesidePlain(t testing.TB, newL newFairLimiter) {
	ctx := context.Background()
	lim := reserve.Limit{Rate: 100, Burst: 1}
	interval := 10 * time.Millisecond
	for _, lane := range []reserve.Lane{reserve.Normal, reserve.Batch} {
		l, clk := newL(reserve.Options{})
		tenants := []*simTenant{{name: "a", lane: lane, backlog: 20}, {name: "b", lane: lane, backlog: 20}}
		var slots []simGrant
		var plainAhead time.Time
		lastBooked := clk.Now()
		for step := 0; ; step++ {
			require.Less(t, step, 1000, "lane %v: the fair requests were not booked", lane)
			var tn *simTenant
			for _, x := range tenants {
				if x.backlog > 0 && (tn == nil || x.next.Before(tn.next)) {
					tn = x
				}
			}
			if tn == nil {
				break
			}
			if tn.next.After(clk.Now()) {
				clk.Set(tn.next)
			}
			for plainAhead.Before(clk.Now().Add(5 * interval)) {
				r, err := l.Reserve(ctx, "k", lim)
				require.NoError(t, err)
				plainAhead = r.Time()
				slots = append(slots, simGrant{slot: r.Time()})
			}
			req := reserve.Request{Key: "k", Policy: lim.Policy(), Cost: reserve.Permits(1), Tenant: tn.name, Lane: lane, Weight: 1}
			got, retry, err := reserve.FairAsk(ctx, l, req, 1, tn.backlog == 1)
			require.NoError(t, err)
			asked := clk.Now()
			clk.Advance(simRTT)
			tn.next = clk.Now()
			if len(got) == 0 {
				require.False(t, retry.IsZero())
				require.LessOrEqualf(t, asked.Sub(lastBooked), 8*interval+10*simRTT, "lane %v: no fair booking since %v", lane, lastBooked.Sub(epoch))
				tn.next = retry
				continue
			}
			lastBooked = asked
			tn.backlog--
			slots = append(slots, simGrant{tenant: tn.name, lane: lane, asked: asked, slot: time.Unix(0, got[0])})
		}
		checkFairBucket(t, slots, lim.Rate, lim.Burst)
	}
}
