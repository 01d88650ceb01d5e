package reserve_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// TestSeatsDroppedNotUsed: a call that holds its seat while it waits for
// its slot on a rate band, and whose Limiter's renews of the key go
// unheard meanwhile, loses the seat to the fleet: after 3.5 heartbeats
// another holder's call drops it and takes it. The first call must not
// then open on the seat at its slot: it waits for a seat again. Before,
// it did (the combination runner on a Cluster, seed 27: a holder stopped,
// then the key's master frozen; 4 calls open with N = 3). "renews back":
// the Limiter's renews answer again before the slot, and must not record
// the dropped seat again for the call to use. "heard again": another call
// of the Limiter reaches the key before the slot (it makes the holder's
// record again, without the dropped seat), which says nothing of the
// first call's seat (the same seed, once the check above was in).
func TestSeatsDroppedNotUsed(t *testing.T) {
	for _, how := range []string{"renews unheard", "renews back", "heard again"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := redistest.New(t)
			ctx := context.Background()
			opts := reserve.Options{KeyPrefix: redistest.Prefix(t), HeartbeatInterval: 100 * time.Millisecond, Logger: quiet}
			a, refuse := refusingLimiter(t, s, opts)
			b, err := reserve.New(s.NewClient(t), opts)
			require.NoError(t, err)
			closeLimiter(t, b)
			const key = "seats:dropped"
			p := reserve.Policy{
				{Name: "open", Unit: "requests", InFlight: 1},
				{Name: "rate", Unit: "calls", Limit: reserve.Limit{Rate: 0.2, Burst: 1}},
			}
			// The rate's burst taken, without a seat: a's call waits 5 s
			// for its slot, holding the seat.
			_, err = a.ReserveN(ctx, reserve.Request{Key: key, Policy: p, Cost: reserve.Cost{"requests": 0, "calls": 1}})
			require.NoError(t, err)
			ra, err := a.ReserveN(ctx, reserve.Request{Key: key, Policy: p, Cost: reserve.Cost{"requests": 1, "calls": 1}})
			require.NoError(t, err)
			require.Greater(t, ra.Delay(), time.Second)
			refuse.On.Store(true)
			// b's call waits for the seat, and takes it once a has been
			// silent on the key for 3.5 heartbeats.
			actx, cancelA := context.WithTimeout(ctx, 10*time.Second)
			defer cancelA()
			rb, err := b.Acquire(actx, reserve.Request{Key: key, Policy: p[:1], Cost: reserve.Cost{"requests": 1}})
			require.NoError(t, err)
			require.True(t, time.Now().Before(ra.Time()), "b took the seat after a's slot: the test proves nothing (a loaded machine?)")
			switch how {
			case "renews back":
				refuse.On.Store(false)
				reserve.RenewSeats(ctx, a)
			case "heard again":
				// Just before the slot: the holder's record is then fresh.
				time.Sleep(time.Until(ra.Time()) - 80*time.Millisecond)
				_, err := a.TryReserveN(ctx, reserve.Request{Key: key, Policy: p[:1], Cost: reserve.Cost{"requests": 1}}, 20*time.Millisecond)
				var tl *reserve.WaitTooLongError
				require.ErrorAs(t, err, &tl, "a's second call, while b's holds the seat")
			}
			var opened atomic.Bool
			slept := make(chan error, 1)
			go func() {
				err := ra.Sleep(ctx)
				opened.Store(true)
				slept <- err
			}()
			// b's call stays open past a's slot.
			time.Sleep(time.Until(ra.Time()) + 300*time.Millisecond)
			require.False(t, opened.Load(), "a's call opened on the seat the fleet handed to b")
			st, err := reserve.ReadSeats(ctx, b, key)
			require.NoError(t, err)
			require.Equal(t, 1, st.Used, "seats Redis counts while b's call is open")
			rb.Done()
			select {
			case err := <-slept:
				require.NoError(t, err, "a's call, once b's ended")
			case <-time.After(30 * time.Second):
				t.Fatal("a's call never got a seat back")
			}
			ra.Done()
			require.Eventually(t, func() bool {
				st, err := reserve.ReadSeats(ctx, b, key)
				return err == nil && st.Used == 0
			}, 10*time.Second, 10*time.Millisecond, "seats left counted after both calls ended")
		})
	}
}
