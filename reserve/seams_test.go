package reserve_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/require"
)

// Tests for the seams: where two features meet (issue 21's findings). Each
// says which finding it pins.

// hourly is a code policy of a per-second bucket and an hourly quota of 5
// on the same unit.
var hourly = reserve.Policy{
	{Name: reserve.PermitsUnit, Limit: reserve.Limit{Rate: 100, Burst: 10}},
	{Name: "hourly", Unit: reserve.PermitsUnit, Window: reserve.PerWindow(5, time.Hour)},
}

// fillHour takes the hour's 5 units on key and checks that a sixth call
// would wait for the next hour.
func fillHour(t *testing.T, l *reserve.Limiter, key string) {
	t.Helper()
	ctx := context.Background()
	for i := range 5 {
		_, err := l.TryReservePolicy(ctx, key, hourly, reserve.Permits(1), time.Minute)
		require.NoError(t, err, "call %d of the hour's 5", i+1)
	}
	requireHourFull(t, l, key, "after the hour's 5")
}

// requireHourFull checks that a call within the hour is refused: the
// hour's 5 are used.
func requireHourFull(t *testing.T, l *reserve.Limiter, key, when string) {
	t.Helper()
	_, err := l.TryReservePolicy(context.Background(), key, hourly, reserve.Permits(1), time.Minute)
	var tooLong *reserve.WaitTooLongError
	require.True(t, errors.As(err, &tooLong), "%s: a call within the hour got %v, want a *WaitTooLongError (the hour holds 5)", when, err)
}

// TestStoredLimitKeepsOtherBands (finding 3): a stored limit replaces the
// bands it names and only those. An operator storing a single Limit for a
// key whose code also has an hourly quota must not erase the quota's use:
// before the fix, SetLimit, one call and UnsetLimit let the same hour take 5
// more (11 in an hour of 5).
func TestStoredLimitKeepsOtherBands(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Clock: clk, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := reserve.NewAdmin(s.Client, reserve.AdminOptions{KeyPrefix: prefix})
	require.NoError(t, err)

	fillHour(t, l, "api")
	_, err = a.SetLimit(ctx, "api", reserve.Limit{Rate: 50, Burst: 5}.Policy(), false, "ops", "pacer set --rate 50 --burst 5")
	require.NoError(t, err)
	requireHourFull(t, l, "api", "under the stored limit (it names only the bucket)")
	clk.Advance(time.Second)
	_, err = a.UnsetLimit(ctx, "api", "ops", "back")
	require.NoError(t, err)
	requireHourFull(t, l, "api", "after the stored limit was removed")
}

// TestPauseKeepsOtherBands (finding 3): a pause belongs to the key. A Pause
// passed a policy without the hourly band must not erase the hour's use.
func TestPauseKeepsOtherBands(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC))
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Clock: clk, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)

	fillHour(t, l, "api")
	require.NoError(t, l.Pause(ctx, "api", reserve.Limit{Rate: 100, Burst: 10}, time.Second))
	clk.Advance(2 * time.Second)
	requireHourFull(t, l, "api", "after a pause made with a policy lacking the hourly band")
}
