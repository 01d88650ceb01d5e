package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPauseOneStep: an operator's pause and resume write the key's state
// and its history entry in one script call: when the entry cannot be
// written (the history key holds another type), the pause or resume is not
// made either; a key Redis knows nothing of is refused by the script
// itself, and nothing is written; a key known only by its stored limit, or
// only by the policy a Limiter reports, is paused.
func TestPauseOneStep(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	c := s.Client
	key := func(name string) string { return layout.Key(prefix, name) }
	all := func() map[string]string { return snapshot(t, s, prefix) }

	// Nothing of the key: refused, nothing written.
	before := all()
	assert.ErrorIs(t, a.Pause(ctx, "nobody", time.Minute, "ops", "typo"), admin.ErrUnknownKey)
	assert.ErrorIs(t, a.Resume(ctx, "nobody", "ops", "typo"), admin.ErrUnknownKey)
	assert.Equal(t, before, all(), "a refused pause wrote something")

	// A stored limit alone: paused, the entry names it before and after.
	_, err = a.SetLimit(ctx, "stored", reserve.Limit{Rate: 1, Burst: 1}.Policy(), false, "ops", "setup")
	require.NoError(t, err)
	require.NoError(t, a.Pause(ctx, "stored", 90*time.Second, "ops", "incident 42"))
	st, err := a.Status(ctx, "stored")
	require.NoError(t, err)
	assert.True(t, st.Paused > 0 && st.Paused <= 90*time.Second, "paused %v", st.Paused)
	h, err := a.History(ctx, "stored")
	require.NoError(t, err)
	require.Len(t, h, 2)
	assert.Equal(t, admin.Change{At: h[0].At, Op: "pause 1m30s", Who: "ops", Reason: "incident 42",
		Before: "permits: 1/s, burst 1", After: "permits: 1/s, burst 1"}, h[0])

	// Resumed, in one call too; a second resume is refused and writes nothing.
	require.NoError(t, a.Resume(ctx, "stored", "ops", "over"))
	st, err = a.Status(ctx, "stored")
	require.NoError(t, err)
	assert.Zero(t, st.Paused)
	h, err = a.History(ctx, "stored")
	require.NoError(t, err)
	require.Len(t, h, 3)
	assert.Equal(t, "resume", h[0].Op)
	assert.Equal(t, "over", h[0].Reason)
	before = all()
	assert.ErrorIs(t, a.Resume(ctx, "stored", "ops", "twice"), admin.ErrNotPaused)
	assert.Equal(t, before, all(), "a refused resume wrote something")

	// Reported by a Limiter alone (no state yet): paused, the state made.
	require.NoError(t, c.HSet(ctx, layout.Policies(prefix), "reported", "0 1 permits permits b 1 1").Err())
	require.NoError(t, a.Pause(ctx, "reported", time.Minute, "ops", "ahead of a 429"))
	st, err = a.Status(ctx, "reported")
	require.NoError(t, err)
	assert.True(t, st.HasState)
	assert.True(t, st.Paused > 0 && st.Paused <= time.Minute, "paused %v", st.Paused)

	// The history key of another type: neither the pause nor the resume
	// is made, nor anything else written.
	require.NoError(t, c.Del(ctx, key("stored")+":history").Err())
	require.NoError(t, c.HSet(ctx, key("stored")+":history", "f", "v").Err())
	before = all()
	assert.ErrorIs(t, a.Pause(ctx, "stored", time.Hour, "ops", "x"), reserve.ErrWrongType)
	assert.Equal(t, before, all(), "a pause whose entry could not be written was made")
	require.NoError(t, c.Del(ctx, key("reported")+":history").Err())
	require.NoError(t, c.HSet(ctx, key("reported")+":history", "f", "v").Err())
	before = all()
	assert.ErrorIs(t, a.Resume(ctx, "reported", "ops", "x"), reserve.ErrWrongType)
	assert.Equal(t, before, all(), "a resume whose entry could not be written was made")

	// A stored limit key of another type: refused, nothing written.
	require.NoError(t, c.SAdd(ctx, key("odd")+":limit", "m").Err())
	before = all()
	assert.ErrorIs(t, a.Pause(ctx, "odd", time.Hour, "ops", "x"), reserve.ErrWrongType)
	assert.Equal(t, before, all())
}

// TestLimiterPauseRecordsNothing: a Limiter's own pause (a 429) runs the
// same script with two keys: it pauses the key and writes no history.
func TestLimiterPauseRecordsNothing(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	require.NoError(t, l.Pause(ctx, "api", time.Minute))
	st, err := a.Status(ctx, "api")
	require.NoError(t, err)
	assert.True(t, st.Paused > 0 && st.Paused <= time.Minute, "paused %v", st.Paused)
	n, err := s.Client.Exists(ctx, l.RedisKey("api")+":history").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a Limiter's pause wrote a history")
}

// TestResumeMovesWindowQueue: an operator's resume frees a key whose
// window band's queue, granted during the pause, fills more than one
// window. The resume runs under the policy the fleet reports, so it knows
// the windows, and moves the queue earlier by whole windows, each
// window's calls with it. The combination runner's seeds 22 and 28: a
// resume on the key's records alone moved such a queue not at all, and
// the key carried almost nothing until the pause's first end.
func TestResumeMovesWindowQueue(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	const length = 2 * time.Second
	pol := reserve.Policy{
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 10, Burst: 1}},
		{Name: "win", Unit: "requests", Window: reserve.Window{N: 12, Length: length}},
	}
	report(t, s, prefix, "api", pol)
	req := reserve.Request{Key: "api", Policy: pol, Cost: reserve.Cost{"requests": 1}}
	var slots []time.Time
	r, err := l.ReserveN(ctx, req)
	require.NoError(t, err)
	slots = append(slots, r.Time())
	require.NoError(t, a.Pause(ctx, "api", time.Minute, "ops", "the provider is down"))
	for range 40 { // a queue of four windows behind the pause
		r, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
		slots = append(slots, r.Time())
	}
	st, err := a.Status(ctx, "api")
	require.NoError(t, err)
	end := st.Now.Add(st.Paused)

	require.NoError(t, a.Resume(ctx, "api", "ops", "the provider is back"))
	state, err := s.Client.Get(ctx, layout.Key(prefix, "api")).Result()
	require.NoError(t, err)
	var from, to, d int64
	i := strings.Index(state, " ~s ")
	require.GreaterOrEqual(t, i, 0, "no resume record in %q", state)
	_, err = fmt.Sscanf(state[i+4:], "%d:%d %d", &from, &to, &d)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 41}, []int64{from, to}, "the reservations granted during the pause")
	require.Positive(t, d, "the queue moved")
	require.Zero(t, d%int64(length), "moved %v: want whole windows", time.Duration(d))
	for i := 1; i < len(slots); i++ {
		slots[i] = slots[i].Add(-time.Duration(d))
	}
	fresh, err := l.ReserveN(ctx, req)
	require.NoError(t, err)
	require.True(t, fresh.Time().Before(end), "a call after the resume goes at %v, after the pause's end %v", fresh.Time(), end)
	slots = append(slots, fresh.Time())
	count := map[int64]int{}
	for _, at := range slots {
		w := at.UnixNano() / int64(length)
		count[w]++
		require.LessOrEqual(t, count[w], 12, "window %d", w)
	}
}

// TestPauseStoredCalendar: an operator pauses and resumes a key whose
// stored limit has a calendar window, reported by the fleet with a policy
// of its own or not at all: the scripts get the stored window's table too.
func TestPauseStoredCalendar(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	daily := reserve.Policy{{Name: "daily", Unit: "requests", Window: reserve.Window{N: 100, Calendar: reserve.Day, Location: la}}}
	for _, reported := range []bool{true, false} {
		key := "cal-unreported"
		if reported {
			key = "cal-reported"
			report(t, s, prefix, key, reserve.Policy{{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 5, Burst: 1}}})
		}
		_, err = a.SetLimit(ctx, key, daily, false, "ops", "the provider's day")
		require.NoError(t, err)
		require.NoError(t, a.Pause(ctx, key, time.Minute, "ops", "down"), key)
		require.NoError(t, a.Resume(ctx, key, "ops", "up"), key)
	}
}
