package hold_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClaimRedis(t *testing.T)     { runClaim(t, redisBackend(t)) }
func TestClaimCluster(t *testing.T)   { runClaim(t, clusterBackend(t)) }
func TestClaimMiniredis(t *testing.T) { runClaim(t, miniredisBackend(t)) }

// TestClaimACL runs the suite with the Limiters logged in as a user holding
// only the permissions docs/security.md lists.
func TestClaimACL(t *testing.T) { runClaim(t, aclBackend(t)) }

func runClaim(t *testing.T, b backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, backend)
	}{
		{"BadInput", testClaimBadInput},
		{"HandOverOrHold", testClaimHandOverOrHold},
		{"Redeem", testClaimRedeem},
		{"TryClaimRefuses", testTryClaimRefuses},
		{"WrongType", testClaimWrongType},
		{"LikeReserve", testClaimLikeReserve},
		{"CancelHandedOver", testClaimCancel},
		{"HoldBatch", testHoldBatch},
		{"HoldRepeat", testHoldRepeat},
		{"HoldInPause", testHoldInPause},
		{"CancelKept", testCancelKept},
		{"Early", testClaimEarly},
	}
	// Expiry runs alone, first: FastForward on miniredis expires every key.
	t.Run("HoldExpires", func(t *testing.T) { testHoldExpires(t, b) })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.fn(t, b)
		})
	}
}

var claimAPI = reserve.Limit{Rate: 10, Burst: 2}

func permits(key string) reserve.Request { return reserve.Single(key, claimAPI, 1) }

// holds returns a Book on l with opts.
func holds(t *testing.T, l *reserve.Limiter, opts hold.Options) *hold.Book {
	t.Helper()
	h, err := hold.New(l, opts)
	require.NoError(t, err)
	return h
}

// fairPermits is permits("k") made fair: for tenant, in lane. A fair
// request is booked only in its turn and cannot be held.
func fairPermits(key, tenant string, lane reserve.Lane) reserve.Request {
	req := permits(key)
	req.Tenant, req.Lane = tenant, lane
	return req
}

// held is a hold's Redis key.
func held(l *reserve.Limiter, key, id string) string { return l.RedisKey(key) + ":h:" + id }

func testClaimBadInput(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	tests := []struct {
		id      string
		req     reserve.Request
		maxWait time.Duration
		want    error
	}{
		{"", permits("k"), time.Second, hold.ErrEmptyID},
		{"t1", permits(""), time.Second, reserve.ErrEmptyKey},
		{"t1", reserve.Single("k", claimAPI, 3), time.Second, reserve.ErrExceedsBurst},
		{"t1", reserve.Single("k", claimAPI, -1), time.Second, reserve.ErrInvalidCost},
		{"t1", reserve.Single("k", claimAPI, 0), time.Second, reserve.ErrInvalidCost},
		{"t1", reserve.Single("k", reserve.Limit{}, 1), time.Second, reserve.ErrInvalidPolicy},
		{"t1", reserve.Single("k", reserve.Limit{Rate: -1, Burst: 1}, 1), time.Second, reserve.ErrInvalidRate},
		{"t1", reserve.Request{Key: "k", Policy: claimAPI.Policy(), Cost: reserve.Cost{"tokens": 1}}, time.Second, reserve.ErrInvalidCost},
		{"t1", permits("k"), -time.Second, reserve.ErrInvalidDuration},
		{"t1", fairPermits("k", "acme", reserve.Normal), time.Second, reserve.ErrInvalidFairness},
		{"t1", fairPermits("k", "", reserve.Urgent), time.Second, reserve.ErrInvalidFairness},
	}
	h := holds(t, l, hold.Options{})
	for _, tt := range tests {
		_, err := h.Claim(ctx, tt.id, tt.req, tt.maxWait)
		assert.ErrorIs(t, err, tt.want, "Claim(%q, %+v, %v)", tt.id, tt.req, tt.maxWait)
		if tt.maxWait >= 0 { // Hold has no maxWait
			_, err = h.Hold(ctx, []hold.Request{{ID: tt.id, Request: tt.req}})
			assert.ErrorIs(t, err, tt.want, "Hold(%q, %+v)", tt.id, tt.req)
		}
	}
	for _, o := range []hold.Options{{StaleAfter: -1}, {Early: -1}, {NotBefore: -1}} {
		_, err := hold.New(l, o)
		assert.ErrorIs(t, err, reserve.ErrInvalidDuration, "hold.New(%+v)", o)
	}
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "k"), "bad input wrote to Redis")
}

// testClaimHandOverOrHold: near slots are handed over, far ones kept, and a
// kept slot is not reserved again while it is still far.
func testClaimHandOverOrHold(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	h := holds(t, l, hold.Options{})
	p := permits("api")
	kept := map[string]*hold.Grant{}
	for i := range 6 {
		id := fmt.Sprint("t", i)
		g, err := h.Claim(ctx, id, p, 150*time.Millisecond)
		require.NoError(t, err)
		want := time.Duration(max(0, i-1)) * 100 * time.Millisecond
		assert.Equal(t, want, g.Reservation.Delay(), "Claim %s delay", id)
		assert.Equal(t, want > 150*time.Millisecond, g.Kept, "Claim %s kept", id)
		assert.Equal(t, hold.Fresh, g.Source, "Claim %s origin", id)
		exists, err := b.client.Exists(ctx, held(l, "api", id)).Result()
		require.NoError(t, err)
		assert.Equal(t, g.Kept, exists == 1, "hold key of %s exists", id)
		if g.Kept {
			kept[id] = g
		}
	}
	before := snapshot(t, b, l, "api")
	require.Len(t, kept, 3)
	for id, g := range kept {
		again, err := h.Claim(ctx, id, p, 150*time.Millisecond)
		require.NoError(t, err)
		assert.True(t, again.Kept && again.Source == hold.Redeemed, "second Claim(%s) = %+v, want kept, from the hold", id, again)
		assert.Equal(t, g.Reservation.Time(), again.Reservation.Time(), "second Claim(%s) slot", id)
	}
	assert.Equal(t, before, snapshot(t, b, l, "api"), "claiming a kept slot again reserved more")
}

// testClaimRedeem covers a kept slot claimed early, a little late, and too
// late, with StaleAfter given and with its default (half a slot: 50 ms).
func testClaimRedeem(t *testing.T, b backend) {
	tests := []struct {
		name      string
		stale     time.Duration
		at        time.Duration // when the holder comes back, from the slot
		wantDelay time.Duration
		wantStale bool
	}{
		{"early", time.Second, -80 * time.Millisecond, 80 * time.Millisecond, false},
		{"on time", time.Second, 0, 0, false},
		{"a little late", time.Second, 900 * time.Millisecond, 0, false},
		{"stale", time.Second, 1100 * time.Millisecond, 0, true},
		{"default, a little late", 0, 40 * time.Millisecond, 0, false},
		{"default, stale", 0, 60 * time.Millisecond, 40 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := fakeclock.New(epoch)
			l := newLimiter(t, b, clk)
			ctx := context.Background()
			h := holds(t, l, hold.Options{StaleAfter: tt.stale})
			p := permits("api")
			_, err := l.ReserveN(ctx, reserve.Single("api", claimAPI, 2)) // empty the bucket
			require.NoError(t, err)
			g, err := h.Claim(ctx, "task", p, 0)
			require.NoError(t, err)
			require.True(t, g.Kept)
			slot := g.Reservation.Time()
			assert.Equal(t, epoch.Add(100*time.Millisecond), slot)

			clk.Set(slot.Add(tt.at))
			before := snapshot(t, b, l, "api")
			c, err := h.Claim(ctx, "task", p, 100*time.Millisecond)
			require.NoError(t, err)
			assert.False(t, c.Kept, "Claim kept")
			want := hold.Redeemed
			if tt.wantStale {
				want = hold.Stale
			}
			assert.Equal(t, want, c.Source, "Claim origin")
			assert.InDelta(t, tt.wantDelay, c.Reservation.Delay(), float64(time.Microsecond), "Claim delay")
			if !tt.wantStale {
				// The kept slot, even when it lies in the past.
				got := c.Reservation.Time()
				assert.False(t, got.Before(slot), "Claim slot %v before the kept slot %v", got, slot)
				assert.LessOrEqual(t, got.Sub(slot), time.Microsecond, "Claim slot %v, kept %v", got, slot)
				assert.Equal(t, before, snapshot(t, b, l, "api"), "redeeming reserved again")
			} else {
				assert.NotEqual(t, before, snapshot(t, b, l, "api"), "a stale hold must take a fresh slot")
			}
			n, err := b.client.Exists(ctx, held(l, "api", "task")).Result()
			require.NoError(t, err)
			assert.Zero(t, n, "hold left after it was handed over")
		})
	}
}

func testTryClaimRefuses(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	h := holds(t, l, hold.Options{})
	p := permits("api")
	_, err := l.ReserveN(ctx, reserve.Single("api", claimAPI, 2))
	require.NoError(t, err)
	before := snapshot(t, b, l, "api")
	_, err = h.TryClaim(ctx, "fresh", p, 50*time.Millisecond)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, 100*time.Millisecond, tooLong.Wait)
	assert.Equal(t, before, snapshot(t, b, l, "api"), "a refused TryClaim wrote to the bucket")

	g, err := h.Claim(ctx, "kept", p, 0)
	require.NoError(t, err)
	_, err = h.TryClaim(ctx, "kept", p, 50*time.Millisecond)
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, 100*time.Millisecond, tooLong.Wait)
	c, err := h.TryClaim(ctx, "kept", p, time.Second)
	require.NoError(t, err, "the hold must survive a refused TryClaim")
	assert.Equal(t, hold.Redeemed, c.Source)
	assert.Equal(t, g.Reservation.Time(), c.Reservation.Time())
}

func testClaimWrongType(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	h := holds(t, l, hold.Options{})
	require.NoError(t, b.client.RPush(ctx, held(l, "api", "t"), "x").Err())
	_, err := h.Claim(ctx, "t", permits("api"), time.Second)
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, err = h.Hold(ctx, []hold.Request{{ID: "ok", Request: permits("api")}, {ID: "t", Request: permits("api")}})
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "api"), "a failed claim or hold wrote to the bucket")
	n, err := b.client.Exists(ctx, held(l, "api", "ok")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a failed Hold recorded a hold")
}

// testClaimLikeReserve: without holds, Claim hands out the slots Reserve would.
func testClaimLikeReserve(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	h := holds(t, l, hold.Options{})
	lim := reserve.Limit{Rate: 7, Burst: 3}
	for i := range 20 {
		n := 1 + i%3
		r, err := l.ReserveN(ctx, reserve.Single("a", lim, n))
		require.NoError(t, err)
		g, err := h.Claim(ctx, fmt.Sprint(i), reserve.Single("b", lim, n), time.Hour)
		require.NoError(t, err)
		assert.Equal(t, r.Time(), g.Reservation.Time(), "step %d: Claim slot vs Reserve", i)
		assert.Equal(t, reserve.Permits(n), g.Reservation.Cost())
		clk.Advance(time.Duration(i%4) * 130 * time.Millisecond)
	}
}

func testClaimCancel(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	h := holds(t, l, hold.Options{})
	c, err := h.Claim(ctx, "t", permits("api"), time.Second)
	require.NoError(t, err)
	c2, err := h.Claim(ctx, "u", permits("api"), time.Second)
	require.NoError(t, err)
	require.NoError(t, c2.Reservation.Cancel(ctx))
	require.NoError(t, c.Reservation.Cancel(ctx))
	st, err := l.Peek(ctx, reserve.Single("api", claimAPI, 1))
	require.NoError(t, err)
	assert.Equal(t, 2.0, st.Bands[0].Value, "tokens after canceling both claims")
}

// testCancelKept: canceling a kept slot drops its hold, so the holder cannot
// redeem permits that were given back (that would spend the slot twice).
func testCancelKept(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	h := holds(t, l, hold.Options{StaleAfter: time.Hour})
	_, err := l.ReserveN(ctx, reserve.Single("api", claimAPI, 2))
	require.NoError(t, err)
	g, err := h.Claim(ctx, "t", permits("api"), 0)
	require.NoError(t, err)
	require.True(t, g.Kept)
	require.NoError(t, g.Reservation.Cancel(ctx))
	n, err := b.client.Exists(ctx, held(l, "api", "t")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "the hold outlived the cancel of its slot")
	c, err := h.Claim(ctx, "t", permits("api"), time.Hour)
	require.NoError(t, err)
	assert.Equal(t, hold.Fresh, c.Source, "after a cancel the holder takes a fresh slot")
}

// testHoldInPause: a kept slot that a pause made after it now covers is
// dropped when claimed, and the holder gets the first slot after the pause.
func testHoldInPause(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	h := holds(t, l, hold.Options{StaleAfter: time.Hour})
	_, err := l.ReserveN(ctx, reserve.Single("api", claimAPI, 2))
	require.NoError(t, err)
	g, err := h.Claim(ctx, "t", permits("api"), 0) // kept for +100 ms
	require.NoError(t, err)
	require.True(t, g.Kept)
	require.NoError(t, l.Pause(ctx, "api", time.Second))
	clk.Advance(100 * time.Millisecond)
	c, err := h.Claim(ctx, "t", permits("api"), time.Hour)
	require.NoError(t, err)
	assert.Equal(t, hold.Paused, c.Source, "a kept slot inside a pause must be dropped")
	assert.False(t, c.Reservation.Time().Before(epoch.Add(time.Second)), "slot %v inside the pause", c.Reservation.Time())

	// Hold replaces such a hold too, and keeps one outside the pause.
	gs, err := h.Hold(ctx, []hold.Request{{ID: "x", Request: permits("api")}})
	require.NoError(t, err)
	require.NoError(t, l.Pause(ctx, "api", 5*time.Second))
	again, err := h.Hold(ctx, []hold.Request{{ID: "x", Request: permits("api")}})
	require.NoError(t, err)
	assert.Equal(t, hold.Paused, again[0].Source)
	assert.True(t, again[0].Reservation.Time().After(gs[0].Reservation.Time()))
}

// testHoldBatch: many holders across chunks and keys, in one round trip,
// slots in order; claiming them later reserves nothing more.
func testHoldBatch(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 100, Burst: 5}
	const m = 2*hold.MaxBatch + 7
	var reqs []hold.Request
	for i := range m {
		key := "a"
		if i%10 == 9 {
			key = "b"
		}
		reqs = append(reqs, hold.Request{ID: fmt.Sprint("task-", i), Request: reserve.Single(key, lim, 1)})
	}
	h := holds(t, l, hold.Options{StaleAfter: time.Hour})
	grants, err := h.Hold(ctx, reqs)
	require.NoError(t, err)

	counts := map[string]int{}
	for i, g := range grants {
		key := reqs[i].Key
		k := counts[key]
		counts[key]++
		want := time.Duration(max(0, k-4)) * 10 * time.Millisecond
		require.True(t, g.Kept, "grant %d kept", i)
		require.Equal(t, want, g.Reservation.Delay(), "grant %d (%s #%d) delay", i, key, k)
	}
	bucketA, bucketB := snapshot(t, b, l, "a"), snapshot(t, b, l, "b")
	clk.Advance(time.Duration(counts["a"]) * 10 * time.Millisecond)
	for i := range reqs {
		g, err := h.Claim(ctx, reqs[i].ID, reqs[i].Request, time.Hour)
		require.NoError(t, err)
		require.True(t, g.Source == hold.Redeemed && !g.Kept, "Claim(%s) = %+v, want handed over from the hold", reqs[i].ID, g)
		require.Equal(t, grants[i].Reservation.Time(), g.Reservation.Time(), "Claim(%s) slot", reqs[i].ID)
	}
	assert.Equal(t, bucketA, snapshot(t, b, l, "a"), "redeeming reserved again on a")
	assert.Equal(t, bucketB, snapshot(t, b, l, "b"), "redeeming reserved again on b")
}

// testHoldRepeat: Hold is idempotent for live holds.
func testHoldRepeat(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	h := holds(t, l, hold.Options{})
	reqs := []hold.Request{{ID: "x", Request: permits("api")}, {ID: "y", Request: permits("api")}, {ID: "z", Request: permits("api")}}
	first, err := h.Hold(ctx, reqs)
	require.NoError(t, err)
	before := snapshot(t, b, l, "api")
	again, err := h.Hold(ctx, reqs)
	require.NoError(t, err)
	for i := range reqs {
		assert.Equal(t, hold.Redeemed, again[i].Source, "second Hold(%s) origin", reqs[i].ID)
		assert.Equal(t, first[i].Reservation.Time(), again[i].Reservation.Time(), "second Hold(%s) slot", reqs[i].ID)
	}
	assert.Equal(t, before, snapshot(t, b, l, "api"), "repeating Hold reserved again")
}

// testClaimEarly: a kept slot further than maxWait is handed over when it
// is within hold.Options.Early, and kept otherwise; Early does not apply to
// fresh slots.
func testClaimEarly(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	p := reserve.Single("api", lim, 1)
	_, err := l.Reserve(ctx, "api", lim)
	require.NoError(t, err)
	early := holds(t, l, hold.Options{Early: 1500 * time.Millisecond})
	g, err := early.Claim(ctx, "t", p, 100*time.Millisecond)
	require.NoError(t, err)
	assert.True(t, g.Kept, "a fresh slot 1 s away with maxWait 100 ms and Early 1.5 s must be kept")
	g, err = holds(t, l, hold.Options{Early: 500 * time.Millisecond}).Claim(ctx, "t", p, 100*time.Millisecond)
	require.NoError(t, err)
	assert.True(t, g.Kept && g.Source == hold.Redeemed, "a kept slot 1 s away, Early 500 ms: kept")
	g, err = early.Claim(ctx, "t", p, 100*time.Millisecond)
	require.NoError(t, err)
	assert.True(t, !g.Kept && g.Source == hold.Redeemed, "a kept slot 1 s away, Early 1.5 s: handed over")
	assert.Equal(t, time.Second, g.Reservation.Delay().Round(time.Millisecond))
}

// testHoldExpires: a hold nobody claims disappears StaleAfter after its slot.
// It uses Redis server time (no client clock), since key expiry does.
func testHoldExpires(t *testing.T, b backend) {
	l, err := reserve.New(b.pacer(), reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1}
	gs, err := holds(t, l, hold.Options{StaleAfter: 200 * time.Millisecond}).Hold(ctx, []hold.Request{
		{ID: "a", Request: reserve.Single("api", lim, 1)},
		{ID: "b", Request: reserve.Single("api", lim, 1)},
	})
	require.NoError(t, err)
	// Slot b is at most 100 ms away; its hold lives 200 ms after that
	// (+1 ms rounding). No lower bound: a loaded machine may take long.
	d := gs[1].Reservation.Delay()
	assert.LessOrEqual(t, d, 100*time.Millisecond, "delay of b")
	ttl, err := b.client.PTTL(ctx, held(l, "api", "b")).Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, ttl, 301*time.Millisecond, "PTTL of hold b")
	b.elapse(350 * time.Millisecond)
	n, err := b.client.Exists(ctx, held(l, "api", "b"), held(l, "api", "a")).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "holds left after slot + StaleAfter")
}

// TestHoldRoundTrips: a batch costs one round trip once the script is
// loaded, and three (EVALSHA, SCRIPT LOAD, EVALSHA) when Redis lost it.
func TestHoldRoundTrips(t *testing.T) {
	s := redistest.New(t)
	c := tunedClient(t, s)
	var trips atomic.Int64
	c.AddHook(redistest.RoundTrips{N: &trips})
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 100, Burst: 5}
	h := holds(t, l, hold.Options{})
	batch := func(prefix string) []hold.Request {
		var reqs []hold.Request
		for i := range 3*hold.MaxBatch + 1 {
			reqs = append(reqs, hold.Request{ID: fmt.Sprint(prefix, i), Request: reserve.Single(fmt.Sprint("k", i%3), lim, 1)})
		}
		return reqs
	}
	_, err = h.Hold(ctx, batch("warm"))
	require.NoError(t, err)
	trips.Store(0)
	_, err = h.Hold(ctx, batch("a"))
	require.NoError(t, err)
	assert.Equal(t, int64(1), trips.Load(), "round trips for a batch of %d, script loaded", 3*hold.MaxBatch+1)

	require.NoError(t, c.ScriptFlush(ctx).Err())
	trips.Store(0)
	_, err = h.Hold(ctx, batch("b"))
	require.NoError(t, err)
	assert.Equal(t, int64(3), trips.Load(), "round trips for a batch after SCRIPT FLUSH")
}
