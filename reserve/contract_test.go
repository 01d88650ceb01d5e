package reserve_test

import (
	"context"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// backend is a Redis the contract suite runs against.
type backend struct {
	// client is the tests' own: it reads and plants what they check.
	client redis.UniversalClient
	// user, if set, is the client the Limiters get (a Redis user with only
	// the permissions pacer needs); else client.
	user redis.UniversalClient
	// elapse lets d of real time pass, as the server's key expiry sees it.
	elapse func(d time.Duration)
	// routed is set for a deployment that runs the scripts as a single
	// redis-server does, with only the routing or the permissions
	// changed (Cluster, an ACL user): the regression seeds, which replay
	// the scripts' arithmetic, run on a single server and on miniredis
	// (the two Lua interpreters), not again there.
	routed bool
	// embedded: miniredis, the examples' default when no Redis is given.
	embedded bool
}

// trials is how many random trials a differential test runs on b, of the
// n it runs on a single redis-server: a third (at least 4) on a routed
// deployment and on miniredis, which run the same scripts (routing and
// permissions need fewer trials than the arithmetic; the regression seeds
// still run whole on miniredis). PACER_CONTRACT=full runs n everywhere.
func (b backend) trials(n int) int {
	if (!b.routed && !b.embedded) || os.Getenv("PACER_CONTRACT") == "full" {
		return n
	}
	return max(n/3, 4)
}

// pacer returns the client a Limiter under test talks through.
func (b backend) pacer() redis.UniversalClient {
	if b.user != nil {
		return b.user
	}
	return b.client
}

// redisBackend is a single redis-server (or REDIS_URL).
func redisBackend(t *testing.T) backend {
	s := redistest.New(t)
	return backend{client: s.Client, elapse: time.Sleep}
}

// clusterBackend is a 3-master Redis Cluster.
func clusterBackend(t *testing.T) backend {
	c := redistest.NewCluster(t, 3)
	return backend{client: c.Client, elapse: time.Sleep, routed: true}
}

// miniredisBackend is the embedded default (gopher-lua, which prints and
// rounds numbers differently from real Redis).
func miniredisBackend(t *testing.T) backend {
	mr, c := redistest.NewMiniredis(t)
	return backend{client: c, embedded: true, elapse: func(d time.Duration) {
		time.Sleep(d)
		mr.FastForward(d) // miniredis expires keys only when told time passed
	}}
}

func TestContractRedis(t *testing.T)   { runContract(t, redisBackend(t)) }
func TestContractCluster(t *testing.T) { runContract(t, clusterBackend(t)) }

// TestContractMiniredis runs the suite on the embedded default the examples
// use when no Redis address is given.
func TestContractMiniredis(t *testing.T) { runContract(t, miniredisBackend(t)) }

// runContract is the behaviour every Redis deployment must give.
func runContract(t *testing.T, b backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, backend)
	}{
		{"BadInput", testBadInput},
		{"WrongType", testWrongType},
		{"CanceledContext", testCanceledContext},
		{"DeadlineTooNear", testDeadlineTooNear},
		{"WaitSleepsUntilSlot", testWaitSleepsUntilSlot},
		{"CancelDuringSleep", testCancelDuringSleep},
		{"TryReserve", testTryReserve},
		{"Allow", testAllow},
		{"CancelTwice", testCancelTwice},
		{"Pause", testPause},
		{"Peek", testPeek},
		{"Concurrent", testConcurrent},
		{"QueueTooLong", testQueueTooLong},
		{"ServerClockStepsBack", testServerClockStepsBack},
		{"Differential", testDifferential},
		{"DifferentialCancel", testDifferentialCancel},
		{"DifferentialRegressions", testDifferentialRegressions},
		{"Properties", testProperties},
		{"PolicyBadInput", testPolicyBadInput},
		{"PolicyDifferential", testPolicyDifferential},
		{"PolicyOneSlot", testPolicyOneSlot},
		{"WindowQuota", testWindowQuota},
		{"Settle", testSettle},
		{"PolicyProperties", testPolicyProperties},
		{"CancelBound", testCancelBound},
		{"CancelBoundLimit", testCancelBoundLimit},
		{"SleepIntoPause", testSleepIntoPause},
		{"SleepLate", testSleepLate},
		{"SleepLateWindow", testSleepLateWindow},
		{"SleepAgainLate", testSleepAgainLate},
		{"SleepLateAgain", testSleepLateAgain},
		{"Fair", testFair},
	}
	// Expiry runs alone, before the others: letting time pass on miniredis
	// (FastForward) expires every key on the server, not just its own.
	t.Run("Expiry", func(t *testing.T) { testExpiry(t, b) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, b)
		})
	}
}

// epoch is where fake clocks start: not on a whole microsecond, on purpose.
var epoch = time.Date(2026, 11, 22, 1, 2, 3, 456789123, time.UTC)

func newLimiter(t *testing.T, b backend, clk reserve.Clock) *reserve.Limiter {
	t.Helper()
	// The contract is Redis's: FailClosed, so that a slow call on a loaded
	// test machine fails the test instead of being paced locally, and a
	// CallTimeout far above any scheduling hiccup.
	l, err := reserve.New(b.pacer(), reserve.Options{Clock: clk, ClientTime: clk != nil, KeyPrefix: redistest.Prefix(t),
		FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	return l
}

// newLimiterFormat is newLimiter writing state format format (1, 2 or 3):
// the fleet's format is set under its prefix before the Limiter starts, as
// `pacer format` sets it, so that its first heartbeat tells it. The
// property and differential tests take turns (trialFormat): the writer's
// default alone hid a Limit's bound written in format 2 (55f5548).
func newLimiterFormat(t *testing.T, b backend, clk reserve.Clock, format int) *reserve.Limiter {
	t.Helper()
	prefix := redistest.Prefix(t)
	if format != 2 {
		require.NoError(t, b.client.Set(context.Background(), layout.FormatKey(prefix), strconv.Itoa(format), 0).Err())
	}
	l, err := reserve.New(b.pacer(), reserve.Options{Clock: clk, ClientTime: clk != nil, KeyPrefix: prefix,
		FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	require.Equal(t, format, l.WritesFormat(), "the Limiter's state format")
	return l
}

// trialFormat is the state format trial i of a property or differential
// test writes: 1, 2 and 3 in turn, by pairs.
func trialFormat(i int) int { return 1 + i/2%3 }

// snapshot returns everything Redis holds for key: the type and value of its
// state, and of its stored limit and adjustment memory if any.
func snapshot(t *testing.T, b backend, l *reserve.Limiter, key string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, suffix := range []string{"", ":limit", ":done"} {
		rk := l.RedisKey(key) + suffix
		typ, err := b.client.Type(ctx, rk).Result()
		require.NoError(t, err)
		if suffix == "" {
			out["type"] = typ
		} else if typ == "none" {
			continue
		}
		switch typ {
		case "string":
			v, err := b.client.Get(ctx, rk).Result()
			require.NoError(t, err)
			out["value"+suffix] = v
		case "hash":
			h, err := b.client.HGetAll(ctx, rk).Result()
			require.NoError(t, err)
			for k, v := range h {
				out[k+suffix] = v
			}
		}
	}
	return out
}

func TestNew(t *testing.T) {
	_, err := reserve.New(nil, reserve.Options{})
	assert.Error(t, err)
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	for _, p := range []string{"a{", "}b", "{x}"} {
		_, err := reserve.New(c, reserve.Options{KeyPrefix: p})
		assert.ErrorIs(t, err, reserve.ErrInvalidPrefix, "New(KeyPrefix %q)", p)
	}
	l, err := reserve.New(c, reserve.Options{Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	assert.Equal(t, "pacer:{api.example.com}", l.RedisKey("api.example.com"))
	l, err = reserve.New(c, reserve.Options{KeyPrefix: "app:", Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	assert.Equal(t, "app:{k}", l.RedisKey("k"))
	for _, o := range []reserve.Options{
		{CallTimeout: -1}, {ProbeInterval: -time.Second}, {HeartbeatInterval: -1}, {FailAfter: -1},
	} {
		_, err := reserve.New(c, o)
		assert.Error(t, err, "New(%+v)", o)
	}
}

func TestEvery(t *testing.T) {
	assert.Equal(t, reserve.Limit{Rate: 10, Burst: 1}, reserve.Every(100*time.Millisecond))
	assert.Equal(t, reserve.Limit{Rate: 0.5, Burst: 1}, reserve.Every(2*time.Second))
	assert.ErrorIs(t, reserve.Every(0).Validate(), reserve.ErrInvalidRate)
	assert.ErrorIs(t, reserve.Every(-time.Second).Validate(), reserve.ErrInvalidRate)
}

// TestSliding: Sliding builds the smoothest Limit for n in any window w, and
// refuses at once what it cannot build.
func TestSliding(t *testing.T) {
	lim, err := reserve.Sliding(10, time.Second)
	require.NoError(t, err)
	assert.Equal(t, reserve.Limit{Rate: 9, Burst: 1}, lim)
	for _, tc := range []struct {
		n int
		w time.Duration
	}{{1, time.Second}, {0, time.Second}, {-5, time.Second}, {10, 0}, {10, -time.Second}, {1 << 40, time.Second}} {
		lim, err := reserve.Sliding(tc.n, tc.w)
		assert.ErrorIs(t, err, reserve.ErrInvalidRate, "Sliding(%d, %v)", tc.n, tc.w)
		assert.Equal(t, reserve.Limit{}, lim, "Sliding(%d, %v)", tc.n, tc.w)
	}
}

// TestRequestForms: a Request of n permits of one Limit written by hand
// paces exactly as Single's (which takes the cached path), and a fractional
// number of permits takes the policy path.
func TestRequestForms(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l, err := reserve.New(s.Client, reserve.Options{Clock: clk, ClientTime: clk != nil, KeyPrefix: redistest.Prefix(t),
		FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 10, Burst: 3}
	byHand := reserve.Request{Key: "b", Policy: reserve.Policy{{Name: reserve.PermitsUnit, Limit: lim}}, Cost: reserve.Cost{reserve.PermitsUnit: 2}}
	for i := range 4 {
		a, err := l.ReserveN(ctx, reserve.Single("a", lim, 2))
		require.NoError(t, err)
		b, err := l.ReserveN(ctx, byHand)
		require.NoError(t, err)
		assert.Equal(t, a.Time(), b.Time(), "reservation %d: Single and a Request by hand differ", i)
		assert.Equal(t, a.Cost(), b.Cost())
	}
	half := reserve.Request{Key: "c", Policy: lim.Policy(), Cost: reserve.Cost{reserve.PermitsUnit: 0.5}}
	r, err := l.ReserveN(ctx, half)
	require.NoError(t, err)
	assert.Equal(t, reserve.Cost{reserve.PermitsUnit: 0.5}, r.Cost())
}

func testBadInput(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	valid := reserve.Limit{Rate: 10, Burst: 5}
	// A bucket with state, which no bad call may change.
	for range 7 {
		_, err := l.Reserve(ctx, "k", valid)
		require.NoError(t, err)
	}
	before := snapshot(t, b, l, "k")

	cases := []struct {
		name string
		key  string
		lim  reserve.Limit
		n    int
		want error
	}{
		{"empty key", "", valid, 1, reserve.ErrEmptyKey},
		{"the fleet's key", "limiters", valid, 1, reserve.ErrReservedKey},
		{"zero rate", "k", reserve.Limit{Rate: 0, Burst: 5}, 1, reserve.ErrInvalidRate},
		{"negative rate", "k", reserve.Limit{Rate: -1, Burst: 5}, 1, reserve.ErrInvalidRate},
		{"NaN rate", "k", reserve.Limit{Rate: math.NaN(), Burst: 5}, 1, reserve.ErrInvalidRate},
		{"+Inf rate", "k", reserve.Limit{Rate: math.Inf(1), Burst: 5}, 1, reserve.ErrInvalidRate},
		{"-Inf rate", "k", reserve.Limit{Rate: math.Inf(-1), Burst: 5}, 1, reserve.ErrInvalidRate},
		{"zero burst", "k", reserve.Limit{Rate: 10, Burst: 0}, 1, reserve.ErrInvalidBurst},
		{"negative burst", "k", reserve.Limit{Rate: 10, Burst: -3}, 1, reserve.ErrInvalidBurst},
		{"fill over 10 years", "k", reserve.Limit{Rate: 1e-9, Burst: 1}, 1, reserve.ErrInvalidLimit},
		{"zero n", "k", valid, 0, reserve.ErrInvalidN},
		{"negative n", "k", valid, -2, reserve.ErrInvalidN},
		{"n over burst", "k", valid, 6, reserve.ErrExceedsBurst},
	}
	for _, tc := range cases {
		_, err := l.ReserveN(ctx, reserve.Single(tc.key, tc.lim, tc.n))
		assert.ErrorIs(t, err, tc.want, "%s: Reserve(%q, %+v, %d)", tc.name, tc.key, tc.lim, tc.n)
		_, err = l.TryReserveN(ctx, reserve.Single(tc.key, tc.lim, tc.n), time.Hour)
		assert.ErrorIs(t, err, tc.want, "%s: TryReserveN(%q, %+v, %d)", tc.name, tc.key, tc.lim, tc.n)
		err = l.WaitN(ctx, reserve.Single(tc.key, tc.lim, tc.n))
		assert.ErrorIs(t, err, tc.want, "%s: WaitN(%q, %+v, %d)", tc.name, tc.key, tc.lim, tc.n)
		_, err = l.Peek(ctx, reserve.Single(tc.key, tc.lim, tc.n))
		assert.ErrorIs(t, err, tc.want, "%s: Peek(%q, %+v, %d)", tc.name, tc.key, tc.lim, tc.n)
		ok, err := l.AllowN(ctx, reserve.Single(tc.key, tc.lim, tc.n))
		assert.ErrorIs(t, err, tc.want, "%s: AllowN(%q, %+v, %d)", tc.name, tc.key, tc.lim, tc.n)
		assert.False(t, ok, "%s: AllowN(%q, %+v, %d) allowed", tc.name, tc.key, tc.lim, tc.n)
		if tc.n == 1 {
			_, err = l.Reserve(ctx, tc.key, tc.lim)
			assert.ErrorIs(t, err, tc.want, "%s: Reserve(%q, %+v)", tc.name, tc.key, tc.lim)
			err = l.Wait(ctx, tc.key, tc.lim)
			assert.ErrorIs(t, err, tc.want, "%s: Wait(%q, %+v)", tc.name, tc.key, tc.lim)
			_, err = l.Allow(ctx, tc.key, tc.lim)
			assert.ErrorIs(t, err, tc.want, "%s: Allow(%q, %+v)", tc.name, tc.key, tc.lim)
		}
	}
	assert.ErrorIs(t, l.Pause(ctx, "", time.Second), reserve.ErrEmptyKey, "Pause of the empty key")
	assert.ErrorIs(t, l.Pause(ctx, "limiters", time.Second), reserve.ErrReservedKey, "Pause of the fleet's key")
	for _, d := range []time.Duration{0, -time.Second} {
		assert.ErrorIs(t, l.Pause(ctx, "k", d), reserve.ErrInvalidDuration, "Pause(%v)", d)
	}
	_, err := l.TryReserveN(ctx, reserve.Single("k", valid, 1), -time.Nanosecond)
	assert.ErrorIs(t, err, reserve.ErrInvalidDuration)

	assert.Equal(t, before, snapshot(t, b, l, "k"), "state changed by bad input")
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, ""), "key created for the empty key")
}

func testWrongType(t *testing.T, b backend) {
	ctx := context.Background()
	l := newLimiter(t, b, fakeclock.New(epoch))
	lim := reserve.Limit{Rate: 10, Burst: 2}

	// A reservation made before something else took the key's name.
	r, err := l.Reserve(ctx, "s", lim)
	require.NoError(t, err)
	require.NoError(t, b.client.Set(ctx, l.RedisKey("s"), "keep", 0).Err())
	require.NoError(t, b.client.RPush(ctx, l.RedisKey("list"), "a", "b").Err())

	for _, key := range []string{"s", "list"} {
		_, err := l.Reserve(ctx, key, lim)
		assert.ErrorIs(t, err, reserve.ErrWrongType, "Reserve(%q)", key)
		_, err = l.TryReserveN(ctx, reserve.Single(key, lim, 1), 0)
		assert.ErrorIs(t, err, reserve.ErrWrongType, "TryReserveN(%q)", key)
		assert.ErrorIs(t, l.Wait(ctx, key, lim), reserve.ErrWrongType, "Wait(%q)", key)
		_, err = l.Peek(ctx, reserve.Single(key, lim, 1))
		assert.ErrorIs(t, err, reserve.ErrWrongType, "Peek(%q)", key)
		assert.ErrorIs(t, l.Pause(ctx, key, time.Second), reserve.ErrWrongType, "Pause(%q)", key)
	}
	assert.ErrorIs(t, r.Cancel(ctx), reserve.ErrWrongType, "Cancel")

	got, err := b.client.Get(ctx, l.RedisKey("s")).Result()
	require.NoError(t, err)
	assert.Equal(t, "keep", got)
	list, err := b.client.LRange(ctx, l.RedisKey("list"), 0, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b"}, list)
}

func testCanceledContext(t *testing.T, b backend) {
	l := newLimiter(t, b, nil)
	lim := reserve.Limit{Rate: 10, Burst: 2}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()

	_, err := l.Reserve(ctx, "c", lim)
	assert.ErrorIs(t, err, context.Canceled)
	_, err = l.TryReserveN(ctx, reserve.Single("c", lim, 1), time.Second)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, l.Wait(ctx, "c", lim), context.Canceled)
	_, err = l.Peek(ctx, reserve.Single("c", lim, 1))
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorIs(t, l.Pause(ctx, "c", time.Second), context.Canceled)
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "c"))

	// A canceled context cannot cancel a reservation either. (A fake clock,
	// so that the slot has not passed when Cancel runs.)
	l = newLimiter(t, b, fakeclock.New(epoch))
	r, err := l.Reserve(context.Background(), "c", lim)
	require.NoError(t, err)
	before := snapshot(t, b, l, "c")
	assert.ErrorIs(t, r.Cancel(ctx), context.Canceled)
	assert.Equal(t, before, snapshot(t, b, l, "c"))
	// It still can with a live context.
	require.NoError(t, r.Cancel(context.Background()))
	assert.NotEqual(t, before, snapshot(t, b, l, "c"))
}

func testDeadlineTooNear(t *testing.T, b backend) {
	l := newLimiter(t, b, nil)
	lim := reserve.Limit{Rate: 0.1, Burst: 1}
	_, err := l.Reserve(context.Background(), "d", lim) // the bucket is now empty: the next slot 10 s on
	require.NoError(t, err)
	before := snapshot(t, b, l, "d")

	// A deadline well before the slot, and long enough for a call to Redis
	// on a loaded machine (it was 50 ms, and Wait had to return within it:
	// a timing bound).
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err = l.Wait(ctx, "d", lim)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.NoError(t, ctx.Err(), "Wait should fail at once, not sleep to its deadline")
	assert.Greater(t, tooLong.Wait, 5*time.Second)
	assert.LessOrEqual(t, tooLong.Wait, 10*time.Second)
	assert.Equal(t, before, snapshot(t, b, l, "d"), "a refused Wait reserved something")

	past, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	assert.ErrorIs(t, l.Wait(past, "d", lim), context.DeadlineExceeded)
	assert.Equal(t, before, snapshot(t, b, l, "d"))
}

func testWaitSleepsUntilSlot(t *testing.T, b backend) {
	ctx := context.Background()
	l := newLimiter(t, b, nil)
	lim := reserve.Limit{Rate: 20, Burst: 1}
	start := time.Now()
	for range 3 {
		require.NoError(t, l.Wait(ctx, "w", lim))
	}
	// Three permits with burst 1 at 20/s: the third slot is 100 ms after the
	// first. A slot is placed at most reserve.MaxEarly early, so this lower
	// bound holds on any machine.
	assert.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond-reserve.MaxEarly)

	dl, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, l.Wait(dl, "w", lim), "Wait with a far deadline")
}

func testCancelDuringSleep(t *testing.T, b backend) {
	l := newLimiter(t, b, nil)
	lim := reserve.Limit{Rate: 2, Burst: 1}
	_, err := l.Reserve(context.Background(), "cs", lim)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err = l.Wait(ctx, "cs", lim)
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, ctx.Err(), err, "Wait returns ctx.Err() itself")

	// Without the cancel the balance would be about -1 + 0.1 (one queued
	// permit); with it the queued permit is back.
	st, err := l.Peek(context.Background(), reserve.Single("cs", lim, 1))
	require.NoError(t, err)
	assert.Greater(t, st.Bands[0].Value, -0.5, "the permits of the canceled Wait were not given back")
}

func testTryReserve(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 4, Burst: 2}
	for i := range 2 {
		r, err := l.TryReserveN(ctx, reserve.Single("t", lim, 1), 0)
		require.NoError(t, err, "TryReserveN #%d with tokens", i)
		assert.Equal(t, time.Duration(0), r.DelayFrom(clk.Now()))
	}
	before := snapshot(t, b, l, "t")
	_, err := l.TryReserveN(ctx, reserve.Single("t", lim, 2), 499*time.Millisecond)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, 500*time.Millisecond, tooLong.Wait)
	assert.Equal(t, 499*time.Millisecond, tooLong.MaxWait)
	assert.Equal(t, before, snapshot(t, b, l, "t"), "a refused TryReserveN changed the bucket")

	r, err := l.TryReserveN(ctx, reserve.Single("t", lim, 2), 500*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 500*time.Millisecond, r.DelayFrom(clk.Now()))
	assert.Equal(t, clk.Now().Add(500*time.Millisecond), r.Time())
	assert.Equal(t, reserve.Permits(2), r.Cost())
	assert.Equal(t, "t", r.Key())
	assert.Equal(t, reserve.Permits(2), r.Cost())
}

// testAllow: Allow takes a permit only if it is free now, and a refusal
// changes nothing.
func testAllow(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 4, Burst: 2}
	for i := range 2 {
		ok, err := l.Allow(ctx, "a", lim)
		require.NoError(t, err)
		assert.True(t, ok, "Allow #%d with permits in the bucket", i)
	}
	before := snapshot(t, b, l, "a")
	ok, err := l.Allow(ctx, "a", lim)
	require.NoError(t, err)
	assert.False(t, ok, "Allow on an empty bucket")
	assert.Equal(t, before, snapshot(t, b, l, "a"), "a refused Allow changed the bucket")
	clk.Advance(250 * time.Millisecond)
	ok, err = l.AllowN(ctx, reserve.Single("a", lim, 1))
	require.NoError(t, err)
	assert.True(t, ok, "AllowN once a permit has refilled")

	// A pause refuses every Allow until it ends.
	require.NoError(t, l.Pause(ctx, "a", time.Second))
	clk.Advance(500 * time.Millisecond)
	ok, err = l.Allow(ctx, "a", lim)
	require.NoError(t, err)
	assert.False(t, ok, "Allow inside a pause")
}

func testCancelTwice(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 10, Burst: 1}
	_, err := l.Reserve(ctx, "x", lim)
	require.NoError(t, err)
	r2, err := l.Reserve(ctx, "x", lim)
	require.NoError(t, err)
	require.NoError(t, r2.Cancel(ctx))
	after := snapshot(t, b, l, "x")
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, r2.Cancel(ctx))
	assert.Equal(t, after, snapshot(t, b, l, "x"), "a second Cancel changed the bucket")
	st, err := l.Peek(ctx, reserve.Single("x", lim, 1))
	require.NoError(t, err)
	assert.InDelta(t, 0.1, st.Bands[0].Value, 1e-9, "balance after one permit used, one canceled, 10 ms")
}

func testPause(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 10, Burst: 5}

	require.NoError(t, l.Pause(ctx, "p", 2*time.Second))
	st, err := l.Peek(ctx, reserve.Single("p", lim, 1))
	require.NoError(t, err)
	assert.Equal(t, 2100*time.Millisecond, st.Wait, "first slot after a pause on a full bucket")
	assert.InDelta(t, -20, st.Bands[0].Value, 1e-9)

	// A shorter pause changes nothing.
	before := snapshot(t, b, l, "p")
	require.NoError(t, l.Pause(ctx, "p", time.Second))
	delete(before, "pause")
	after := snapshot(t, b, l, "p")
	delete(after, "pause")
	assert.Equal(t, before, after)

	r, err := l.Reserve(ctx, "p", lim)
	require.NoError(t, err)
	assert.Equal(t, 2100*time.Millisecond, r.DelayFrom(clk.Now()))

	// The pause ends with an empty bucket: at its end the balance is zero
	// (less the permit just reserved), not the burst.
	clk.Advance(2 * time.Second)
	st, err = l.Peek(ctx, reserve.Single("p", lim, 1))
	require.NoError(t, err)
	assert.InDelta(t, -1, st.Bands[0].Value, 1e-9)

	// Cancel never eats into a pause.
	clk2 := fakeclock.New(epoch)
	l2 := newLimiter(t, b, clk2)
	lim2 := reserve.Limit{Rate: 10, Burst: 1}
	_, err = l2.Reserve(ctx, "q", lim2)
	require.NoError(t, err)
	r2, err := l2.Reserve(ctx, "q", lim2) // slot at +100 ms
	require.NoError(t, err)
	require.NoError(t, l2.Pause(ctx, "q", time.Second))
	require.NoError(t, r2.Cancel(ctx))
	st, err = l2.Peek(ctx, reserve.Single("q", lim2, 1))
	require.NoError(t, err)
	assert.Equal(t, 1100*time.Millisecond, st.Wait, "Cancel shortened a pause")

	// The key lives at least as long as the pause.
	ttl, err := b.client.PTTL(ctx, l.RedisKey("p")).Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 2*time.Second)
}

func testPeek(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 4, Burst: 3}

	st, err := l.Peek(ctx, reserve.Single("pk", lim, 2))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), st.Wait, "Peek of a new key: wait")
	assert.Equal(t, 3.0, st.Bands[0].Value, "Peek of a new key: tokens")
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "pk"), "Peek created the key")

	for range 4 {
		_, err := l.Reserve(ctx, "pk", lim)
		require.NoError(t, err)
	}
	before := snapshot(t, b, l, "pk")
	ttl := b.client.PTTL(ctx, l.RedisKey("pk")).Val()
	for range 3 {
		st, err = l.Peek(ctx, reserve.Single("pk", lim, 3))
		require.NoError(t, err)
		assert.Equal(t, time.Second, st.Wait)
		assert.Equal(t, -1.0, st.Bands[0].Value)
	}
	assert.Equal(t, before, snapshot(t, b, l, "pk"), "Peek changed the bucket")
	assert.LessOrEqual(t, b.client.PTTL(ctx, l.RedisKey("pk")).Val(), ttl, "Peek extended the key's life")

	// What Peek predicts is what Reserve gives.
	clk.Advance(123456789 * time.Nanosecond)
	st, err = l.Peek(ctx, reserve.Single("pk", lim, 2))
	require.NoError(t, err)
	r, err := l.ReserveN(ctx, reserve.Single("pk", lim, 2))
	require.NoError(t, err)
	assert.Equal(t, st.Wait, r.DelayFrom(clk.Now()))
}

func testExpiry(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 20, Burst: 2}
	for range 3 {
		_, err := l.Reserve(ctx, "e", lim)
		require.NoError(t, err)
	}
	// The balance is -1: back at zero in 50 ms, full (2) in 150 ms. The key
	// lives that long plus a margin of 1 to 2 s (core.lua sets the expiry
	// only when it must move later, a second beyond what it needs).
	ttl, err := b.client.PTTL(ctx, l.RedisKey("e")).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, 2150*time.Millisecond)
	assert.Greater(t, ttl, 1000*time.Millisecond)

	// Once the bucket is full, the key and its absence read the same.
	clk.Advance(150 * time.Millisecond)
	full, err := l.Peek(ctx, reserve.Single("e", lim, 1))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), full.Wait)
	assert.Equal(t, 2.0, full.Bands[0].Value)
	b.elapse(ttl + 50*time.Millisecond)
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "e"), "key did not expire")
	gone, err := l.Peek(ctx, reserve.Single("e", lim, 1))
	require.NoError(t, err)
	assert.Equal(t, full.Wait, gone.Wait)
	assert.Equal(t, full.Bands[0].Value, gone.Bands[0].Value)
	r, err := l.ReserveN(ctx, reserve.Single("e", lim, 2))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), r.DelayFrom(clk.Now()))
}

// testConcurrent has many goroutines reserve at one frozen instant: the
// slots must be exactly the burst at once, then one every 1/rate, with no
// slot given twice.
func testConcurrent(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	lim := reserve.Limit{Rate: 100, Burst: 10}
	delays := reserveConcurrently(t, l, clk, "conc", lim, 8, 25)
	for i, d := range delays {
		want := time.Duration(0)
		if i >= lim.Burst {
			want = time.Duration(i-lim.Burst+1) * 10 * time.Millisecond
		}
		if d != want {
			t.Fatalf("sorted delay #%d = %v, want %v", i, d, want)
		}
	}
}

// reserveConcurrently reserves one permit each times from goroutines at once
// and returns the delays, as of clk's time, sorted.
func reserveConcurrently(t *testing.T, l *reserve.Limiter, clk reserve.Clock, key string, lim reserve.Limit, goroutines, each int) []time.Duration {
	t.Helper()
	var (
		mu     sync.Mutex
		delays []time.Duration
		wg     sync.WaitGroup
	)
	for range goroutines {
		wg.Go(func() {
			for range each {
				r, err := l.Reserve(context.Background(), key, lim)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				delays = append(delays, r.DelayFrom(clk.Now()))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, delays, goroutines*each)
	slices.Sort(delays)
	return delays
}

// TestRedisDown: with no Redis to talk to and FailClosed, every call fails
// with an error naming the operation and the key.
func TestRedisDown(t *testing.T) {
	// A port nothing listens on: bind one, then close it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()

	l, err := reserve.New(c, reserve.Options{FailClosed: true, Logger: quiet, HeartbeatInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}

	_, err = l.Reserve(ctx, "k", lim)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `reserve: reserve "k": `)
	assert.ErrorContains(t, l.Wait(ctx, "k", lim), `reserve: wait "k": `)
	_, err = l.Peek(ctx, reserve.Single("k", lim, 1))
	assert.ErrorContains(t, err, `reserve: peek "k": `)
	assert.ErrorContains(t, l.Pause(ctx, "k", time.Second), `reserve: pause "k": `)
}

// testQueueTooLong: a queue over 30 years long is refused with
// ErrQueueTooLong and changes nothing, rather than overflowing.
func testQueueTooLong(t *testing.T, b backend) {
	ctx := context.Background()
	l := newLimiter(t, b, fakeclock.New(epoch))
	yearly := reserve.Limit{Rate: 1 / (365 * 24 * time.Hour).Seconds(), Burst: 1}
	for i := range 40 {
		before := snapshot(t, b, l, "q")
		_, err := l.Reserve(ctx, "q", yearly)
		if err != nil {
			require.ErrorIs(t, err, reserve.ErrQueueTooLong)
			assert.Equal(t, 31, i, "refused after %d reservations of a year each", i)
			assert.Equal(t, before, snapshot(t, b, l, "q"), "a refused reservation changed the bucket")
			return
		}
	}
	t.Fatal("40 reservations of a year each were all granted")
}

// testServerClockStepsBack: with server time, a Redis clock that steps back
// (here: the bucket written by a clock 60 s ahead, as after a failover to a
// host whose clock is behind) keeps the bucket's balance instead of turning
// the step into a 60 s debt.
func testServerClockStepsBack(t *testing.T, b backend) {
	ctx := context.Background()
	l := newLimiter(t, b, nil)
	lim := reserve.Limit{Rate: 10, Burst: 10}
	_, err := l.Reserve(ctx, "step", lim)
	require.NoError(t, err)
	rk := l.RedisKey("step")
	state, err := b.client.Get(ctx, rk).Result()
	require.NoError(t, err)
	f := strings.Fields(state)
	ti := 0 // format 2: "t x s p ..."
	if f[0] == "1" {
		ti = 1 // format 1: "1 t x s p c ..."
	}
	tUS, err := strconv.ParseInt(f[ti], 10, 64)
	require.NoError(t, err)
	f[ti] = strconv.FormatInt(tUS+60_000_000, 10) // every other time is relative to it
	require.NoError(t, b.client.Set(ctx, rk, strings.Join(f, " "), time.Minute).Err())

	st, err := l.Peek(ctx, reserve.Single("step", lim, 1))
	require.NoError(t, err)
	assert.Equal(t, time.Duration(0), st.Wait, "the clock step became a wait")
	assert.InDelta(t, 9, st.Bands[0].Value, 0.5)
	r, err := l.ReserveN(ctx, reserve.Single("step", lim, 9))
	require.NoError(t, err)
	assert.Less(t, r.Delay(), 100*time.Millisecond)
}
