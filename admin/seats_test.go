package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeatsStatus: Status shows a key's in-flight band as the fleet holds
// it: two calls holding a seat each of N 2, a third queued, and the one
// Limiter that holds them; a Done hands the seat to the waiter; once every
// call is done no seat is in use and nobody holds one.
func TestSeatsStatus(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	beat := 50 * time.Millisecond
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: beat})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix, HeartbeatInterval: beat})
	require.NoError(t, err)

	// A rank first: the holder is then the Limiter's rank in the fleet.
	var fleet []admin.Member
	require.Eventually(t, func() bool {
		fleet, err = a.Fleet(ctx)
		return err == nil && len(fleet) == 1
	}, 10*time.Second, 10*time.Millisecond)
	id := fleet[0].ID
	pol := reserve.Policy{{Name: "open", Unit: "requests", InFlight: 2}}
	req := reserve.Request{Key: "crawl", Policy: pol, Cost: reserve.Cost{"requests": 1}}
	r1, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	r2, err := l.Acquire(ctx, req)
	require.NoError(t, err)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	got := make(chan *reserve.Reservation, 1)
	go func() {
		r, err := l.Acquire(wctx, req)
		if err != nil {
			r = nil
		}
		got <- r
	}()
	var st admin.KeyStatus
	require.Eventually(t, func() bool {
		st, err = a.Status(ctx, "crawl")
		return err == nil && st.Seats != nil && st.Seats.Waiting == 1
	}, 10*time.Second, 10*time.Millisecond, "the third call queues")
	assert.Equal(t, 2, st.Seats.Used)
	assert.Equal(t, 0, st.Seats.Stored, "nothing stored")
	require.Len(t, st.Seats.Holders, 1)
	assert.Equal(t, admin.SeatHolder{Holder: "0", Limiter: id, Seats: 2}, st.Seats.Holders[0])

	r1.Done()
	r3 := <-got
	require.NotNil(t, r3, "the waiter gets the seat given back")
	st, err = a.Status(ctx, "crawl")
	require.NoError(t, err)
	require.NotNil(t, st.Seats)
	assert.Equal(t, 2, st.Seats.Used)
	assert.Equal(t, 0, st.Seats.Waiting)

	r2.Done()
	r3.Done()
	st, err = a.Status(ctx, "crawl")
	require.NoError(t, err)
	require.NotNil(t, st.Seats, "the seats record outlives its last seat for a while")
	assert.Equal(t, 0, st.Seats.Used)
	assert.Empty(t, st.Seats.Holders)

	keys, err := a.Keys(ctx, "cr*")
	require.NoError(t, err)
	assert.Equal(t, []string{"crawl"}, keys, "a key known by its seats alone is listed")
}

// TestSetInFlight: an operator's N is stored without expiry, read back by
// Status, recorded in the history with who and why, and removed; bad
// values and a removal with nothing stored change nothing.
func TestSetInFlight(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	nKey := prefix + "{host}:seatn"

	_, err = a.Status(ctx, "host")
	require.ErrorIs(t, err, admin.ErrUnknownKey)
	ch, err := a.SetInFlight(ctx, "host", 8, "ops", "the provider allows 8")
	require.NoError(t, err)
	assert.Equal(t, "in-flight", ch.Op)
	assert.Equal(t, "ops", ch.Who)
	assert.Equal(t, "the provider allows 8", ch.Reason)
	assert.Equal(t, "", ch.Before)
	assert.Equal(t, "8", ch.After)
	ttl, err := s.Client.TTL(ctx, nKey).Result()
	require.NoError(t, err)
	assert.Equal(t, time.Duration(-1), ttl, "an operator's N does not expire")

	st, err := a.Status(ctx, "host")
	require.NoError(t, err, "a key with a stored N is known")
	require.NotNil(t, st.Seats)
	assert.Equal(t, admin.SeatStatus{Stored: 8, Holders: []admin.SeatHolder{}}, *st.Seats)

	ch, err = a.SetInFlight(ctx, "host", 1_000_000, "ops", "more")
	require.NoError(t, err)
	assert.Equal(t, "8", ch.Before)
	assert.Equal(t, "1000000", ch.After)

	// Bad values: refused, nothing written.
	for _, n := range []int{0, -1, 1_000_001} {
		_, err := a.SetInFlight(ctx, "host", n, "ops", "bad")
		assert.ErrorIs(t, err, reserve.ErrInvalidPolicy, "N %d", n)
		assert.ErrorContains(t, err, "from 1 to 1000000")
	}
	_, err = a.SetInFlight(ctx, "", 3, "ops", "bad")
	assert.ErrorIs(t, err, reserve.ErrEmptyKey)
	assert.Equal(t, "1000000", s.Client.Get(ctx, nKey).Val())

	ch, err = a.UnsetInFlight(ctx, "host", "ops", "back to the code's")
	require.NoError(t, err)
	assert.Equal(t, "1000000", ch.Before)
	assert.Equal(t, "", ch.After)
	_, err = a.UnsetInFlight(ctx, "host", "ops", "again")
	assert.ErrorIs(t, err, admin.ErrNotStored)

	hist, err := a.History(ctx, "host")
	require.NoError(t, err)
	require.Len(t, hist, 3, "the refused changes are not recorded")
	assert.Equal(t, []string{"1000000", "8", ""}, []string{hist[0].Before, hist[1].Before, hist[2].Before})
	assert.Equal(t, "back to the code's", hist[0].Reason)

	// A key of another type: refused, nothing written.
	require.NoError(t, s.Client.RPush(ctx, prefix+"{odd}:seatn", "x").Err())
	_, err = a.SetInFlight(ctx, "odd", 4, "ops", "odd")
	assert.ErrorIs(t, err, reserve.ErrWrongType)
	n, err := s.Client.Exists(ctx, prefix+"{odd}:history").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a refused change wrote history")
	// A stored N that is not one: Status says so.
	require.NoError(t, s.Client.Set(ctx, nKey, "lots", 0).Err())
	_, err = a.Status(ctx, "host")
	assert.ErrorIs(t, err, reserve.ErrStoredLimit)
}

// TestSeatsStatusOnCluster: Status reads a key's in-flight band on a Redis
// Cluster (seats.lua once took the fleet's events channel as a KEY, in
// another hash slot: CROSSSLOT).
func TestSeatsStatusOnCluster(t *testing.T) {
	rdb, l, prefix := clusterLimiter(t)
	ctx := context.Background()
	a, err := admin.New(rdb, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	pol := reserve.Policy{{Name: "open", Unit: "requests", InFlight: 2}}
	r, err := l.Acquire(ctx, reserve.Request{Key: "crawl", Policy: pol, Cost: reserve.Cost{"requests": 1}})
	require.NoError(t, err)
	st, err := a.Status(ctx, "crawl")
	require.NoError(t, err)
	require.NotNil(t, st.Seats)
	assert.Equal(t, 1, st.Seats.Used)
	r.Done()
	st, err = a.Status(ctx, "crawl")
	require.NoError(t, err)
	require.NotNil(t, st.Seats)
	assert.Equal(t, 0, st.Seats.Used)
}
