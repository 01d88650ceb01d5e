package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// TestExpiredOnServerAfterACancel: the differential tests end a trial when
// its key expired on the server's clock (real time passed, a loaded
// machine). A key that expired between a step's look and a cancel is
// written again by the cancel, as a state made anew, and a Peek then reads
// a full bucket: the look after the cancel must tell it from the trial's
// state. It did not (CI beside a CPU hog, PACER_SEED=1796169314366359842:
// TestContractRedis/DifferentialCancel failed at trial 19 step 177, a Peek
// of 1 on a Limit of 1,000/s, burst 1, where the model had -5.88).
func TestExpiredOnServerAfterACancel(t *testing.T) {
	b := redisBackend(t)
	ctx := context.Background()
	for _, format := range []int{1, 2, 3} {
		clk := fakeclock.New(epoch)
		l := newLimiterFormat(t, b, clk, format)
		lim := reserve.Limit{Rate: 1000, Burst: 1}
		var rs []*reserve.Reservation
		for range 3 {
			r, err := l.ReserveN(ctx, reserve.Single("diff", lim, 1))
			require.NoError(t, err)
			rs = append(rs, r)
		}
		debt := func() float64 { return -1.5 } // the model's balance: 3 reserved at once
		require.False(t, expiredOnServer(t, b, l.RedisKey("diff"), lim, 3, debt), "format %d: the trial's state", format)
		clk.Advance(time.Millisecond / 2)
		require.NoError(t, b.client.Del(ctx, l.RedisKey("diff")).Err()) // expired on the server's clock
		require.NoError(t, rs[1].Cancel(ctx))
		require.True(t, expiredOnServer(t, b, l.RedisKey("diff"), lim, 3, debt),
			"format %d: a state written anew by a cancel after the key expired", format)
	}
}
