package pacertest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The differential test: the kit's Limiter on a store against a Limiter on
// a real redis-server (reserve.New, Options.ClientTime), both on one fake
// clock, given the same random calls: reservations of one or two bands
// (buckets, sliding and fixed windows) on two keys, bounded waits, Allow,
// cancels and settles, pauses, peeks, holds and claims (package hold), bad
// costs, and time moving by zero to seconds. Every slot, error, snapshot and key state (value byte for byte,
// expiry within the time the seed has run, and 10 ms) must be the same on
// both. The
// kit's Limiter is the one hook.OnStore makes for Store.NewLimiter, with
// the fake clock for time.Now (its Store's keys expire by a clock that
// stands still, as the scripts take their time from the client's).
//
// PACER_KIT_SEED=n replays seed n alone; PACER_KIT_SEEDS=n runs n seeds.
func TestDifferential(t *testing.T) {
	srv := redistest.New(t)
	prefix := redistest.Prefix(t)
	n := 6
	if testing.Short() {
		n = 2
	}
	if s := os.Getenv("PACER_KIT_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	base := uint64(time.Now().UnixNano())
	var seeds []uint64
	for i := range n {
		seeds = append(seeds, base+uint64(i))
	}
	if s := os.Getenv("PACER_KIT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PACER_KIT_SEED=%q: %v", s, err)
		}
		seeds = []uint64{v}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			runDiff(t, srv.Client, prefix+strconv.FormatUint(seed, 10)+":", seed)
		})
	}
}

// side is one of the two Limiters and its live reservations.
type side struct {
	name string
	l    *reserve.Limiter
	book *hold.Book
	live []*reserve.Reservation
}

func runDiff(t *testing.T, rdb *redis.Client, prefix string, seed uint64) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, 44))
	clock := fakeclock.New(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int64N(1e9))))
	opts := reserve.Options{Clock: clock, ClientTime: true, KeyPrefix: prefix, RequireRedis: true}
	onRedis, err := reserve.New(rdb, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer onRedis.Close()
	frozen := time.Now()
	st := luastore.New(func() time.Time { return frozen })
	v, err := hook.OnStore(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	onStore := v.(*reserve.Limiter)
	defer onStore.Close()
	sides := [2]*side{{name: "redis", l: onRedis}, {name: "store", l: onStore}}
	for _, s := range sides {
		// Holds live a minute past their slots (StaleAfter), so that none
		// expires on Redis, by its clock, within the seed.
		if s.book, err = hold.New(s.l, hold.Options{StaleAfter: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	holders := []string{"h1", "h2", "h3"}

	keys := []string{"a", "b{x}"}
	policies := []reserve.Policy{drawPolicy(rng), drawPolicy(rng), reserve.Limit{Rate: 5, Burst: 3}.Policy()}
	var redisKeys []string
	for _, k := range keys {
		rk := onRedis.RedisKey(k)
		redisKeys = append(redisKeys, rk, rk+":limit", rk+":shadow")
		for _, h := range holders {
			redisKeys = append(redisKeys, rk+":h:"+h)
		}
	}
	t.Cleanup(func() { rdb.Del(context.Background(), redisKeys...) })
	start := time.Now()
	stats := map[string]int{}

	for step := range 150 {
		key := keys[rng.IntN(len(keys))]
		pol := policies[rng.IntN(len(policies))]
		cost := drawCost(rng, pol)
		req := reserve.Request{Key: key, Policy: pol, Cost: cost}
		var op string
		var out [2]string
		switch k := rng.IntN(23); {
		case k < 8:
			op = "reserve"
			for i, s := range sides {
				r, err := s.l.ReserveN(ctx, req)
				out[i] = s.slot(r, err)
			}
		case k < 10:
			maxWait := time.Duration(rng.Int64N(int64(2 * time.Second)))
			op = "try " + maxWait.String()
			for i, s := range sides {
				r, err := s.l.TryReserveN(ctx, req, maxWait)
				out[i] = s.slot(r, err)
			}
		case k < 12:
			op = "allow"
			for i, s := range sides {
				ok, err := s.l.AllowN(ctx, req)
				out[i] = fmt.Sprint(ok, " ", errText(err))
			}
		case k < 14:
			j := rng.IntN(1 + len(sides[0].live))
			op = "cancel " + strconv.Itoa(j)
			if j == len(sides[0].live) {
				continue
			}
			for i, s := range sides {
				out[i] = errText(s.live[j].Cancel(ctx))
			}
		case k < 15:
			j := rng.IntN(1 + len(sides[0].live))
			op = "settle " + strconv.Itoa(j)
			if j == len(sides[0].live) {
				continue
			}
			actual := drawCost(rng, pol)
			for i, s := range sides {
				c := s.live[j].Cost()
				for u := range c {
					if a, ok := actual[u]; ok {
						c[u] = a
					}
				}
				out[i] = errText(s.live[j].Settle(ctx, c))
			}
		case k < 16:
			d := time.Duration(1 + rng.Int64N(int64(3*time.Second)))
			op = "pause " + d.String()
			for i, s := range sides {
				out[i] = errText(s.l.Pause(ctx, key, d))
			}
		case k < 18:
			op = "peek"
			for i, s := range sides {
				snap, err := s.l.Peek(ctx, req)
				for b := range snap.Bands {
					// -0 as 0: the store replies 0 where Redis replies -0
					// (peek.lua's -b.z / b.upp of a bucket at exactly
					// zero): gopher-lua's number allocator hands out its
					// cached 0 for -0. Go's == does not tell them apart.
					snap.Bands[b].Value += 0
				}
				out[i] = fmt.Sprintf("%+v %s", snap, errText(err))
			}
		case k < 20:
			var reqs []hold.Request
			for range 1 + rng.IntN(3) {
				reqs = append(reqs, hold.Request{ID: holders[rng.IntN(len(holders))], Request: req})
			}
			op = fmt.Sprint("hold ", len(reqs))
			for i, s := range sides {
				gs, err := s.book.Hold(ctx, reqs)
				out[i] = s.grants(gs, err)
			}
		case k < 21:
			id := holders[rng.IntN(len(holders))]
			maxWait := time.Duration(rng.Int64N(int64(time.Second)))
			op = "claim " + id + " " + maxWait.String()
			for i, s := range sides {
				g, err := s.book.Claim(ctx, id, req, maxWait)
				var gs []*hold.Grant
				if g != nil {
					gs = append(gs, g)
				}
				out[i] = s.grants(gs, err)
			}
		default:
			var d time.Duration
			switch rng.IntN(3) {
			case 0:
				d = time.Duration(rng.Int64N(int64(time.Millisecond)))
			case 1:
				d = time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
			case 2:
				d = time.Duration(rng.Int64N(int64(3 * time.Second)))
			}
			clock.Advance(d)
			op = "advance " + d.String()
		}
		stats[opName(op)]++
		if out[0] != out[1] {
			t.Fatalf("seed %d step %d %s on %q %v cost %v:\n redis: %s\n store: %s", seed, step, op, key, pol, cost, out[0], out[1])
		}
		compareKeys(t, ctx, rdb, st, redisKeys, start, func() string { return fmt.Sprintf("seed %d step %d %s", seed, step, op) })
	}
	t.Logf("steps: %v", stats)
}

// slot records r (if granted) among s's live reservations and returns the
// outcome as text: the slot (Unix ns), band and cost, or the error.
func (s *side) slot(r *reserve.Reservation, err error) string {
	if err != nil {
		return errText(err)
	}
	s.live = append(s.live, r)
	return fmt.Sprint(r.Time().UnixNano(), " ", r.Band(), " ", r.Cost())
}

// grants records the grants' reservations among s's live ones and returns
// them as text.
func (s *side) grants(gs []*hold.Grant, err error) string {
	if err != nil {
		return errText(err)
	}
	var b strings.Builder
	for _, g := range gs {
		fmt.Fprintf(&b, "%s kept %v %v; ", s.slot(g.Reservation, nil), g.Kept, g.Source)
	}
	return b.String()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var tooLong *reserve.WaitTooLongError
	if errors.As(err, &tooLong) {
		return fmt.Sprintf("too long %+v: %v", *tooLong, err)
	}
	return err.Error()
}

func opName(op string) string {
	for i, c := range op {
		if c == ' ' {
			return op[:i]
		}
	}
	return op
}

// drawPolicy draws a policy of one or two bands: a bucket, a sliding
// window's bucket, a fixed window, on one or two units.
func drawPolicy(rng *rand.Rand) reserve.Policy {
	band := func(name, unit string) reserve.Band {
		switch rng.IntN(3) {
		case 0:
			return reserve.Band{Name: name, Unit: unit, Limit: reserve.Limit{Rate: 0.5 + rng.Float64()*50, Burst: 1 + rng.IntN(8)}}
		case 1:
			lim, err := reserve.Sliding(2+rng.IntN(10), time.Duration(1+rng.IntN(3))*time.Second)
			if err != nil {
				panic(err)
			}
			return reserve.Band{Name: name, Unit: unit, Limit: lim}
		}
		return reserve.Band{Name: name, Unit: unit, Window: reserve.Window{N: float64(2 + rng.IntN(20)), Length: time.Duration(1+rng.IntN(4)) * time.Second}}
	}
	if rng.IntN(2) == 0 {
		return reserve.Policy{band("rps", "requests")}
	}
	second := "requests"
	if rng.IntN(2) == 0 {
		second = "tokens"
	}
	return reserve.Policy{band("rps", "requests"), band("quota", second)}
}

// drawCost draws a cost for pol: a few of each unit, now and then too many
// or a negative amount.
func drawCost(rng *rand.Rand, pol reserve.Policy) reserve.Cost {
	c := reserve.Cost{}
	for _, b := range pol {
		u := b.Unit
		if u == "" {
			u = b.Name
		}
		switch k := rng.IntN(23); {
		case k == 0:
			c[u] = -1
		case k == 1:
			c[u] = 100
		default:
			c[u] = float64(1 + rng.IntN(3))
		}
	}
	return c
}

// dumpScript returns, for each key, its type, its PTTL and its value.
var dumpScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local t = redis.call('TYPE', k).ok
  local v = {}
  if t == 'string' then v = {redis.call('GET', k)}
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  end
  out[i] = {t, redis.call('PTTL', k), v}
end
return out`)

// compareKeys compares the keys on Redis and in the store (the same
// script reads both): type and value byte for byte (a hash as its set of
// fields), and expiry within the time since start (the store's clock
// stands still, Redis's runs on) and 10 ms (Redis reads its clock for a
// script from a snapshot that may be a few ms old).
func compareKeys(t *testing.T, ctx context.Context, rdb *redis.Client, st *luastore.Store, keys []string, start time.Time, where func() string) {
	t.Helper()
	r, err := dumpScript.Run(ctx, rdb, keys).Slice()
	if err != nil {
		t.Fatal(err)
	}
	ran := time.Since(start) // read after Redis's PTTL: a bound on the time its keys have run
	s, err := dumpScript.Run(ctx, st, keys).Slice()
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		rk, sk := r[i].([]any), s[i].([]any)
		rv, sv := rk[2].([]any), sk[2].([]any)
		if rk[0] == "hash" {
			rv, sv = sortedPairs(rv), sortedPairs(sv)
		}
		if rk[0] != sk[0] || fmt.Sprintf("%q", rv) != fmt.Sprintf("%q", sv) {
			t.Fatalf("%s: key %s:\n redis %v %q\n store %v %q", where(), k, rk[0], rv, sk[0], sv)
		}
		rt, stt := time.Duration(rk[1].(int64))*time.Millisecond, time.Duration(sk[1].(int64))*time.Millisecond
		if (rt < 0 || stt < 0) && rt != stt || stt-rt > ran+10*time.Millisecond || rt > stt+time.Millisecond {
			t.Fatalf("%s: key %s: redis PTTL %v, store %v (the seed has run %v)", where(), k, rt, stt, ran)
		}
	}
}

func sortedPairs(v []any) []any {
	var pairs []any
	for i := 0; i+1 < len(v); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%q=%q", v[i], v[i+1]))
	}
	slices.SortFunc(pairs, func(a, b any) int { return strings.Compare(a.(string), b.(string)) })
	return pairs
}
