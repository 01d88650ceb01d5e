package pacehttp_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSeatsAgainFreshSlot: a request whose seat the fleet handed on while
// it slept to its rate slot (its process's renews went unanswered) waits
// for a seat again at the seats' last check; that wait leaving it later
// than MaxLateness after the slot, it goes on a fresh slot, as a sleeper
// that wakes that late does. Before (8ac87d7), it went on the slot it had
// slept to, however late, beside callers on time.
func TestSeatsAgainFreshSlot(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond, Logger: quiet}
	refuse := &redistest.Refuser{Op: "renew"}
	ca := s.TunedClient(t)
	ca.AddHook(refuse)
	aOpts := opts
	aOpts.MaxLateness = 100 * time.Millisecond
	a, err := reserve.New(ca, aOpts)
	require.NoError(t, err)
	t.Cleanup(func() { a.Close() })
	b, err := reserve.New(s.NewClient(t), opts)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })

	const key = "api"
	p := reserve.Policy{
		{Name: "open", Unit: "requests", InFlight: 1},
		{Name: "rate", Unit: "calls", Limit: reserve.Limit{Rate: 0.2, Burst: 1}},
	}
	// The rate's burst taken, without a seat: a's request waits 5 s for
	// its slot, holding the seat.
	r0, err := a.ReserveN(ctx, reserve.Request{Key: key, Policy: p, Cost: reserve.Cost{"requests": 0, "calls": 1}})
	require.NoError(t, err)
	slot := r0.Time().Add(5 * time.Second)

	srv := newOpenServer(t, 0)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	sends := recordSends(t, u.Host)
	c := &http.Client{Transport: transport(t, a, pacehttp.Options{Route: func(*http.Request) (pacehttp.Route, error) {
		return pacehttp.Route{Key: key, Policy: p, Cost: reserve.Cost{"requests": 1, "calls": 1}}, nil
	}})}
	done := make(chan error, 1)
	go func() {
		resp, err := get(ctx, c, srv.URL)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	ops, err := admin.New(s.Client, admin.Options{KeyPrefix: opts.KeyPrefix})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := ops.Status(ctx, key)
		return err == nil && st.Seats != nil && st.Seats.Used == 1
	}, 10*time.Second, 5*time.Millisecond, "a's request never took its seat")
	refuse.On.Store(true)

	// b's call waits for the seat, and takes it once a has been silent on
	// the key for 3.5 heartbeats; it stays open past a's slot, by more
	// than a's MaxLateness.
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rb, err := b.Acquire(bctx, reserve.Request{Key: key, Policy: p[:1], Cost: reserve.Cost{"requests": 1}})
	require.NoError(t, err)
	t.Logf("b granted %v before the slot, %d renews refused", time.Until(slot), refuse.Refused.Load())
	require.True(t, time.Now().Before(slot), "b took the seat after a's slot: the test proves nothing (a loaded machine?)")
	refuse.On.Store(false)
	time.Sleep(time.Until(slot) + 300*time.Millisecond)
	require.Empty(t, sends(), "a's request went while b's call held the seat")
	rb.Done()

	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("a's request never got a seat back")
	}
	got := sends()
	require.Len(t, got, 1)
	// (The slot is r0's and 5 s, to the µs the script rounds to.)
	assert.True(t, got[0].slot.After(slot.Add(aOpts.MaxLateness)), "a's request went on the slot it had slept to (%v), late: its slot %v",
		slot.Format(time.StampMicro), got[0].slot.Format(time.StampMicro))
}
