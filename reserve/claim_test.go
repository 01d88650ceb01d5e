package reserve_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClaimRedis(t *testing.T)     { runClaim(t, redisBackend(t)) }
func TestClaimCluster(t *testing.T)   { runClaim(t, clusterBackend(t)) }
func TestClaimMiniredis(t *testing.T) { runClaim(t, miniredisBackend(t)) }

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
		{"InPause", testInPause},
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

func permits(key string) reserve.Permits {
	return reserve.Permits{Key: key, Limit: claimAPI}
}

func testClaimBadInput(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	tests := []struct {
		id      string
		p       reserve.Permits
		maxWait time.Duration
		opts    reserve.HoldOptions
		want    error
	}{
		{"", permits("k"), time.Second, reserve.HoldOptions{}, reserve.ErrEmptyID},
		{"t1", permits(""), time.Second, reserve.HoldOptions{}, reserve.ErrEmptyKey},
		{"t1", reserve.Permits{Key: "k", Limit: claimAPI, N: 3}, time.Second, reserve.HoldOptions{}, reserve.ErrExceedsBurst},
		{"t1", reserve.Permits{Key: "k", Limit: claimAPI, N: -1}, time.Second, reserve.HoldOptions{}, reserve.ErrInvalidN},
		{"t1", reserve.Permits{Key: "k"}, time.Second, reserve.HoldOptions{}, reserve.ErrInvalidRate},
		{"t1", permits("k"), -time.Second, reserve.HoldOptions{}, reserve.ErrInvalidDuration},
		{"t1", permits("k"), time.Second, reserve.HoldOptions{StaleAfter: -1}, reserve.ErrInvalidDuration},
	}
	for _, tt := range tests {
		_, err := l.Claim(ctx, tt.id, tt.p, tt.maxWait, tt.opts)
		assert.ErrorIs(t, err, tt.want, "Claim(%q, %+v, %v, %+v)", tt.id, tt.p, tt.maxWait, tt.opts)
		if tt.maxWait >= 0 { // Hold has no maxWait
			_, err = l.Hold(ctx, []reserve.HoldRequest{{ID: tt.id, Permits: tt.p}}, tt.opts)
			assert.ErrorIs(t, err, tt.want, "Hold(%q, %+v, %+v)", tt.id, tt.p, tt.opts)
		}
	}
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "k"), "bad input wrote to Redis")
}

// testClaimHandOverOrHold: near slots are handed over, far ones held, and a
// held slot is not reserved again while it is still far.
func testClaimHandOverOrHold(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	p := permits("api")
	holds := map[string]*reserve.Claim{}
	for i := range 6 {
		c, err := l.Claim(ctx, fmt.Sprint("t", i), p, 150*time.Millisecond, reserve.HoldOptions{})
		require.NoError(t, err)
		want := time.Duration(max(0, i-1)) * 100 * time.Millisecond
		assert.Equal(t, want, c.Reservation.Delay(), "Claim t%d delay", i)
		assert.Equal(t, want > 150*time.Millisecond, c.Held, "Claim t%d held", i)
		assert.False(t, c.FromHold, "Claim t%d from hold", i)
		exists, err := b.client.Exists(ctx, l.RedisKey("api")+":hold:"+fmt.Sprint("t", i)).Result()
		require.NoError(t, err)
		assert.Equal(t, c.Held, exists == 1, "hold key of t%d exists", i)
		if c.Held {
			holds[fmt.Sprint("t", i)] = c
		}
	}
	before := snapshot(t, b, l, "api")
	require.Len(t, holds, 3)
	for id, h := range holds {
		again, err := l.Claim(ctx, id, p, 150*time.Millisecond, reserve.HoldOptions{})
		require.NoError(t, err)
		assert.True(t, again.Held && again.FromHold, "second Claim(%s) = %+v, want held from hold", id, again)
		assert.Equal(t, h.Reservation.Time(), again.Reservation.Time(), "second Claim(%s) slot", id)
	}
	assert.Equal(t, before, snapshot(t, b, l, "api"), "claiming a held slot again reserved more")
}

// testClaimRedeem covers a held slot claimed early, a little late, and too late.
func testClaimRedeem(t *testing.T, b backend) {
	tests := []struct {
		name      string
		at        time.Duration // when the holder comes back, from the slot
		wantDelay time.Duration
		wantStale bool
	}{
		{"early", -80 * time.Millisecond, 80 * time.Millisecond, false},
		{"on time", 0, 0, false},
		{"a little late", 900 * time.Millisecond, 0, false},
		{"stale", 1100 * time.Millisecond, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := fakeclock.New(epoch)
			l := newLimiter(t, b, clk)
			ctx := context.Background()
			p := permits("api")
			_, err := l.Reserve(ctx, "api", claimAPI, 2) // empty the bucket
			require.NoError(t, err)
			held, err := l.Claim(ctx, "task", p, 0, reserve.HoldOptions{})
			require.NoError(t, err)
			require.True(t, held.Held)
			slot := held.Reservation.Time()
			assert.Equal(t, epoch.Add(100*time.Millisecond), slot)

			clk.Set(slot.Add(tt.at))
			before := snapshot(t, b, l, "api")
			c, err := l.Claim(ctx, "task", p, 100*time.Millisecond, reserve.HoldOptions{})
			require.NoError(t, err)
			assert.False(t, c.Held, "Claim held")
			assert.Equal(t, !tt.wantStale, c.FromHold, "Claim from hold")
			assert.Equal(t, tt.wantStale, c.DroppedStale, "Claim dropped stale")
			// Slots are rounded up to the µs (never early), so "on time" may be 1µs.
			assert.InDelta(t, tt.wantDelay, c.Reservation.Delay(), float64(time.Microsecond), "Claim delay")
			if !tt.wantStale {
				// The held slot, even when it lies in the past.
				got := c.Reservation.Time()
				assert.False(t, got.Before(slot), "Claim slot %v before the held slot %v", got, slot)
				assert.LessOrEqual(t, got.Sub(slot), time.Microsecond, "Claim slot %v, held %v", got, slot)
				assert.Equal(t, before, snapshot(t, b, l, "api"), "redeeming reserved again")
			} else {
				assert.NotEqual(t, before, snapshot(t, b, l, "api"), "a stale hold must take a fresh slot")
			}
			n, err := b.client.Exists(ctx, l.RedisKey("api")+":hold:task").Result()
			require.NoError(t, err)
			assert.Zero(t, n, "hold left after it was handed over")
		})
	}
}

func testTryClaimRefuses(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	p := permits("api")
	_, err := l.Reserve(ctx, "api", claimAPI, 2)
	require.NoError(t, err)
	before := snapshot(t, b, l, "api")
	_, err = l.TryClaim(ctx, "fresh", p, 50*time.Millisecond, reserve.HoldOptions{})
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, 100*time.Millisecond, tooLong.Wait)
	assert.Equal(t, before, snapshot(t, b, l, "api"), "a refused TryClaim wrote to the bucket")

	held, err := l.Claim(ctx, "held", p, 0, reserve.HoldOptions{})
	require.NoError(t, err)
	_, err = l.TryClaim(ctx, "held", p, 50*time.Millisecond, reserve.HoldOptions{})
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, 100*time.Millisecond, tooLong.Wait)
	c, err := l.TryClaim(ctx, "held", p, time.Second, reserve.HoldOptions{})
	require.NoError(t, err, "the hold must survive a refused TryClaim")
	assert.True(t, c.FromHold)
	assert.Equal(t, held.Reservation.Time(), c.Reservation.Time())
}

func testClaimWrongType(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	require.NoError(t, b.client.Set(ctx, l.RedisKey("api")+":hold:t", "x", 0).Err())
	_, err := l.Claim(ctx, "t", permits("api"), time.Second, reserve.HoldOptions{})
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	_, err = l.Hold(ctx, []reserve.HoldRequest{{ID: "ok", Permits: permits("api")}, {ID: "t", Permits: permits("api")}}, reserve.HoldOptions{})
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	assert.Equal(t, map[string]string{"type": "none"}, snapshot(t, b, l, "api"), "a failed claim or hold wrote to the bucket")
	n, err := b.client.Exists(ctx, l.RedisKey("api")+":hold:ok").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a failed Hold recorded a hold")
}

// testClaimLikeReserve: without holds, Claim hands out the slots Reserve would.
func testClaimLikeReserve(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 7, Burst: 3}
	for i := range 20 {
		n := 1 + i%3
		r, err := l.Reserve(ctx, "a", lim, n)
		require.NoError(t, err)
		c, err := l.Claim(ctx, fmt.Sprint(i), reserve.Permits{Key: "b", Limit: lim, N: n}, time.Hour, reserve.HoldOptions{})
		require.NoError(t, err)
		assert.Equal(t, r.Time(), c.Reservation.Time(), "step %d: Claim slot vs Reserve", i)
		assert.Equal(t, n, c.Reservation.N())
		clk.Advance(time.Duration(i%4) * 130 * time.Millisecond)
	}
}

func testClaimCancel(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	c, err := l.Claim(ctx, "t", permits("api"), time.Second, reserve.HoldOptions{})
	require.NoError(t, err)
	c2, err := l.Claim(ctx, "u", permits("api"), time.Second, reserve.HoldOptions{})
	require.NoError(t, err)
	require.NoError(t, c2.Reservation.Cancel(ctx))
	require.NoError(t, c.Reservation.Cancel(ctx))
	st, err := l.Peek(ctx, "api", claimAPI, 1)
	require.NoError(t, err)
	assert.Equal(t, 2.0, st.Tokens, "tokens after canceling both claims")
}

// testHoldBatch: many holders across chunks and keys, in one round trip,
// slots in order; claiming them later reserves nothing more.
func testHoldBatch(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 100, Burst: 5}
	const m = 2*reserve.MaxHoldBatch + 7
	var reqs []reserve.HoldRequest
	for i := range m {
		key := "a"
		if i%10 == 9 {
			key = "b"
		}
		reqs = append(reqs, reserve.HoldRequest{ID: fmt.Sprint("task-", i), Permits: reserve.Permits{Key: key, Limit: lim}})
	}
	claims, err := l.Hold(ctx, reqs, reserve.HoldOptions{})
	require.NoError(t, err)

	counts := map[string]int{}
	for i, c := range claims {
		key := reqs[i].Key
		k := counts[key]
		counts[key]++
		want := time.Duration(max(0, k-4)) * 10 * time.Millisecond
		require.True(t, c.Held, "claim %d held", i)
		require.Equal(t, want, c.Reservation.Delay(), "claim %d (%s #%d) delay", i, key, k)
	}
	bucketA, bucketB := snapshot(t, b, l, "a"), snapshot(t, b, l, "b")
	clk.Advance(time.Duration(counts["a"]) * 10 * time.Millisecond)
	for i := range reqs {
		c, err := l.Claim(ctx, reqs[i].ID, reqs[i].Permits, time.Hour, reserve.HoldOptions{StaleAfter: time.Hour})
		require.NoError(t, err)
		require.True(t, c.FromHold && !c.Held, "Claim(%s) = %+v, want handed over from hold", reqs[i].ID, c)
		require.Equal(t, claims[i].Reservation.Time(), c.Reservation.Time(), "Claim(%s) slot", reqs[i].ID)
	}
	assert.Equal(t, bucketA, snapshot(t, b, l, "a"), "redeeming reserved again on a")
	assert.Equal(t, bucketB, snapshot(t, b, l, "b"), "redeeming reserved again on b")
}

// testHoldRepeat: Hold is idempotent for live holds.
func testHoldRepeat(t *testing.T, b backend) {
	l := newLimiter(t, b, fakeclock.New(epoch))
	ctx := context.Background()
	reqs := []reserve.HoldRequest{{ID: "x", Permits: permits("api")}, {ID: "y", Permits: permits("api")}, {ID: "z", Permits: permits("api")}}
	first, err := l.Hold(ctx, reqs, reserve.HoldOptions{})
	require.NoError(t, err)
	before := snapshot(t, b, l, "api")
	again, err := l.Hold(ctx, reqs, reserve.HoldOptions{})
	require.NoError(t, err)
	for i := range reqs {
		assert.True(t, again[i].FromHold, "second Hold(%s) from hold", reqs[i].ID)
		assert.Equal(t, first[i].Reservation.Time(), again[i].Reservation.Time(), "second Hold(%s) slot", reqs[i].ID)
	}
	assert.Equal(t, before, snapshot(t, b, l, "api"), "repeating Hold reserved again")
}

// testClaimEarly: a held slot further than maxWait is handed over when it
// is within HoldOptions.Early, and kept otherwise; Early does not apply to
// fresh slots.
func testClaimEarly(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	p := reserve.Permits{Key: "api", Limit: lim}
	_, err := l.Reserve(ctx, "api", lim, 1)
	require.NoError(t, err)
	early := reserve.HoldOptions{Early: 1500 * time.Millisecond}
	c, err := l.Claim(ctx, "t", p, 100*time.Millisecond, early)
	require.NoError(t, err)
	assert.True(t, c.Held, "a fresh slot 1 s away with maxWait 100 ms and Early 1.5 s must be held")
	c, err = l.Claim(ctx, "t", p, 100*time.Millisecond, reserve.HoldOptions{Early: 500 * time.Millisecond})
	require.NoError(t, err)
	assert.True(t, c.Held && c.FromHold, "a held slot 1 s away, Early 500 ms: kept")
	c, err = l.Claim(ctx, "t", p, 100*time.Millisecond, early)
	require.NoError(t, err)
	assert.True(t, !c.Held && c.FromHold, "a held slot 1 s away, Early 1.5 s: handed over")
	assert.Equal(t, time.Second, c.Reservation.Delay().Round(time.Millisecond))
	_, err = l.Claim(ctx, "t", p, 0, reserve.HoldOptions{Early: -1})
	assert.ErrorIs(t, err, reserve.ErrInvalidDuration)
}

// testInPause: a pause made after a reservation that covers its slot is
// seen; one that ended before the slot, or came before the grant, is not.
func testInPause(t *testing.T, b backend) {
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1}
	var rs []*reserve.Reservation
	for range 5 { // slots at 0, 100, ..., 400 ms
		r, err := l.Reserve(ctx, "api", lim, 1)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	for i, r := range rs {
		in, err := r.InPause(ctx)
		require.NoError(t, err)
		assert.False(t, in, "slot %d in pause before any pause", i)
	}
	require.NoError(t, l.Pause(ctx, "api", lim, 250*time.Millisecond))
	for i, r := range rs {
		in, err := r.InPause(ctx)
		require.NoError(t, err)
		assert.Equal(t, i < 3, in, "slot %d (%v) in a 250 ms pause", i, r.Delay())
	}
	after, err := l.Reserve(ctx, "api", lim, 1)
	require.NoError(t, err)
	in, err := after.InPause(ctx)
	require.NoError(t, err)
	assert.False(t, in, "a slot granted after the pause")
}

// testHoldExpires: a hold nobody claims disappears StaleAfter after its slot.
// It uses Redis server time (no client clock), since key expiry does.
func testHoldExpires(t *testing.T, b backend) {
	l, err := reserve.New(b.client, reserve.Options{KeyPrefix: redistest.Prefix(t)})
	require.NoError(t, err)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1}
	opts := reserve.HoldOptions{StaleAfter: 200 * time.Millisecond}
	cs, err := l.Hold(ctx, []reserve.HoldRequest{
		{ID: "a", Permits: reserve.Permits{Key: "api", Limit: lim}},
		{ID: "b", Permits: reserve.Permits{Key: "api", Limit: lim}},
	}, opts)
	require.NoError(t, err)
	// Slot b is 100 ms away; it expires 200 ms after that (+1 ms rounding).
	// The lower bounds allow a slow machine the time these calls take.
	d := cs[1].Reservation.Delay()
	assert.True(t, d <= 100*time.Millisecond && d > 50*time.Millisecond, "delay of b = %v, want about 100 ms", d)
	hold := l.RedisKey("api") + ":hold:b"
	ttl, err := b.client.PTTL(ctx, hold).Result()
	require.NoError(t, err)
	assert.True(t, ttl <= 301*time.Millisecond && ttl > 200*time.Millisecond, "PTTL of hold b = %v, want about 300 ms", ttl)
	b.elapse(350 * time.Millisecond)
	n, err := b.client.Exists(ctx, hold, l.RedisKey("api")+":hold:a").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "holds left after slot + StaleAfter")
}

// TestHoldRoundTrips: a batch costs one round trip once the script is
// loaded, and three (EVALSHA, SCRIPT LOAD, EVALSHA) when Redis lost it.
func TestHoldRoundTrips(t *testing.T) {
	s := redistest.New(t)
	c := s.NewClient(t)
	var trips atomic.Int64
	c.AddHook(redistest.RoundTrips{N: &trips})
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t)})
	require.NoError(t, err)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 100, Burst: 5}
	batch := func(prefix string) []reserve.HoldRequest {
		var reqs []reserve.HoldRequest
		for i := range 3*reserve.MaxHoldBatch + 1 {
			reqs = append(reqs, reserve.HoldRequest{ID: fmt.Sprint(prefix, i), Permits: reserve.Permits{Key: fmt.Sprint("k", i%3), Limit: lim}})
		}
		return reqs
	}
	_, err = l.Hold(ctx, batch("warm"), reserve.HoldOptions{})
	require.NoError(t, err)
	trips.Store(0)
	_, err = l.Hold(ctx, batch("a"), reserve.HoldOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), trips.Load(), "round trips for a batch of %d, script loaded", 3*reserve.MaxHoldBatch+1)

	require.NoError(t, c.ScriptFlush(ctx).Err())
	trips.Store(0)
	_, err = l.Hold(ctx, batch("b"), reserve.HoldOptions{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), trips.Load(), "round trips for a batch after SCRIPT FLUSH")
}
