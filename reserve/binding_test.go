package reserve_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// Tests for the binding band (issue 27): what set a slot is named on the
// Reservation, in a refusal, in Peek, to the metrics and to a Tracer.

// twoBands is a bucket of 10/s (burst 2) and a quota of 4 a day on the
// same unit.
var twoBands = reserve.Policy{
	{Name: "rps", Unit: reserve.PermitsUnit, Limit: reserve.Limit{Rate: 10, Burst: 2}},
	{Name: "daily", Unit: reserve.PermitsUnit, Window: reserve.Window{N: 4, Length: 24 * time.Hour}},
}

// grants records GrantMetrics' Granted.
type grants struct {
	noMetrics
	mu sync.Mutex
	g  []reserve.Grant
}

func (m *grants) Granted(g reserve.Grant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g.Units, g.Amounts = slices.Clone(g.Units), slices.Clone(g.Amounts)
	m.g = append(m.g, g)
}

func (m *grants) all() []reserve.Grant {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.g)
}

// noMetrics implements reserve.Metrics with nothing.
type noMetrics struct{}

func (noMetrics) Reserved(string, []string, []float64, time.Duration, bool) {}
func (noMetrics) Moved(string, string)                                      {}
func (noMetrics) RedisCall(string, time.Duration, error)                    {}
func (noMetrics) Fallback(bool)                                             {}
func (noMetrics) Paused(string, time.Duration)                              {}
func (noMetrics) Evictable(string)                                          {}

// TestBindingBand: on Redis, the first two calls fit the burst (no band),
// the next two wait for the bucket, and a fifth is refused by the day's
// quota, which the error names; Peek names the same band; GrantMetrics
// gets each grant's band and source.
func TestBindingBand(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	m := &grants{}
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Clock: clk, ClientTime: true,
		Logger: quiet, FailClosed: true, Metrics: m})
	require.NoError(t, err)
	closeLimiter(t, l)

	req := reserve.Request{Key: "api", Policy: twoBands, Cost: reserve.Permits(1)}
	var got []string
	for range 4 {
		r, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, reserve.SourceRedis, r.Source())
		got = append(got, r.Band())
	}
	assert.Equal(t, []string{"", "", "rps", "rps"}, got, "binding bands of 4 calls on a burst of 2")

	snap, err := l.Peek(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, "daily", snap.Binding, "Peek: the day's 4 are used")

	_, err = l.TryReserveN(ctx, req, time.Hour)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, "daily", tooLong.Band)
	assert.False(t, tooLong.Deadline)
	assert.Contains(t, err.Error(), "set by band daily")

	// A Wait whose deadline is too near says so, and names the band.
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	err = l.WaitN(dctx, req)
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, "daily", tooLong.Band)
	assert.True(t, tooLong.Deadline)
	assert.Contains(t, err.Error(), "left before the context's deadline")

	gs := m.all()
	require.Len(t, gs, 4, "four grants reported (the refusals are not grants)")
	for i, g := range gs {
		assert.Equal(t, "api", g.Key)
		assert.Equal(t, reserve.SourceRedis, g.Source)
		assert.Equal(t, got[i], g.Band, "grant %d", i)
		assert.Equal(t, []float64{1}, g.Amounts)
	}
	assert.Zero(t, gs[0].Wait)
	assert.Equal(t, 100*time.Millisecond, gs[3].Wait-gs[2].Wait, "the bucket's spacing")
}

// TestBindingPause: after a pause, the first slot is the pause's (every
// band lets it through as the pause ends), the next the bucket's, which
// the pause emptied; Peek says the pause binds.
func TestBindingPause(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	clk := fakeclock.New(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Clock: clk, ClientTime: true,
		Logger: quiet, FailClosed: true})
	require.NoError(t, err)
	closeLimiter(t, l)

	req := reserve.Request{Key: "api", Policy: twoBands, Cost: reserve.Permits(1)}
	require.NoError(t, l.Pause(ctx, "api", 2*time.Second))
	snap, err := l.Peek(ctx, req)
	require.NoError(t, err)
	assert.Equal(t, reserve.PauseBinding, snap.Binding)
	var got []string
	for range 2 {
		r, err := l.ReserveN(ctx, req)
		require.NoError(t, err)
		got = append(got, r.Band())
	}
	assert.Equal(t, []string{reserve.PauseBinding, "rps"}, got)
}

// TestBindingLocal: the local fallback names the band as Redis would.
func TestBindingLocal(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet, FleetSize: 1})
	require.NoError(t, err)
	closeLimiter(t, l)

	req := reserve.Request{Key: "api", Policy: twoBands, Cost: reserve.Permits(1)}
	s.Stop(t)
	// The local share's burst and quota are the fallback's; the band each
	// call names must be the one Peek names just before it.
	for i := range 5 {
		snap, err := l.Peek(ctx, req)
		require.NoError(t, err)
		require.True(t, snap.Local)
		r, err := l.TryReserveN(ctx, req, time.Second)
		var tooLong *reserve.WaitTooLongError
		switch {
		case errors.As(err, &tooLong):
			assert.Equal(t, "daily", tooLong.Band, "call %d refused", i)
			assert.Equal(t, "daily", snap.Binding, "call %d refused", i)
			return
		case err != nil:
			t.Fatalf("call %d: %v", i, err)
		}
		assert.Equal(t, reserve.SourceLocal, r.Source())
		assert.Equal(t, snap.Binding, r.Band(), "call %d", i)
	}
	t.Fatal("the day's quota of 4 refused none of 5 calls")
}

// events records a Tracer's calls.
type events struct {
	mu  sync.Mutex
	log []string
	// onReserved, if set, runs at Reserved.
	onReserved func(r *reserve.Reservation)
}

func (e *events) StartWait(ctx context.Context, key string) (context.Context, reserve.WaitTrace) {
	e.add("start " + key)
	return context.WithValue(ctx, eventsKey{}, key), e
}

type eventsKey struct{}

func (e *events) add(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.log = append(e.log, s)
}

func (e *events) Reserved(r *reserve.Reservation) {
	e.add("reserved " + r.Band() + " " + r.Source().String())
	if e.onReserved != nil {
		e.onReserved(r)
	}
}
func (e *events) Sleeping(r *reserve.Reservation, d time.Duration) { e.add("sleeping") }
func (e *events) Moved(r *reserve.Reservation, why string)         { e.add("moved " + why + " " + r.Band()) }
func (e *events) End(err error, late time.Duration) {
	if err != nil {
		e.add("end " + err.Error())
		return
	}
	e.add("end ok")
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.log)
}

// TestTracer: a Tracer sees each Wait's events in order: a Wait that sleeps
// for the bucket, one refused by the day's quota (no Reserved), and one
// whose slot a pause covers while it sleeps (Moved, then the pause's slot).
func TestTracer(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	ev := &events{}
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: quiet, FailClosed: true, Tracer: ev})
	require.NoError(t, err)
	closeLimiter(t, l)

	// A day of 4: three Waits, then one that moves (its first slot gives
	// its unit of the day back, and the fresh slot takes it: the day
	// counts the call once), then one refused.
	pol := slices.Clone(twoBands)
	pol[1].Window.N = 4
	req := reserve.Request{Key: "api", Policy: pol, Cost: reserve.Permits(1)}
	for range 3 {
		require.NoError(t, l.WaitN(ctx, req))
	}
	// The third waits for the bucket, unless the machine stalled for its
	// 100 ms (TestBindingBand pins the bands on a clock that stands still).
	third := "reserved rps redis"
	if log := ev.all(); len(log) == 12 && log[9] == "reserved  redis" {
		third = log[9]
	}
	want := []string{
		"start api", "reserved  redis", "sleeping", "end ok",
		"start api", "reserved  redis", "sleeping", "end ok",
		"start api", third, "sleeping", "end ok",
	}
	assert.Equal(t, want, ev.all())

	// The fourth of the day: its slot 100 ms ahead; a pause of 1 s made as
	// it is reserved covers it, and it moves to the pause's end.
	ev.mu.Lock()
	ev.log = nil
	ev.onReserved = func(r *reserve.Reservation) {
		require.NoError(t, l.Pause(ctx, "api", time.Second))
	}
	ev.mu.Unlock()
	require.NoError(t, l.WaitN(ctx, req))
	assert.Equal(t, []string{"start api", "reserved rps redis", "sleeping", "moved pause " + reserve.PauseBinding, "end ok"}, ev.all())

	ev.mu.Lock()
	ev.log, ev.onReserved = nil, nil
	ev.mu.Unlock()
	// (A deadline well before the next UTC day, whatever the time.)
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = l.WaitN(dctx, req)
	var tooLong *reserve.WaitTooLongError
	require.True(t, errors.As(err, &tooLong))
	log := ev.all()
	require.Len(t, log, 2, "a refused Wait: start and end only")
	assert.Equal(t, "end "+err.Error(), log[1])
}
