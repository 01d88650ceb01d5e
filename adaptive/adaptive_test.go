package adaptive_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rateWithin asserts lo <= rate <= hi (with rounding).
func rateWithin(t *testing.T, rate, lo, hi float64, what string) {
	t.Helper()
	if rate < lo-1e-9 || rate > hi+1e-9 {
		t.Errorf("%s: rate %v, want within [%v, %v]", what, rate, lo, hi)
	}
}

// TestAdaptive: the learned rate starts at Start and doubles every Double
// until the first cut; refusals reported by several Limiters at once cut it
// exactly once per episode, by Decrease; it then climbs back on CUBIC's
// curve; it never leaves [Min, Max]. The rate grows with the
// time that passes, which the test measures rather than bounds.
func TestAdaptive(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	var ls []*reserve.Limiter
	for range 3 {
		l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
		require.NoError(t, err)
		closeLimiter(t, l)
		ls = append(ls, l)
	}
	a := adaptive.Config{Start: 100, Min: 10, Max: 1000, Double: time.Hour, Recover: time.Hour, Episode: time.Minute, Steps: -1}
	slowStart := func(since time.Time) float64 { return math.Pow(2, time.Since(since).Hours()) }

	begin := time.Now()
	lim, err := rate(t, ls[0], "api", a).Limit(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, lim.Burst, "default burst")
	rateWithin(t, lim.Rate, 100, 100*slowStart(begin), "first read")

	// 3 Limiters x 10 goroutines report 429s at once: one cut.
	var (
		mu   sync.Mutex
		cuts int
		wg   sync.WaitGroup
	)
	before, err := rate(t, ls[1], "api", a).Limit(ctx)
	require.NoError(t, err)
	at := time.Now()
	for _, l := range ls {
		for range 10 {
			wg.Go(func() {
				_, cut, err := rate(t, l, "api", a).Cut(ctx, 0)
				assert.NoError(t, err)
				if cut {
					mu.Lock()
					cuts++
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	assert.Equal(t, 1, cuts, "30 reports within one episode cut the rate once")
	after, err := rate(t, ls[2], "api", a).Limit(ctx)
	require.NoError(t, err)
	// The cut took the rate at its moment (before.Rate plus slow start's
	// growth since) times 0.75 (Decrease's default); CUBIC's curve then climbs from there, at
	// first by 3 x (what the cut took) per Recover.
	w := before.Rate * slowStart(at)
	rateWithin(t, after.Rate, before.Rate*0.75, w*0.75+3*0.25*w*time.Since(at).Hours(), "after the cut")

	// With short episodes, each report cuts, down to Min and no lower.
	a0 := a
	a0.Episode = -1
	_, err = adaptive.New(ls[0], "floor", a0)
	assert.ErrorIs(t, err, reserve.ErrInvalidOptions)
	a0.Episode = time.Millisecond
	floor := rate(t, ls[0], "floor", a0)
	got := a0.Start
	for range 30 {
		time.Sleep(2 * time.Millisecond) // past the episode
		lim, cut, err := floor.Cut(ctx, 0)
		require.NoError(t, err)
		require.True(t, cut)
		got = lim.Rate
		require.GreaterOrEqual(t, got, a0.Min)
	}
	assert.InDelta(t, a0.Min, got, 1e-6, "30 cuts of 0.75 from 100 end at Min")

	// Slow start (fast here: Double is 1 ms) is held to twice the calls of
	// the last whole second, from the first read: a key read once and
	// idle since stays at Start (before, it was at Max after 20 ms), and
	// with demand it stops at Max.
	// The figures are small, so that a second holds the calls even on a
	// loaded machine (CI beside a CPU hog: 800 reads under -race took
	// over a second three times running).
	fast := adaptive.Config{Start: 5, Min: 1, Max: 100, Double: time.Millisecond, Steps: -1}
	slowDemand := func(key string, calls int) float64 {
		t.Helper()
		for attempt := 1; ; attempt++ {
			// A fresh key each attempt: the one before may have counted a
			// second it spilled into.
			k := fmt.Sprintf("%s-%d", key, attempt)
			if !inOneSecond(t, attempt, func() {
				for range calls {
					_, err := rate(t, ls[0], k, fast).Limit(ctx)
					require.NoError(t, err)
				}
			}) {
				continue
			}
			nextSecond()
			lim, err := rate(t, ls[0], k, fast).Peek(ctx)
			require.NoError(t, err)
			return lim.Rate
		}
	}
	assert.Equal(t, 5.0, slowDemand("idle", 1), "one read, then idle: Start")
	assert.Equal(t, 60.0, slowDemand("some", 30), "30 calls: 2 x 30")
	assert.Equal(t, 100.0, slowDemand("ceiling", 80), "80 calls: Max")

	// After a cut at 10, CUBIC's probing beyond 10 (fast here: Recover is
	// 1 ms) is held to twice the calls of the last whole second: reads
	// count as calls.
	probe := adaptive.Config{Start: 10, Min: 1, Max: 100, Recover: time.Millisecond, Episode: time.Hour, Steps: -1, Plateau: 1}
	_, cut, err := rate(t, ls[0], "probe", probe).Cut(ctx, 0)
	require.NoError(t, err)
	require.True(t, cut)
	demand := func(calls int) float64 {
		t.Helper()
		for attempt := 1; !inOneSecond(t, attempt, func() {
			for range calls {
				_, err := rate(t, ls[0], "probe", probe).Limit(ctx)
				require.NoError(t, err)
			}
		}); attempt++ {
		}
		nextSecond()
		lim, err := rate(t, ls[0], "probe", probe).Peek(ctx)
		require.NoError(t, err)
		return lim.Rate
	}
	assert.Equal(t, 10.0, demand(0), "no demand: the rate cut from")
	assert.Equal(t, 10.0, demand(3), "3 calls: the rate cut from, above 2 x 3")
	assert.Equal(t, 60.0, demand(30), "30 calls: 2 x 30")
	assert.Equal(t, 100.0, demand(80), "80 calls: Max")

	// A call refused after it waited was sent at the rate it was reserved
	// at: the cut starts from that rate when it is the lower.
	slow := adaptive.Config{Start: 100, Min: 10, Max: 1000, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Minute, Steps: -1}
	lim, cut, err = rate(t, ls[0], "paced", slow).Cut(ctx, 50)
	require.NoError(t, err)
	require.True(t, cut)
	assert.InDelta(t, 37.5, lim.Rate, 1e-3, "0.75 x the rate the call was paced at")
	lim, cut, err = rate(t, ls[0], "paced-above", slow).Cut(ctx, 500)
	require.NoError(t, err)
	require.True(t, cut)
	assert.InDelta(t, 75, lim.Rate, 1e-3, "0.75 x the rate now, the lower")
}

// TestAdaptiveForgetAfterLastCall: the learned rate is forgotten Forget
// after the key's last call, not after its first read: each read keeps it.
func TestAdaptiveForgetAfterLastCall(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	c := adaptive.Config{Start: 10, Min: 1, Max: 100, Forget: time.Hour}
	r := rate(t, l, "kept", c)
	_, err = r.Limit(ctx)
	require.NoError(t, err)
	first, err := s.Client.PTTL(ctx, l.RedisKey("kept")+":rate").Result()
	require.NoError(t, err)
	time.Sleep(3 * time.Second)
	_, err = r.Limit(ctx)
	require.NoError(t, err)
	second, err := s.Client.PTTL(ctx, l.RedisKey("kept")+":rate").Result()
	require.NoError(t, err)
	// Renewed: about first again (before: first less the 3 s).
	assert.Greater(t, second, first-1500*time.Millisecond, "the second read, 3 s later, did not renew the record's life")
}

// nextSecond sleeps to just after the next whole second (Redis counts the
// demand in whole seconds of its clock, the same machine's).
// inOneSecond runs calls from the start of the next whole second and
// reports whether they all ran within it: the rule counts the calls of the
// last whole second, and on a loaded machine (CI beside other work) reads
// under -race can spill into the next one, which then holds fewer.
// Such a run proves nothing; after the third, the test fails.
func inOneSecond(t *testing.T, attempt int, calls func()) bool {
	t.Helper()
	nextSecond()
	start := time.Now().Truncate(time.Second)
	calls()
	if end := time.Now(); end.Truncate(time.Second).Equal(start) {
		return true
	} else if attempt == 3 {
		t.Fatalf("attempt %d: the calls ran %v past their second", attempt, end.Sub(start.Add(time.Second)))
	} else {
		t.Logf("attempt %d: the calls ran %v past their second: again", attempt, end.Sub(start.Add(time.Second)))
	}
	return false
}

func nextSecond() {
	now := time.Now()
	time.Sleep(now.Truncate(time.Second).Add(time.Second + 20*time.Millisecond).Sub(now))
}

// TestAdaptiveBadInput: bad settings and an empty key are refused by New
// with a matchable error, a key of another type by every call, and nothing
// is written (nor by Peek).
func TestAdaptiveBadInput(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	good := adaptive.Config{Start: 10, Min: 1, Max: 100}
	for name, tt := range map[string]struct {
		a    adaptive.Config
		want error
	}{
		"min zero":        {adaptive.Config{Start: 10, Max: 100}, reserve.ErrInvalidRate},
		"start below":     {adaptive.Config{Start: 1, Min: 2, Max: 100}, reserve.ErrInvalidRate},
		"max below":       {adaptive.Config{Start: 10, Min: 1, Max: 5}, reserve.ErrInvalidRate},
		"NaN":             {adaptive.Config{Start: math.NaN(), Min: 1, Max: 100}, reserve.ErrInvalidRate},
		"infinite":        {adaptive.Config{Start: 10, Min: 1, Max: math.Inf(1)}, reserve.ErrInvalidRate},
		"decrease 1":      {adaptive.Config{Start: 10, Min: 1, Max: 100, Decrease: 1}, reserve.ErrInvalidRate},
		"recover 1 µs":    {adaptive.Config{Start: 10, Min: 1, Max: 100, Recover: time.Microsecond}, reserve.ErrInvalidOptions},
		"burst negative":  {adaptive.Config{Start: 10, Min: 1, Max: 100, Burst: -1}, reserve.ErrInvalidBurst},
		"double 1 µs":     {adaptive.Config{Start: 10, Min: 1, Max: 100, Double: time.Microsecond}, reserve.ErrInvalidOptions},
		"plateau above 1": {adaptive.Config{Start: 10, Min: 1, Max: 100, Plateau: 1.01}, reserve.ErrInvalidRate},
		"plateau NaN":     {adaptive.Config{Start: 10, Min: 1, Max: 100, Plateau: math.NaN()}, reserve.ErrInvalidRate},
		// The curve would fall from the cut to its plateau, and on.
		"plateau at the decrease":    {adaptive.Config{Start: 10, Min: 1, Max: 100, Plateau: 0.75}, reserve.ErrInvalidRate},
		"plateau below the decrease": {adaptive.Config{Start: 10, Min: 1, Max: 100, Decrease: 0.5, Plateau: 0.4}, reserve.ErrInvalidRate},
	} {
		r, err := adaptive.New(l, "k", tt.a)
		assert.ErrorIs(t, err, tt.want, name)
		assert.Nil(t, r, name)
	}
	for _, paced := range []float64{-1, math.NaN(), math.Inf(1)} {
		_, _, err = rate(t, l, "k", good).Cut(ctx, paced)
		assert.ErrorIs(t, err, reserve.ErrInvalidRate, "paced %v", paced)
	}
	_, err = adaptive.New(l, "", good)
	assert.ErrorIs(t, err, reserve.ErrEmptyKey)
	// The fleet's name: its rate would live beside the fleet's records
	// (P{limiters}:rate), which no key may share.
	_, err = adaptive.New(l, "limiters", good)
	assert.ErrorIs(t, err, reserve.ErrReservedKey)
	_, err = adaptive.New(nil, "k", good)
	assert.ErrorIs(t, err, reserve.ErrInvalidOptions)
	peek, err := rate(t, l, "k", good).Peek(ctx)
	require.NoError(t, err)
	assert.Equal(t, reserve.Limit{Rate: 10, Burst: 1}, peek, "a key never read: Start")
	n, err := s.Client.Exists(ctx, l.RedisKey("k")+":rate").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "bad input (or a peek) wrote the record")

	// The script itself refuses a plateau outside (decrease, 1], for a
	// client in another language, and writes nothing.
	for _, plateau := range []string{"0.75", "0.5", "1.5", "nan", "x"} {
		err := s.Client.Eval(ctx, lua.Adaptive, []string{l.RedisKey("k") + ":rate"},
			"read", "10", "1", "100", "10000", "0.75", "2000", "60000", "2000", "0", "1", plateau).Err()
		assert.ErrorContains(t, err, "PACER_ARG", "plateau %s", plateau)
	}
	require.NoError(t, s.Client.Eval(ctx, lua.Adaptive, []string{l.RedisKey("ok") + ":rate"},
		"peek", "10", "1", "100", "10000", "0.75", "2000", "60000", "2000", "0", "1", "1").Err(), "plateau 1 (CUBIC's)")
	n, err = s.Client.Exists(ctx, l.RedisKey("k")+":rate").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a bad plateau wrote the record")

	require.NoError(t, s.Client.HSet(ctx, l.RedisKey("h")+":rate", "f", "v").Err())
	_, err = rate(t, l, "h", good).Limit(ctx)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, _, err = rate(t, l, "h", good).Cut(ctx, 0)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	typ, err := s.Client.Type(ctx, l.RedisKey("h")+":rate").Result()
	require.NoError(t, err)
	assert.Equal(t, "hash", typ, "the key of another type was changed")
}

// TestAdaptiveRedisDown: without Redis, Limit gives the last rate the Rate
// read (Start if none) and Cut cuts nothing, without an error (the reservation
// made with the rate is paced locally).
func TestAdaptiveRedisDown(t *testing.T) {
	p := redistest.NewProcess(t)
	ctx := context.Background()
	l, err := reserve.New(redis.NewClient(&redis.Options{Addr: p.Addr}), reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet, FailAfter: 1})
	require.NoError(t, err)
	closeLimiter(t, l)
	a := adaptive.Config{Start: 40, Min: 1, Max: 100, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Minute, Steps: -1}
	r := rate(t, l, "k", a)
	_, _, err = r.Cut(ctx, 0)
	require.NoError(t, err)
	want, err := r.Limit(ctx)
	require.NoError(t, err)
	assert.InDelta(t, 30, want.Rate, 1e-3, "0.75 x 40")

	p.Stop(t)
	got, err := r.Limit(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, got, "the last rate read")
	fresh, err := rate(t, l, "k", a).Limit(ctx)
	require.NoError(t, err)
	assert.Equal(t, reserve.Limit{Rate: a.Start, Burst: 1}, fresh, "a Rate that never read: Start")
	got, cut, err := r.Cut(ctx, 0)
	require.NoError(t, err)
	assert.False(t, cut)
	assert.Equal(t, want, got)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// rate returns the Rate of key on l, learned as c says.
func rate(t *testing.T, l *reserve.Limiter, key string, c adaptive.Config) *adaptive.Rate {
	t.Helper()
	r, err := adaptive.New(l, key, c)
	require.NoError(t, err)
	return r
}

// closeLimiter closes l when t ends.
func closeLimiter(t *testing.T, l *reserve.Limiter) {
	t.Cleanup(func() { _ = l.Close() })
}

// TestAdaptiveSteps: the rate given is on the lattice Start x 2^(k/Steps),
// within one half step of the rate learned, and Min and Max as they are;
// so a fleet whose learned rate moves a little keeps one Limit.
func TestAdaptiveSteps(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	exact := adaptive.Config{Start: 100, Min: 10, Max: 1000, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Millisecond, Steps: -1}
	stepped := exact
	stepped.Steps = 16
	onLattice := func(rate float64) bool {
		k := math.Log2(rate/100) * 16
		return math.Abs(k-math.Round(k)) < 1e-9
	}
	seen := map[float64]bool{}
	for i := range 12 {
		key := fmt.Sprint("k", i)
		// Cut i+1 times (each its own episode), read exactly and stepped.
		for range i + 1 {
			_, _, err := rate(t, l, key, exact).Cut(ctx, 0)
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond)
		}
		want, err := rate(t, l, key, exact).Peek(ctx)
		require.NoError(t, err)
		got, err := rate(t, l, key, stepped).Peek(ctx)
		require.NoError(t, err)
		if want.Rate > exact.Min && want.Rate < exact.Max && !onLattice(got.Rate) {
			t.Errorf("%d cuts: rate %v is not on the lattice 100 x 2^(k/16)", i+1, got.Rate)
		}
		if r := got.Rate / want.Rate; r < math.Exp2(-1.0/32)-1e-12 || r > math.Exp2(1.0/32)+1e-12 {
			t.Errorf("%d cuts: stepped %v is more than half a step from %v", i+1, got.Rate, want.Rate)
		}
		if got.Rate < exact.Min || got.Rate > exact.Max {
			t.Errorf("%d cuts: stepped %v outside [Min, Max]", i+1, got.Rate)
		}
		seen[got.Rate] = true
	}
	if len(seen) < 6 {
		t.Errorf("12 cut depths gave %d rates: the steps are too coarse", len(seen))
	}
	// Start and the bounds as they are.
	got, err := rate(t, l, "fresh", stepped).Limit(ctx)
	require.NoError(t, err)
	assert.Equal(t, 100.0, got.Rate, "Start")
	var last float64
	for range 30 {
		lim, _, err := rate(t, l, "floor", stepped).Cut(ctx, 0)
		require.NoError(t, err)
		last = lim.Rate
		time.Sleep(2 * time.Millisecond)
	}
	assert.Equal(t, 10.0, last, "Min")
}

// TestAdaptiveRefresh: within Refresh a Rate reads Redis once (each read
// counts demand and writes it: the record tells), and the calls it served
// meanwhile reach Redis as demand with its next read.
func TestAdaptiveRefresh(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	demand := func() int {
		t.Helper()
		raw, err := s.Client.Get(ctx, l.RedisKey("k")+":rate").Result()
		require.NoError(t, err)
		f := strings.Fields(raw)
		require.Len(t, f, 8)
		cnt, _ := strconv.Atoi(f[6])
		prev, _ := strconv.Atoi(f[7])
		return cnt + prev // this second's and the one before's
	}
	nextSecond()
	r := rate(t, l, "k", adaptive.Config{Start: 10, Min: 1, Max: 100, Refresh: time.Hour})
	for range 50 {
		_, err := r.Limit(ctx)
		require.NoError(t, err)
		_, err = r.Peek(ctx)
		require.NoError(t, err)
	}
	assert.Equal(t, 1, demand(), "50 Limits and 50 Peeks within Refresh: one read")

	r2 := rate(t, l, "k", adaptive.Config{Start: 10, Min: 1, Max: 100, Refresh: 50 * time.Millisecond})
	for range 10 {
		_, err := r2.Limit(ctx) // 1 read, 9 served from it
		require.NoError(t, err)
	}
	assert.Equal(t, 2, demand(), "a second Rate's first read")
	time.Sleep(60 * time.Millisecond)
	_, err = r2.Limit(ctx) // stale: reads, with the 9 served since
	require.NoError(t, err)
	assert.Equal(t, 12, demand(), "the read after Refresh carries the calls served since")
}

// TestAdaptiveObserve: Config.Observer sees each rate read from Redis and
// each cut, with the key, before steps; a read within Refresh calls no
// Redis and observes nothing. Start is Max, so slow start cannot move the
// rate between the reads and the figures are exact.
func TestAdaptiveObserve(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	obs := &observer{}
	c := adaptive.Config{Start: 100, Min: 10, Max: 100, Refresh: time.Hour, Episode: time.Hour, Observer: obs}
	r := rate(t, l, "observed", c)
	for range 3 {
		_, err := r.Limit(ctx) // the first reads, the others take it within Refresh
		require.NoError(t, err)
	}
	_, cut, err := r.Cut(ctx, 100)
	require.NoError(t, err)
	require.True(t, cut)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	assert.Equal(t, []seen{{"observed", 100}, {"observed", 75}}, obs.got)
}

type seen struct {
	key  string
	rate float64
}

// observer is an adaptive.Observer that writes down what it is told.
type observer struct {
	mu  sync.Mutex
	got []seen
}

func (o *observer) ObserveRate(key string, rate float64) {
	o.mu.Lock()
	o.got = append(o.got, seen{key, rate})
	o.mu.Unlock()
}

// TestAdaptiveFreshRefusal: within an episode, a refusal of a call paced
// at the rate before the cut (above the midpoint between the rate cut from
// and the rate cut to) changes nothing, and one of a call paced at the rate
// the cut left (below the midpoint) cuts again at once, from that rate,
// levelling off lower (the limit fell): the rates the script computes,
// exactly, with a curve that does not move within the test (Recover and
// Double of 1,000 h).
func TestAdaptiveFreshRefusal(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	c := adaptive.Config{Start: 100, Min: 1, Max: 1000, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Hour, Steps: -1}
	r := rate(t, l, "fell", c)
	lim, cut, err := r.Cut(ctx, 100)
	require.NoError(t, err)
	require.True(t, cut)
	assert.InDelta(t, 75, lim.Rate, 1e-6, "the first cut: 0.75 x 100")
	// The midpoint of that cut: (75 + 100) / 2 = 87.5.
	for _, paced := range []float64{0, 100, 87.6} {
		lim, cut, err = r.Cut(ctx, paced)
		require.NoError(t, err)
		assert.False(t, cut, "a refusal paced at %v within the episode: sent before the cut (or unknown)", paced)
		assert.InDelta(t, 75, lim.Rate, 1e-6)
	}
	lim, cut, err = r.Cut(ctx, 75)
	require.NoError(t, err)
	require.True(t, cut, "a refusal paced at the rate the cut left: that rate is still too high")
	assert.InDelta(t, 56.25, lim.Rate, 1e-6, "0.75 x 75")
	// This cut's midpoint is (56.25 + 75) / 2 = 65.625: a refusal of a
	// call paced at the first cut's rate is now an echo.
	lim, cut, err = r.Cut(ctx, 75)
	require.NoError(t, err)
	assert.False(t, cut)
	assert.InDelta(t, 56.25, lim.Rate, 1e-6)
	lim, cut, err = r.Cut(ctx, 56)
	require.NoError(t, err)
	require.True(t, cut)
	assert.InDelta(t, 42, lim.Rate, 1e-6, "0.75 x 56")

	// Where the curves level off: with Recover 1 ms they are there at
	// once, and with no demand the rate stays at the plateau. After a
	// first cut at 100: Plateau (0.95) x 100; after a cut below that
	// plateau (the limit fell), the lower of Plateau and (1 + 0.75) / 2 of
	// the rate cut from (CUBIC's fast convergence); Plateau 1 is CUBIC's.
	level := func(key string, plateau float64, paced ...float64) float64 {
		t.Helper()
		c := adaptive.Config{Start: 100, Min: 1, Max: 1000, Recover: time.Millisecond, Episode: time.Millisecond, Steps: -1, Refresh: -1, Plateau: plateau}
		r := rate(t, l, key, c)
		for _, p := range paced {
			time.Sleep(5 * time.Millisecond) // past the episode
			_, cut, err := r.Cut(ctx, p)
			require.NoError(t, err)
			require.True(t, cut)
		}
		time.Sleep(5 * time.Millisecond) // past Recover
		lim, err := r.Peek(ctx)
		require.NoError(t, err)
		return lim.Rate
	}
	assert.InDelta(t, 95, level("plateau", 0, 100), 1e-6, "default Plateau: 0.95 x 100")
	assert.InDelta(t, 100, level("cubic", 1, 100), 1e-6, "Plateau 1: back to 100")
	assert.InDelta(t, 70, level("fell-level", 0, 100, 80), 1e-6, "80 < 95: 0.875 x 80")
	assert.InDelta(t, 56, level("fell-low", 0.8, 100, 70), 1e-6, "70 < 80: 0.8 (below 0.875) x 70")
}
