package otelpacer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// hookTracer is a Telemetry with a hook run as each Wait goes to sleep
// (after the Telemetry's Sleeping, on the Wait's goroutine, once per
// Wait): a test acts there at a known point of the Wait, with no timing.
type hookTracer struct {
	reserve.Tracer
	onSleep func(key string)
}

func (h hookTracer) StartWait(ctx context.Context, key string) (context.Context, reserve.WaitTrace) {
	ctx, w := h.Tracer.StartWait(ctx, key)
	return ctx, &hookTrace{WaitTrace: w, key: key, onSleep: h.onSleep}
}

type hookTrace struct {
	reserve.WaitTrace
	key     string
	onSleep func(string)
	done    bool
}

func (h *hookTrace) Sleeping(r *reserve.Reservation, d time.Duration) {
	h.WaitTrace.Sleeping(r, d)
	if !h.done && h.onSleep != nil {
		h.done = true
		h.onSleep(h.key)
	}
}

// twoBands is a policy of requests and tokens: 1,000 requests/s (burst
// 10) and 10 tokens/s (burst 10). A call costs one request and some
// tokens, so once the tokens are spent the tokens band binds.
var twoBands = reserve.Policy{
	{Name: "requests", Limit: reserve.Limit{Rate: 1000, Burst: 10}},
	{Name: "tokens", Limit: reserve.Limit{Rate: 10, Burst: 10}},
}

func call(key string, tokens float64) reserve.Request {
	return reserve.Request{Key: key, Policy: twoBands, Cost: reserve.Cost{"requests": 1, "tokens": tokens}}
}

// TestWaitSpan: each Wait is a pacer.wait span, a child of the caller's
// span, of kind internal, with the key; its events in order (reserved,
// slept, woke) and at its end the binding band, the source and the wait.
// The first Wait spends the tokens at once (band "none", no wait); the
// second waits up to 100 ms for the tokens band. While it sleeps it counts
// in queued_requests.
func TestWaitSpan(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{KeyAttribute: func(string) string { return "api" }})
	var queuedAsleep map[string]float64
	// MaxLateness -1: a Wait that wakes late on a loaded machine keeps its
	// slot, so the events are exactly these.
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{MaxLateness: -1,
		Tracer: hookTracer{Tracer: g.tel, onSleep: func(string) { queuedAsleep = g.values(t, "pacer.rate_limiting.queued_requests") }}})
	ctx, parent := g.tp.Tracer("test").Start(context.Background(), "job")
	const key = "api.example.com"
	require.NoError(t, l.WaitN(ctx, call(key, 10)))
	assert.Equal(t, map[string]float64{"pacer.key=api": 1}, queuedAsleep, "a Wait asleep")
	require.NoError(t, l.WaitN(ctx, call(key, 1)))
	parent.End()

	spans := g.waitSpans()
	require.Len(t, spans, 2)
	for i, sp := range spans {
		assert.Equal(t, trace.SpanKindInternal, sp.SpanKind())
		assert.Equal(t, parent.SpanContext().SpanID(), sp.Parent().SpanID(), "span %d's parent", i)
		assert.Equal(t, parent.SpanContext().TraceID(), sp.SpanContext().TraceID())
		assert.Equal(t, codes.Unset, sp.Status().Code)
		assert.Equal(t, []string{"reserved", "slept", "woke"}, eventNames(sp))
		a := attrMap(sp.Attributes())
		assert.Equal(t, key, a["pacer.key"])
		assert.Equal(t, "redis", a["pacer.source"])
		ev := events(sp)
		assert.Equal(t, "redis", ev[0].Attrs["pacer.source"])
		assert.Equal(t, a["pacer.band"], ev[0].Attrs["pacer.band"], "the band reserved is the band at the end")
		assert.Equal(t, a["pacer.wait"], ev[0].Attrs["pacer.wait"], "the wait reserved is the wait at the end")
		assert.Contains(t, ev[0].Attrs, "pacer.slot")
		assert.GreaterOrEqual(t, ev[2].Attrs["pacer.late"], 0.0)
	}
	free, bound := attrMap(spans[0].Attributes()), attrMap(spans[1].Attributes())
	assert.Equal(t, "none", free["pacer.band"])
	assert.Equal(t, 0.0, free["pacer.wait"])
	assert.Equal(t, "tokens", bound["pacer.band"], "the tokens band binds")
	assert.LessOrEqual(t, bound["pacer.wait"], 0.1, "one token at 10/s")
	assert.LessOrEqual(t, events(spans[1])[1].Attrs["pacer.sleep"], 0.1)

	assert.Equal(t, map[string]float64{"pacer.key=api": 0}, g.values(t, "pacer.rate_limiting.queued_requests"), "none asleep")
	assert.Equal(t, map[string]float64{
		"pacer.band=none,pacer.key=api,pacer.source=redis":   1,
		"pacer.band=tokens,pacer.key=api,pacer.source=redis": 1,
	}, g.values(t, "pacer.rate_limiting.requests"))
	assert.Equal(t, map[string]float64{
		"pacer.key=api,pacer.source=redis,pacer.unit=requests": 2,
		"pacer.key=api,pacer.source=redis,pacer.unit=tokens":   11,
	}, g.values(t, "pacer.rate_limiting.units"))
	assert.Empty(t, g.values(t, "pacer.rate_limiting.refused"))
}

// TestWaitRefusedSpan: a Wait whose slot comes after its context's
// deadline ends its span with status Error, the error recorded, and the
// refusal's band (a daily window of 1, spent) and deadline; no reserved
// event. It counts in refused, by band and reason.
func TestWaitRefusedSpan(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	// The window starts now: the next is a day away, whatever the time.
	daily := reserve.Policy{
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 1, Length: 24 * time.Hour, Origin: time.Now()}},
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 1, Burst: 1}},
	}
	req := reserve.Request{Key: "quota", Policy: daily, Cost: reserve.Cost{"requests": 1}}
	ctx := context.Background()
	require.NoError(t, l.WaitN(ctx, req))
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := l.WaitN(dctx, req)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	require.Equal(t, "daily", tooLong.Band)

	spans := g.waitSpans()
	require.Len(t, spans, 2)
	sp := spans[1]
	assert.Equal(t, codes.Error, sp.Status().Code)
	assert.Equal(t, err.Error(), sp.Status().Description)
	assert.Equal(t, []string{"exception"}, eventNames(sp), "refused: no reserved event, the error recorded")
	assert.Equal(t, err.Error(), events(sp)[0].Attrs["exception.message"])
	a := attrMap(sp.Attributes())
	assert.Equal(t, "quota", a["pacer.key"])
	assert.Equal(t, "daily", a["pacer.band"])
	assert.Equal(t, true, a["pacer.deadline"])
	assert.Greater(t, a["pacer.refused.wait"], time.Minute.Seconds())
	assert.LessOrEqual(t, a["pacer.max_wait"], time.Minute.Seconds())
	assert.NotContains(t, a, "pacer.source", "nothing was granted")

	assert.Equal(t, map[string]float64{"pacer.band=daily,pacer.rate_limiting.reason=deadline": 1}, g.values(t, "pacer.rate_limiting.refused"))
	// The first Wait is granted once, and once more each time it woke
	// later than its slot allows (MaxLateness: half a slot interval, 5 ms
	// at the 100/s this test used when a loaded CI machine left it off
	// the CPU that long) and took a fresh slot.
	assert.Equal(t, map[string]float64{"pacer.band=none,pacer.source=redis": 1 + g.moved(t)}, g.values(t, "pacer.rate_limiting.requests"))
	assert.Equal(t, "{request}", g.unit(t, "pacer.rate_limiting.refused"))
}

// TestRefusedReason: a WaitTooLongError whose maximum was not a deadline,
// and one with no band (a lease's refusal), as a Tracer's caller may end a
// wait with.
func TestRefusedReason(t *testing.T) {
	g := newRig(t, otelpacer.Options{})
	_, w := g.tel.StartWait(context.Background(), "k")
	w.End(errors.Join(errors.New("refused"), &reserve.WaitTooLongError{Wait: time.Second, MaxWait: time.Millisecond}), 0)
	assert.Equal(t, map[string]float64{"pacer.band=unknown,pacer.rate_limiting.reason=max_wait": 1}, g.values(t, "pacer.rate_limiting.refused"))
	a := attrMap(g.waitSpans()[0].Attributes())
	assert.Equal(t, false, a["pacer.deadline"])
	assert.Equal(t, "unknown", a["pacer.band"])
}

// TestPauseSpans: a pause binds. A Wait after a pause gets its slot from
// it (band "(pause)"); a pause made while a Wait sleeps (from the hook, so
// before the sleeper's check) moves the Wait: a moved event with the
// reason and the fresh slot's band, and the span ends with that band and
// both waits.
func TestPauseSpans(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	var l *reserve.Limiter
	pauseOnSleep := false
	l = g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{MaxLateness: -1,
		Tracer: hookTracer{Tracer: g.tel, onSleep: func(key string) {
			if pauseOnSleep {
				require.NoError(t, l.Pause(context.Background(), key, 300*time.Millisecond))
			}
		}}})
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1}

	require.NoError(t, l.Pause(ctx, "after", 100*time.Millisecond))
	require.NoError(t, l.Wait(ctx, "after", lim))

	_, err := l.Reserve(ctx, "during", lim) // takes the burst: the Wait's slot is 100 ms away
	require.NoError(t, err)
	pauseOnSleep = true
	require.NoError(t, l.Wait(ctx, "during", lim))

	spans := g.waitSpans()
	require.Len(t, spans, 2)
	after, during := spans[0], spans[1]
	assert.Equal(t, []string{"reserved", "slept", "woke"}, eventNames(after))
	assert.Equal(t, reserve.PauseBinding, attrMap(after.Attributes())["pacer.band"])
	assert.Equal(t, reserve.PauseBinding, events(after)[0].Attrs["pacer.band"])

	assert.Equal(t, []string{"reserved", "slept", "moved", "woke"}, eventNames(during))
	ev := events(during)
	assert.Equal(t, "permits", ev[0].Attrs["pacer.band"], "the slot behind the reservation that took the burst")
	assert.Equal(t, "pause", ev[2].Attrs["pacer.moved.reason"])
	assert.Equal(t, reserve.PauseBinding, ev[2].Attrs["pacer.band"], "the fresh slot is the pause's")
	a := attrMap(during.Attributes())
	assert.Equal(t, reserve.PauseBinding, a["pacer.band"])
	// The wait granted: from the grant (the first slot less its wait) to
	// the slot after the move.
	first, moved := slot(t, ev[0]), slot(t, ev[2])
	granted := first.Add(-time.Duration(ev[0].Attrs["pacer.wait"].(float64) * float64(time.Second)))
	assert.InDelta(t, moved.Sub(granted).Seconds(), a["pacer.wait"], 1e-6, "the wait granted")
	assert.Greater(t, a["pacer.wait"], 0.2, "behind a pause of 300 ms, made as the Wait went to sleep")

	assert.Equal(t, map[string]float64{"pacer.moved.reason=pause": 1}, g.values(t, "pacer.rate_limiting.moved"))
	assert.Equal(t, map[string]float64{"": 2}, g.values(t, "pacer.rate_limiting.pauses"))
	assert.Equal(t, map[string]float64{
		"pacer.band=none,pacer.source=redis":    1, // the Reserve
		"pacer.band=permits,pacer.source=redis": 1, // the Wait, before the pause
		"pacer.band=(pause),pacer.source=redis": 2, // the Wait after the pause; the move
	}, g.values(t, "pacer.rate_limiting.requests"))
}

// slot returns the pacer.slot of an event.
func slot(t *testing.T, e event) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339Nano, e.Attrs["pacer.slot"].(string))
	require.NoError(t, err)
	return at
}

// TestLateSpan: a sleeper that wakes after Options.MaxLateness (here 1 ns:
// every one) takes a fresh slot, reserve.MaxLateMoves times: a moved
// event for each, reason late.
func TestLateSpan(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{MaxLateness: time.Nanosecond})
	require.NoError(t, l.Wait(context.Background(), "k", reserve.Limit{Rate: 1e6, Burst: 100}))
	sp := g.waitSpans()[0]
	want := []string{"reserved", "slept"}
	for range reserve.MaxLateMoves {
		want = append(want, "moved")
	}
	assert.Equal(t, append(want, "woke"), eventNames(sp))
	for i := range reserve.MaxLateMoves {
		assert.Equal(t, "late", events(sp)[2+i].Attrs["pacer.moved.reason"], "move %d", i+1)
	}
	assert.Equal(t, map[string]float64{"pacer.moved.reason=late": reserve.MaxLateMoves}, g.values(t, "pacer.rate_limiting.moved"))
}

// TestCanceledSpan: a Wait whose context ends while it sleeps ends its
// span with the context's error, and leaves queued_requests.
func TestCanceledSpan(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{Tracer: hookTracer{Tracer: g.tel, onSleep: func(string) { cancel() }}})
	lim := reserve.Limit{Rate: 1.0 / 3600, Burst: 1}
	_, err := l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	err = l.Wait(ctx, "k", lim) // an hour away: canceled as it goes to sleep
	require.ErrorIs(t, err, context.Canceled)
	sp := g.waitSpans()[0]
	assert.Equal(t, []string{"reserved", "slept", "exception"}, eventNames(sp))
	assert.Equal(t, codes.Error, sp.Status().Code)
	assert.Equal(t, "permits", attrMap(sp.Attributes())["pacer.band"])
	assert.Equal(t, map[string]float64{"": 0}, g.values(t, "pacer.rate_limiting.queued_requests"))
	assert.Empty(t, g.values(t, "pacer.rate_limiting.refused"), "a cancel is no refusal")
}

// TestNotRecording: with a sampler that records nothing, Waits make no
// spans and still count.
func TestNotRecording(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	never := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(g.spans))
	tel, err := otelpacer.New(otelpacer.Options{MeterProvider: g.mp, TracerProvider: never})
	require.NoError(t, err)
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{Metrics: tel, Tracer: tel})
	require.NoError(t, l.Wait(context.Background(), "k", reserve.Limit{Rate: 1, Burst: 1}))
	assert.Empty(t, g.spans.Ended())
	assert.Equal(t, map[string]float64{"pacer.band=none,pacer.source=redis": 1 + g.moved(t)}, g.values(t, "pacer.rate_limiting.requests"))
	assert.Equal(t, map[string]float64{"": 0}, g.values(t, "pacer.rate_limiting.queued_requests"))
}

// TestBadInputSpan: a Wait refused for bad input is a span too (every Wait
// is one): status Error, the error recorded, no reserved event, nothing
// counted as granted or refused; Wait and WaitN alike.
func TestBadInputSpan(t *testing.T) {
	s := redistest.New(t)
	g := newRig(t, otelpacer.Options{})
	l := g.limiter(t, s.Client, redistest.Prefix(t), reserve.Options{})
	ctx := context.Background()
	bad := reserve.Limit{Rate: -1, Burst: 1}
	good := reserve.Limit{Rate: 10, Burst: 1}
	cases := []struct {
		key  string
		wait func() error
		want error
	}{
		{"", func() error { return l.Wait(ctx, "", good) }, reserve.ErrEmptyKey},
		{"limiters", func() error { return l.Wait(ctx, "limiters", good) }, reserve.ErrReservedKey},
		{"k", func() error { return l.Wait(ctx, "k", bad) }, reserve.ErrInvalidRate},
		{"k", func() error { return l.WaitN(ctx, reserve.Single("k", good, 2)) }, reserve.ErrExceedsBurst},
		{"k", func() error {
			return l.WaitN(ctx, reserve.Request{Key: "k", Policy: twoBands, Cost: reserve.Cost{"nope": 1}})
		}, reserve.ErrInvalidCost},
	}
	for _, tc := range cases {
		require.ErrorIs(t, tc.wait(), tc.want)
	}
	spans := g.waitSpans()
	require.Len(t, spans, len(cases), "one span per Wait")
	for i, sp := range spans {
		assert.Equal(t, codes.Error, sp.Status().Code, "case %d", i)
		assert.Contains(t, sp.Status().Description, cases[i].want.Error(), "case %d", i)
		assert.Equal(t, cases[i].key, attrMap(sp.Attributes())["pacer.key"], "case %d", i)
		assert.Equal(t, []string{"exception"}, eventNames(sp), "case %d: the error recorded, nothing reserved", i)
	}
	assert.Empty(t, g.values(t, "pacer.rate_limiting.requests"), "nothing granted")
	assert.Empty(t, g.values(t, "pacer.rate_limiting.refused"), "bad input is not a refusal")
}
