package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestSetFormat: the switch refuses bad input and a fleet with a member of
// an earlier release (one in the heartbeat set that reports no format),
// changing nothing; a Limiter follows the setting; a switch back rewrites
// the keys in format 1, which the earlier release reads.
func TestSetFormat(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	adm, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, HeartbeatInterval: 20 * time.Millisecond})
	require.NoError(t, err)
	defer l.Close()
	lim := reserve.Limit{Rate: 1e-6, Burst: 3} // the balance stays put while the test runs
	_, err = l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	state := func() string { return s.Client.Get(ctx, prefix+"{k}").Val() }
	require.True(t, strings.HasPrefix(state(), "1 "), "format 1 by default: %q", state())

	for _, tc := range []struct {
		format int
		opts   admin.FormatOptions
		want   string
	}{
		{3, admin.FormatOptions{Reason: "x"}, "state format 3: want 1 or 2"},
		{0, admin.FormatOptions{Reason: "x"}, "state format 0: want 1 or 2"},
		{2, admin.FormatOptions{Reason: " "}, "needs a reason"},
	} {
		_, err := adm.SetFormat(ctx, tc.format, tc.opts)
		require.ErrorContains(t, err, tc.want)
	}
	// A member of an earlier release: in the fleet, no format reported.
	require.NoError(t, s.Client.ZAdd(ctx, prefix+"{limiters}", redis.Z{Score: float64(time.Now().UnixMilli()), Member: "old-member"}).Err())
	_, err = adm.SetFormat(ctx, 2, admin.FormatOptions{Reason: "x"})
	require.ErrorIs(t, err, admin.ErrEarlierRelease)
	require.ErrorContains(t, err, "old-member")
	require.Zero(t, s.Client.Exists(ctx, prefix+"{limiters}:format").Val(), "a refused switch changed the setting")
	st, err := adm.Format(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Setting)
	require.Equal(t, 1, st.Format1)
	require.Empty(t, st.History)
	require.NoError(t, s.Client.ZRem(ctx, prefix+"{limiters}", "old-member").Err())

	_, err = adm.SetFormat(ctx, 2, admin.FormatOptions{Who: "ops", Reason: "upgraded"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := l.Reserve(ctx, "k", lim)
		return err == nil && !strings.HasPrefix(state(), "1 ")
	}, time.Minute, 10*time.Millisecond, "the Limiter writes format 2 after the switch")

	require.NoError(t, l.Close())
	was, err := adm.Status(ctx, "k")
	require.NoError(t, err)
	ch, err := adm.SetFormat(ctx, 1, admin.FormatOptions{Who: "ops", Reason: "rollback"})
	require.NoError(t, err)
	require.Equal(t, admin.FormatChange{At: ch.At, Who: "ops", Reason: "rollback", From: 2, To: 1, Rewritten: 1}, ch)
	require.True(t, strings.HasPrefix(state(), "1 "), "rewritten: %q", state())
	is, err := adm.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, was.Reservations, is.Reservations)
	require.Len(t, is.Bands, 1)
	require.InDelta(t, was.Bands[0].Balance, is.Bands[0].Balance, 1e-4, "the rewrite keeps the schedule")
	st, err = adm.Format(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Setting)
	require.Equal(t, []int{1, 0}, []int{st.Format1, st.Format2})
	require.Len(t, st.History, 2)
	require.Equal(t, 1, st.History[0].To)
}
