package reserve_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	holdpkg "github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHoldNoShareWaits: a hold or a claim the group on Redis can never
// take at its share while a member is held (a window of 2 a day, one unit
// of it the held member's, and a cost of 2: hold.lua's and claim.lua's -2)
// grants nothing, and its caller waits for a share within its context, as
// a reservation's does. Before, Hold handed out a slot at once that Redis
// had not booked (a reservation numbered -2, charged nowhere: beside the
// held member's unit, 3 calls in a window of 2), and Claim answered a
// WaitTooLongError of a 0 wait.
func TestHoldNoShareWaits(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, HeartbeatInterval: 20 * time.Millisecond, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, a)
	// Another member, pacing locally: a holds it.
	var mode atomic.Value
	mode.Store("local")
	otherMember(t, s, a, &mode)
	require.Eventually(t, func() bool { return a.Share() == 0.5 }, 30*time.Second, 5*time.Millisecond, "the other member never counted as held")

	book, err := holdpkg.New(a, holdpkg.Options{})
	require.NoError(t, err)
	req := reserve.Request{Key: "quota", Policy: reserve.Policy{
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 2, Length: 24 * time.Hour}},
	}, Cost: reserve.Cost{"requests": 2}}

	hctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	gs, err := book.Hold(hctx, []holdpkg.Request{{ID: "job-1", Request: req}})
	require.Error(t, err, "a hold granted where the share has no room: %+v", gs)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "it waited for a share until its context ended: %v", err)

	cctx, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	g, err := book.Claim(cctx, "job-2", req, time.Hour)
	require.Error(t, err, "a claim granted where the share has no room: %+v", g)
	var tooLong *reserve.WaitTooLongError
	assert.False(t, errors.As(err, &tooLong) && tooLong.Wait == 0, "a refusal of a 0 wait: %v", err)
	assert.True(t, errors.Is(err, reserve.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded), "no share: %v", err)
	n, err := s.Client.Exists(ctx, prefix+"{quota}").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "nothing booked")
}
