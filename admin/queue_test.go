package admin_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNonBindingBandQueue: in a policy of two buckets where one binds, the
// other's figures are its own. Four calls of 1 request and 100 tokens on
// requests 1/s and tokens 0.1/s (burst 100) get slots 1000 s apart, set
// by tokens; each charges requests at its slot, which pushes the requests
// bucket's schedule to 3000 s from now, so the arithmetic of its state
// alone read as 3000 requests queued, with 3 calls waiting in all (issue
// 42: "67.6 requests queued" with 24 callers). Nothing waits for
// requests: it refills between the slots tokens spaces.
func TestNonBindingBandQueue(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	pol := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 1, Burst: 1}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 0.1, Burst: 100}},
	}
	req := reserve.Request{Key: "llm", Policy: pol, Cost: reserve.Cost{"requests": 1, "tokens": 100}}
	for i := range 4 {
		r, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
		if i > 0 {
			assert.Equal(t, "tokens", r.Band(), "tokens binds every call after the first")
		}
	}
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx, "llm")
		return err == nil && st.Source == "code"
	}, 10*time.Second, 10*time.Millisecond, "the heartbeat reports the code's policy")
	st, err := a.Status(ctx, "llm")
	require.NoError(t, err)
	require.Len(t, st.Bands, 2)
	assert.Equal(t, "tokens", st.Binding)
	rq, tk := st.Bands[0], st.Bands[1]
	require.Equal(t, "requests", rq.Name)
	require.Equal(t, "tokens", tk.Name)

	// tokens: the 3 calls after the first, 100 tokens each, less what it
	// refilled since the first (0.1 a second: well under one token
	// however slow the machine).
	assert.LessOrEqual(t, tk.Queued, 300.0)
	assert.Greater(t, tk.Queued, 299.0)
	// requests: nothing waits for it; it holds its whole burst when the
	// key frees (its last charge 1000 s before that).
	assert.Equal(t, 0.0, rq.Queued, "requests's own queue, not tokens's")
	assert.Equal(t, 1.0, rq.Spare, "requests holds its burst of 1 when tokens frees the key")
	assert.Equal(t, 1.0, tk.Spare, "tokens, binding, frees a call when it holds one token")
}

// TestQueue: Queue says when a call reserved now would go, behind the
// slots already granted, under each change an operator makes: set, pause,
// unset, resume; a reservation made right after a read gets that very
// slot. Slots lie 100 s apart (1 s under the stored limit): the figures
// are bounded by the time the test took, measured, not guessed.
func TestQueue(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: 50 * time.Millisecond})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	_, err = a.Queue(ctx, "nobody")
	assert.ErrorIs(t, err, admin.ErrUnknownKey)

	code := reserve.Limit{Rate: 0.01, Burst: 1}
	start := time.Now()
	for range 4 { // slots at 0, 100, 200 and 300 s
		_, err := l.Reserve(ctx, "api", code)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		st, err := a.Status(ctx, "api")
		return err == nil && st.Source == "code"
	}, 10*time.Second, 10*time.Millisecond, "the heartbeat reports the code's policy")
	// within: d less the time since start, at most d.
	within := func(what string, got, d time.Duration) {
		t.Helper()
		assert.LessOrEqual(t, got, d, what)
		assert.GreaterOrEqual(t, got, d-time.Since(start), what)
	}

	q, err := a.Queue(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, "permits", q.Binding)
	within("the next slot, after the 4 granted", q.Next, 400*time.Second)
	assert.Equal(t, "permits", q.Unit)
	assert.LessOrEqual(t, q.Granted, 3.0, "3 granted beyond the first")
	assert.GreaterOrEqual(t, q.Granted, 3-0.01*time.Since(start).Seconds())

	_, err = a.SetLimit(ctx, "api", reserve.Limit{Rate: 1, Burst: 1}.Policy(), false, "ops", "faster")
	require.NoError(t, err)
	q, err = a.Queue(ctx, "api")
	require.NoError(t, err)
	within("the stored 1/s applies after the last slot granted at 0.01/s", q.Next, 301*time.Second)
	sent := time.Now()
	r, err := l.Reserve(ctx, "api", code)
	require.NoError(t, err)
	rtt := time.Since(sent)
	// Redis runs on this machine: one clock. The slot is the one Queue
	// told; the reservation's Time is it, plus at most its round trip.
	assert.False(t, r.Time().Before(q.At()), "slot %v before the one told, %v", r.Time(), q.At())
	assert.LessOrEqual(t, r.Time().Sub(q.At()), rtt)

	require.NoError(t, a.Pause(ctx, "api", 1000*time.Second, "ops", "429s"))
	q, err = a.Queue(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, reserve.PauseBinding, q.Binding)
	assert.Zero(t, q.Granted)
	assert.LessOrEqual(t, q.Next, 1001*time.Second, "the pause, then one slot at 1/s")
	assert.GreaterOrEqual(t, q.Next, 1000*time.Second-time.Since(start))

	_, err = a.UnsetLimit(ctx, "api", "ops", "back")
	require.NoError(t, err)
	q, err = a.Queue(ctx, "api")
	require.NoError(t, err)
	assert.LessOrEqual(t, q.Next, 1100*time.Second, "the pause, then one slot at the code's 0.01/s")
	assert.GreaterOrEqual(t, q.Next, 1100*time.Second-time.Since(start))

	require.NoError(t, a.Resume(ctx, "api", "ops", "over"))
	q, err = a.Queue(ctx, "api")
	require.NoError(t, err)
	assert.Equal(t, "permits", q.Binding)
	assert.Zero(t, q.Paused)
	// The slot r got stays (301 s from the first); the next comes 100 s
	// after it.
	next := r.Time().Add(100 * time.Second)
	assert.False(t, q.At().After(next), "next %v, after r's slot %v + 100 s", q.At(), r.Time())
	assert.LessOrEqual(t, next.Sub(q.At()), rtt, "r's Time lies at most its round trip after its slot")
}

// TestQueueCalendar: a key whose limit in force has a calendar window
// (stored by pacer set --per day) is read with the window's table, as the
// fleet's calls send it: the queue of a spent day is its next midnight.
func TestQueueCalendar(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	pol := reserve.Policy{{Name: "daily", Unit: "requests", Window: reserve.Window{N: 2, Calendar: reserve.Day, Location: la}}}
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	// Midnight in Los Angeles may fall between the calls: that try spent
	// no day's quota, and the next, on another key, runs within one day.
	for try := range 3 {
		key := fmt.Sprintf("gemini%d", try)
		day := calendarDay(time.Now().In(la))
		_, err = a.SetLimit(ctx, key, pol, false, "ops", "the provider's day")
		require.NoError(t, err)
		req := reserve.Request{Key: key, Policy: pol, Cost: reserve.Cost{"requests": 1}}
		for range 2 {
			_, err := l.ReserveN(ctx, req)
			require.NoError(t, err)
		}
		q, err := a.Queue(ctx, key)
		require.NoError(t, err)
		if calendarDay(q.Now.In(la)) != day || calendarDay(time.Now().In(la)) != day {
			continue
		}
		assert.Equal(t, "daily", q.Binding)
		_, end := pol[0].Window.Span(calendarDay(q.Now.In(la)))
		assert.Equal(t, end.UTC(), q.At().Truncate(time.Microsecond), "the day's quota spent: a call reserved now goes at the next midnight in Los Angeles")
		return
	}
	t.Fatal("3 tries, each across a midnight in Los Angeles")
}

// calendarDay is t's day number since 1970-01-01 in its location (a
// calendar day window's index).
func calendarDay(t time.Time) int64 {
	y, m, d := t.Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
}
