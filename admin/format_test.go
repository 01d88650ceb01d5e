package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/layout"
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
	format := func() int { return layout.StateFormat(state()) }
	require.Equal(t, 2, format(), "format 2 by default: %q", state())

	for _, tc := range []struct {
		format int
		opts   admin.FormatOptions
		want   string
	}{
		{4, admin.FormatOptions{Reason: "x"}, "state format 4: want 1, 2 or 3"},
		{0, admin.FormatOptions{Reason: "x"}, "state format 0: want 1, 2 or 3"},
		{3, admin.FormatOptions{Reason: " "}, "needs a reason"},
	} {
		_, err := adm.SetFormat(ctx, tc.format, tc.opts)
		require.ErrorContains(t, err, tc.want)
	}
	// A member of a release before the setting: in the fleet, no format
	// reported; and one of v0.1.0: it writes format 2 but does not report
	// that it reads format 3.
	now := float64(time.Now().UnixMilli())
	require.NoError(t, s.Client.ZAdd(ctx, prefix+"{limiters}", redis.Z{Score: now, Member: "old-member"}).Err())
	_, err = adm.SetFormat(ctx, 2, admin.FormatOptions{Reason: "x"})
	require.ErrorIs(t, err, admin.ErrEarlierRelease)
	require.ErrorContains(t, err, "old-member")
	require.NoError(t, s.Client.ZRem(ctx, prefix+"{limiters}", "old-member").Err())
	require.NoError(t, s.Client.ZAdd(ctx, prefix+"{limiters}", redis.Z{Score: now, Member: "v010-member"}).Err())
	require.NoError(t, s.Client.HSet(ctx, layout.WritersKey(prefix), "v010-member", "2").Err())
	_, err = adm.SetFormat(ctx, 3, admin.FormatOptions{Reason: "x"})
	require.ErrorIs(t, err, admin.ErrEarlierRelease)
	require.ErrorContains(t, err, "v010-member")
	require.ErrorContains(t, err, "cannot read format 3")
	require.Zero(t, s.Client.Exists(ctx, prefix+"{limiters}:format").Val(), "a refused switch changed the setting")
	st, err := adm.Format(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, st.Setting)
	require.Equal(t, []int{0, 1, 0}, []int{st.Format1, st.Format2, st.Format3})
	require.Empty(t, st.History)
	require.NoError(t, s.Client.ZRem(ctx, prefix+"{limiters}", "v010-member").Err())
	require.NoError(t, s.Client.HDel(ctx, layout.WritersKey(prefix), "v010-member").Err())
	require.Len(t, st.Members, 2)
	for _, m := range st.Members {
		want := map[bool]string{true: "", false: "3"}[m.ID == "v010-member"]
		require.Equal(t, want, m.Reads, "member %s reads", m.ID)
	}

	_, err = adm.SetFormat(ctx, 3, admin.FormatOptions{Who: "ops", Reason: "upgraded"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := l.Reserve(ctx, "k", lim)
		return err == nil && format() == 3
	}, time.Minute, 10*time.Millisecond, "the Limiter writes format 3 after the switch")

	require.NoError(t, l.Close())
	was, err := adm.Status(ctx, "k")
	require.NoError(t, err)
	// Back to 2, before a rollback to v0.1.0: every key in format 3 is
	// rewritten in format 2; then to 1, in format 1.
	ch, err := adm.SetFormat(ctx, 2, admin.FormatOptions{Who: "ops", Reason: "rollback to v0.1.0"})
	require.NoError(t, err)
	require.Equal(t, admin.FormatChange{At: ch.At, Who: "ops", Reason: "rollback to v0.1.0", From: 3, To: 2, Rewritten: 1}, ch)
	require.Equal(t, 2, format(), "rewritten: %q", state())
	ch, err = adm.SetFormat(ctx, 1, admin.FormatOptions{Who: "ops", Reason: "rollback"})
	require.NoError(t, err)
	require.Equal(t, admin.FormatChange{At: ch.At, Who: "ops", Reason: "rollback", From: 2, To: 1, Rewritten: 1}, ch)
	require.True(t, strings.HasPrefix(state(), "1 "), "rewritten: %q", state())
	is, err := adm.Status(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, was.Reservations, is.Reservations)
	require.Len(t, is.Bands, 1)
	require.InDelta(t, was.Bands[0].Balance, is.Bands[0].Balance, 1e-4, "the rewrites keep the schedule")
	st, err = adm.Format(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, st.Setting)
	require.Equal(t, []int{1, 0, 0}, []int{st.Format1, st.Format2, st.Format3})
	require.Len(t, st.History, 3)
	require.Equal(t, 1, st.History[0].To)
}
