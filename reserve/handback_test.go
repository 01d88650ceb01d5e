package reserve_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/internal/syncbuf"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// keyHold is a go-redis hook that, once armed, holds the next script call
// on one Redis key until released.
type keyHold struct {
	passHook
	armed
	key string
}

func (h *keyHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k, ok := scriptKey(cmd); ok && k == h.key {
			h.stop()
		}
		return next(ctx, cmd)
	}
}

// TestNoLocalGrantDuringHandback: when Redis answers again, the Limiter
// hands back what its local fallback granted, key by key, and switches
// back to Redis after the last. A call on a key already handed back, made
// while later keys were still being handed back, was granted by the local
// fallback, and that slot never reached Redis: Redis then granted the same
// instant again (the cmd/pacerbench cluster phase, 100 processes through a
// master killed: 59 calls in a second of a key at 50/s, burst 5, 8 of them
// slots granted locally during their process's handback, at the instants
// of slots Redis granted later). The test holds the handback of key "b"
// (after "a"'s), reserves on "a" meanwhile, lets the handback finish, and
// has another member reserve on "a": at burst 1 the two slots must be
// 1/rate apart.
func TestNoLocalGrantDuringHandback(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	defer c.Close()
	hold := &keyHold{key: prefix + "{b}"}
	c.AddHook(hold)
	l, err := reserve.New(c, reserve.Options{KeyPrefix: prefix, FailAfter: 1, ProbeInterval: 20 * time.Millisecond,
		CallTimeout: 200 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	require.Equal(t, hold.key, l.RedisKey("b"))
	lim := reserve.Limit{Rate: 10, Burst: 1}
	for _, k := range []string{"a", "b"} {
		_, err := l.Reserve(ctx, k, lim)
		require.NoError(t, err)
	}

	p.Disable(t)
	for _, k := range []string{"a", "b"} {
		r, err := l.Reserve(ctx, k, lim)
		require.NoError(t, err)
		require.True(t, r.Local(), "%s: a reservation while Redis is away", k)
	}
	entered, release := hold.arm()
	defer release()
	p.Enable(t)
	select {
	case <-entered: // "a" is handed back, "b" is on its way
	case <-time.After(30 * time.Second):
		t.Fatal("the handback of b never came")
	}
	var (
		during *reserve.Reservation
		errD   error
		wg     sync.WaitGroup
	)
	wg.Go(func() { during, errD = l.Reserve(ctx, "a", lim) })
	// With the bug the local fallback answers at once; the fix waits for
	// the handback. Either way the reservation is asked for during it.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(300 * time.Millisecond):
	}
	release()
	wg.Wait()
	require.NoError(t, errD)
	backOnRedis(t, l)
	// Another member of the fleet, on Redis: it knows only what Redis
	// knows.
	l2, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l2)
	after, err := l2.Reserve(ctx, "a", lim)
	require.NoError(t, err)
	require.False(t, after.Local())
	t.Logf("during the handback: local %v at %v; after it, another member: local %v at %v",
		during.Local(), during.Time().Format("15:04:05.000"), after.Local(), after.Time().Format("15:04:05.000"))
	// With the bug, the call during the handback was granted locally, at
	// an instant Redis granted again. The fix waits for the handback, so
	// both slots are Redis's: compared on the server's clock, since local
	// times place slots by the clock estimate of their replies, which a
	// loaded machine's round trips shift by milliseconds (CI beside a CPU
	// hog: 97.9 ms).
	require.False(t, during.Local(), "a call during the handback was granted by the local fallback at %v",
		during.Time().Format("15:04:05.000"))
	first, ok := reserve.ServerSlot(during)
	require.True(t, ok)
	second, ok := reserve.ServerSlot(after)
	require.True(t, ok)
	require.GreaterOrEqual(t, second-first, int64(99*time.Millisecond),
		"slots of a at burst 1, 10/s: one reserved during the handback at %v, one after it, by another member, %v later",
		during.Time().Format("15:04:05.000"), time.Duration(second-first))
}

// TestHandbackMovesSleepers: a process paces locally at its share of the
// fleet, so its local queue runs far ahead of the fleet's (a 200-process
// Cluster run: slots of its rank 12 to 28 s ahead). Back on Redis, it
// handed its latest local slot to Redis as the key's floor, and the whole
// fleet's callers waited behind a few sleepers: the judged keys ran at 0.4
// to 0.7 calls/s of 50 after a master's kill. Now the sleepers whose local
// slots lie ahead take slots on Redis instead (MovedBack), and the floor
// is the latest slot still used as granted. a and b share the fleet (a
// share of 1/s each at 2/s); a loses Redis and puts 6 sleepers on local
// slots up to 6 s ahead; back on Redis, its sleepers move to Redis, which
// grants slots before the end of a's local queue, and every slot fired
// on, local or Redis, a's or b's, is a whole 1/rate from the next.
func TestHandbackMovesSleepers(t *testing.T) {
	// Mostly waiting, on a server of its own: beside the other parallel
	// tests (the package's time in CI).
	t.Parallel()
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	rec := newRecorder()
	opts := reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 100 * time.Millisecond,
		ProbeInterval: 20 * time.Millisecond, CallTimeout: 200 * time.Millisecond, FailAfter: 1}
	b, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, b)
	p := redistest.NewProxy(t, s.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	opts.Metrics = rec
	// a's log, its fleet views (Debug) included, shown if a finds no share.
	var aLog syncbuf.Buffer
	opts.Logger = slog.New(slog.NewTextHandler(&aLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a, err := reserve.New(c, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	// Both know the fleet, and each knows the other knows it (a is no
	// newcomer: its share is its own in an outage).
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, 5*time.Millisecond)
	time.Sleep(3 * opts.HeartbeatInterval)
	lim := reserve.Limit{Rate: 2, Burst: 1} // 500 ms apart; a's share 1/s
	const key = "back"
	var fired []int64 // server-clock slots used, local or Redis
	// One slot each on Redis: a's local schedule starts from the state it
	// last saw, after both.
	for _, l := range []*reserve.Limiter{b, a} {
		r, err := l.Reserve(ctx, key, lim)
		require.NoError(t, err)
		ns, ok := reserve.ServerSlot(r)
		require.True(t, ok)
		fired = append(fired, ns)
	}

	p.Disable(t)
	var rs []*reserve.Reservation
	// With a deadline: a caller with no share waits for one (awaitShare),
	// and in one CI run (0703318, quiet) a waited here for 8 minutes until
	// the run was stopped; the error says which share it lacked.
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	for len(rs) < 6 {
		r, err := a.Reserve(rctx, key, lim)
		if err != nil {
			lines := strings.Split(aLog.String(), "\n")
			t.Logf("a's log, the last lines:\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		require.NoError(t, err, "a's reservation %d with Redis gone", len(rs))
		if !r.Local() {
			ns, ok := reserve.ServerSlot(r) // reached Redis before a noticed
			require.True(t, ok)
			fired = append(fired, ns)
			continue
		}
		rs = append(rs, r)
	}
	locals := make([]int64, len(rs))
	for i, r := range rs {
		var ok bool
		locals[i], ok = reserve.LocalSlot(r)
		require.True(t, ok)
	}
	horizon := locals[len(rs)-1]
	errs := make([]error, len(rs))
	var wg sync.WaitGroup
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i, r := range rs {
		wg.Go(func() { errs[i] = r.Sleep(sctx) })
	}
	// The last sleeper, 5 s after the first, is asleep before its check
	// (the first ones may be past theirs on a loaded machine).
	require.Eventually(t, func() bool { return a.LocalSleeping(rs[len(rs)-1]) }, 30*time.Second, time.Millisecond)
	p.Enable(t)
	backOnRedis(t, a)
	// Another member, on Redis: it knows only what Redis knows.
	after, err := b.Reserve(ctx, key, lim)
	require.NoError(t, err)
	afterNS, ok := reserve.ServerSlot(after)
	require.True(t, ok)
	fired = append(fired, afterNS)
	wg.Wait()
	movedBack := 0
	for i, r := range rs {
		require.NoError(t, errs[i])
		if ns, ok := reserve.ServerSlot(r); ok {
			movedBack++
			fired = append(fired, ns)
		} else {
			ns, _ := reserve.LocalSlot(r)
			fired = append(fired, ns)
		}
	}
	earliest := int64(math.MaxInt64) // the earliest slot Redis granted a moved sleeper
	for i, r := range rs {
		ns, ok := reserve.ServerSlot(r)
		if ok {
			earliest = min(earliest, ns)
		} else {
			ns, _ = reserve.LocalSlot(r)
		}
		t.Logf("sleeper %d: local at %+v of the horizon, now on Redis %v at %+v", i, time.Duration(locals[i]-horizon), ok, time.Duration(ns-horizon))
	}
	t.Logf("b before at %+v, after at %+v of a's local horizon", time.Duration(fired[0]-horizon), time.Duration(afterNS-horizon))
	require.Positive(t, movedBack, "no local sleeper took a slot on Redis")
	assert.False(t, rs[len(rs)-1].Local(), "the last local sleeper kept its local slot")
	// The floor a handed Redis is not the end of its local queue. (Which
	// of b's call and the moved sleepers' reaches Redis first, and whether
	// a still holds b's rank then, right after its outage, varies.)
	assert.Less(t, earliest, horizon, "Redis granted nothing before the end of a's local queue: the handback's floor held the key there")
	// Each moved back once; one past its check that woke late on a loaded
	// machine may have taken a fresh slot on Redis too (MovedLate).
	back := countOf(rec.snapshot().moved, reserve.MovedBack)
	assert.Positive(t, back, "no sleeper counted as moved back")
	assert.LessOrEqual(t, back, movedBack, "sleepers counted as moved back, of those on Redis at the end")
	// Local slots are placed by a's estimate of the server's clock, Redis's
	// exactly: 10 ms of estimate error allowed.
	slices.Sort(fired)
	for i := 1; i < len(fired); i++ {
		assert.GreaterOrEqual(t, fired[i]-fired[i-1], int64(490*time.Millisecond),
			"slots %d and %d of %d only %v apart, want 500 ms", i-1, i, len(fired), time.Duration(fired[i]-fired[i-1]))
	}
}

// countOf counts v in xs.
func countOf(xs []string, v string) int {
	n := 0
	for _, x := range xs {
		if x == v {
			n++
		}
	}
	return n
}

// TestHandbackKeepsFullWindow: a process pacing locally fills its window
// band's window, and its next callers sleep into the next window. The
// store's state keeps one window per band, the latest, so the units of the
// full window were gone from it; back on Redis, the sleepers move to
// Redis (MovedBack) and leave the floor, which then no longer reached the
// next window, and the handback carried nothing of the full one. Redis
// (restarted empty, or never told) granted the window's N again in it
// (combination runner, seed 14: 8 in a window of 6). Every window holds at
// most N: the local grants that fire and every slot Redis grants.
//
// The window current when the process switches is closed to it
// (TestLocalClosesWindowAtSwitch), so the window it fills is the next: the
// current one ends 10 s after the outage begins. A machine too slow to
// switch within those 10 s tries again on another key.
func TestHandbackKeepsFullWindow(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	ctx := context.Background()
	opts := reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 100 * time.Millisecond,
		ProbeInterval: 20 * time.Millisecond, CallTimeout: 200 * time.Millisecond, FailAfter: 1}
	a, p := viaProxy(t, s, opts)
	require.Eventually(t, func() bool { return a.FleetSize() == 1 }, 30*time.Second, 5*time.Millisecond)

	// Windows of 2 an hour; the current one (0) ends 10 s from now, and the
	// local grants fill window 1.
	const n = 2
	length := time.Hour
	attempt := func(try int) bool {
		origin := time.Now().Add(10*time.Second - length).Truncate(time.Millisecond)
		req := reserve.Request{Key: fmt.Sprintf("fullwin%d", try), Policy: reserve.Policy{{Name: "win", Unit: reserve.PermitsUnit,
			Window: reserve.Window{N: n, Length: length, Origin: origin}}}, Cost: reserve.Permits(1)}
		window := func(ns int64) int64 { return (ns - origin.UnixNano()) / int64(length) }

		p.Disable(t)
		var redisSlots []int64 // every slot Redis granted
		var fired []int64      // the local slots used as granted
		var sleepers []*reserve.Reservation
		late := false
		for len(fired)+len(sleepers) < 2*n {
			r, err := a.ReserveN(ctx, req)
			require.NoError(t, err)
			if ns, ok := reserve.ServerSlot(r); ok { // reached Redis before a noticed
				redisSlots = append(redisSlots, ns)
				continue
			}
			ns, ok := reserve.LocalSlot(r)
			require.True(t, ok)
			require.Positive(t, window(ns), "a local grant in the window current at the switch")
			switch {
			case len(fired)+len(sleepers) == 0 && window(ns) > 1:
				late = true // switched after window 0 ended
			case window(ns) == 1:
				fired = append(fired, ns)
			default:
				sleepers = append(sleepers, r)
			}
			if late {
				require.NoError(t, r.Cancel(ctx))
				break
			}
		}
		if late {
			p.Enable(t)
			backOnRedis(t, a)
			t.Logf("try %d: the switch came after window 0 ended", try)
			return false
		}
		require.NotEmpty(t, sleepers, "no local grant in window 2")
		sctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer wg.Wait()
		defer cancel() // before the Wait: a sleeper on window 2 sleeps an hour
		for _, r := range sleepers {
			wg.Go(func() { _ = r.Sleep(sctx) })
		}
		for _, r := range sleepers {
			require.Eventually(t, func() bool { return a.LocalSleeping(r) }, 30*time.Second, time.Millisecond)
		}
		p.Enable(t)
		backOnRedis(t, a)
		// The sleepers take slots on Redis.
		for _, r := range sleepers {
			require.Eventually(t, func() bool { _, ok := reserve.ServerSlot(r); return ok }, 30*time.Second, time.Millisecond,
				"a sleeper kept its local slot")
			ns, _ := reserve.ServerSlot(r)
			redisSlots = append(redisSlots, ns)
		}
		// New callers on Redis, until one is granted a slot in window 2.
		for range 2 * n {
			r, err := a.ReserveN(ctx, req)
			require.NoError(t, err)
			ns, ok := reserve.ServerSlot(r)
			require.True(t, ok, "a call after the handback was granted locally")
			redisSlots = append(redisSlots, ns)
			require.NoError(t, r.Cancel(ctx))
			if window(ns) > 1 {
				break
			}
		}
		inFull := len(fired)
		wins := make([]int64, len(redisSlots))
		for i, ns := range redisSlots {
			wins[i] = window(ns)
			if wins[i] == 1 {
				inFull++
			}
		}
		assert.LessOrEqual(t, inFull, n, "window 1 holds %d: %d local grants fired, Redis's slots in windows %v",
			inFull, len(fired), wins)
		return true
	}
	for try := range 5 {
		if attempt(try) {
			return
		}
	}
	t.Fatal("5 tries: the switch never came within 10 s of the outage's start")
}
