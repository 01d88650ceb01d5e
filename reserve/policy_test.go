package reserve_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// llm is a provider's policy: 5 requests per second (burst 2), 6,000 tokens
// per minute, and 100 requests per aligned minute.
var llm = reserve.Policy{
	{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 5, Burst: 2}},
	{Name: "tpm", Unit: "tokens", Limit: reserve.Limit{Rate: 100, Burst: 6000}},
	{Name: "rpm", Unit: "requests", Window: reserve.Window{N: 100, Length: time.Minute}},
}

func call(tokens float64) reserve.Cost { return reserve.Cost{"requests": 1, "tokens": tokens} }

func testPolicyBadInput(t *testing.T, b backend) {
	ctx := context.Background()
	l := newLimiter(t, b, fakeclock.New(epoch))
	_, err := l.ReserveN(ctx, reserve.Request{Key: "k", Policy: llm, Cost: call(100)})
	require.NoError(t, err)
	before := snapshot(t, b, l, "k")
	bucket := reserve.Limit{Rate: 1, Burst: 1}
	tests := []struct {
		name string
		key  string
		pol  reserve.Policy
		cost reserve.Cost
		want error
	}{
		{"empty key", "", llm, call(1), reserve.ErrEmptyKey},
		{"empty policy", "k", nil, call(1), reserve.ErrInvalidPolicy},
		{"two bands of one name", "k", reserve.Policy{{Name: "a", Limit: bucket}, {Name: "a", Limit: bucket}}, reserve.Cost{"a": 1}, reserve.ErrInvalidPolicy},
		{"no kind", "k", reserve.Policy{{Name: "a"}}, reserve.Cost{"a": 1}, reserve.ErrInvalidPolicy},
		{"both kinds", "k", reserve.Policy{{Name: "a", Limit: bucket, Window: reserve.Window{N: 1, Length: time.Second}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidPolicy},
		{"bad name", "k", reserve.Policy{{Name: "a b", Limit: bucket}}, reserve.Cost{"a b": 1}, reserve.ErrInvalidPolicy},
		{"zero rate", "k", reserve.Policy{{Name: "a", Limit: reserve.Limit{Burst: 1}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidRate},
		{"negative rate", "k", reserve.Policy{{Name: "a", Limit: reserve.Limit{Rate: -1, Burst: 1}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidRate},
		{"NaN rate", "k", reserve.Policy{{Name: "a", Limit: reserve.Limit{Rate: math.NaN(), Burst: 1}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidRate},
		{"infinite rate", "k", reserve.Policy{{Name: "a", Limit: reserve.Limit{Rate: math.Inf(1), Burst: 1}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidRate},
		{"zero burst", "k", reserve.Policy{{Name: "a", Limit: reserve.Limit{Rate: 1}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidBurst},
		{"zero window", "k", reserve.Policy{{Name: "a", Window: reserve.Window{N: 1}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidWindow},
		{"negative window", "k", reserve.Policy{{Name: "a", Window: reserve.Window{N: 1, Length: -time.Second}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidWindow},
		{"N below 1", "k", reserve.Policy{{Name: "a", Window: reserve.Window{N: 0.5, Length: time.Second}}}, reserve.Cost{"a": 0.1}, reserve.ErrInvalidWindow},
		{"NaN N", "k", reserve.Policy{{Name: "a", Window: reserve.Window{N: math.NaN(), Length: time.Second}}}, reserve.Cost{"a": 1}, reserve.ErrInvalidWindow},
		{"unknown unit", "k", llm, reserve.Cost{"requests": 1, "tokens": 1, "points": 1}, reserve.ErrInvalidCost},
		{"missing unit", "k", llm, reserve.Cost{"requests": 1}, reserve.ErrInvalidCost},
		{"negative amount", "k", llm, call(-1), reserve.ErrInvalidCost},
		{"NaN amount", "k", llm, call(math.NaN()), reserve.ErrInvalidCost},
		{"infinite amount", "k", llm, call(math.Inf(1)), reserve.ErrInvalidCost},
		{"nothing charged", "k", llm, reserve.Cost{"requests": 0, "tokens": 0}, reserve.ErrInvalidCost},
		{"above a burst", "k", llm, call(6001), reserve.ErrExceedsBurst},
		{"above a window's N", "k", reserve.Policy{{Name: "a", Window: reserve.Window{N: 5, Length: time.Second}}}, reserve.Cost{"a": 6}, reserve.ErrExceedsBurst},
	}
	for _, tc := range tests {
		_, err := l.ReserveN(ctx, reserve.Request{Key: tc.key, Policy: tc.pol, Cost: tc.cost})
		assert.ErrorIs(t, err, tc.want, "%s: ReserveN", tc.name)
		_, err = l.TryReserveN(ctx, reserve.Request{Key: tc.key, Policy: tc.pol, Cost: tc.cost}, time.Hour)
		assert.ErrorIs(t, err, tc.want, "%s: TryReserveN", tc.name)
		assert.ErrorIs(t, l.WaitN(ctx, reserve.Request{Key: tc.key, Policy: tc.pol, Cost: tc.cost}), tc.want, "%s: WaitN", tc.name)
		_, err = l.Peek(ctx, reserve.Request{Key: tc.key, Policy: tc.pol, Cost: tc.cost})
		assert.ErrorIs(t, err, tc.want, "%s: Peek", tc.name)
	}
	assert.Equal(t, before, snapshot(t, b, l, "k"), "bad input changed the key")
}

// testPolicyOneSlot: a reservation gets one slot, the earliest at which
// every band allows it, and a refusal changes no band.
func testPolicyOneSlot(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	// The request band (burst 2, 5/s) allows two at once; the token band
	// (6,000, 100/s) takes two calls of 3,000 at once, then one of 3,000
	// every 30 s.
	var delays []time.Duration
	for range 3 {
		r, err := l.ReserveN(ctx, reserve.Request{Key: "k", Policy: llm, Cost: call(3000)})
		require.NoError(t, err)
		delays = append(delays, r.DelayFrom(clk.Now()))
	}
	assert.Equal(t, []time.Duration{0, 0, 30 * time.Second}, delays, "tokens hold the third call")
	before := snapshot(t, b, l, "k")
	_, err := l.TryReserveN(ctx, reserve.Request{Key: "k", Policy: llm, Cost: call(100)}, 10*time.Second)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, 31*time.Second, tooLong.Wait, "a small call waits behind the queue of tokens")
	assert.Equal(t, before, snapshot(t, b, l, "k"), "a refused policy reservation changed a band")

	// Peek shows each band.
	st, err := l.Peek(ctx, reserve.Request{Key: "k", Policy: llm, Cost: call(100)})
	require.NoError(t, err)
	assert.Equal(t, 31*time.Second, st.Wait)
	require.Len(t, st.Bands, 3)
	assert.Equal(t, "rps", st.Bands[0].Name)
	// The third call uses its request at +30 s: the request band is
	// charged then (x/time/rate's ReserveN at the slot), so it reads as
	// queued until 29.8 s.
	assert.InDelta(t, -149, st.Bands[0].Value, 1e-9, "requests")
	assert.Equal(t, "tpm", st.Bands[1].Name)
	assert.InDelta(t, -3000, st.Bands[1].Value, 1e-6, "tokens: 9,000 from 6,000")
	assert.Equal(t, 31*time.Second, st.Bands[1].Wait)
	assert.Equal(t, "rpm", st.Bands[2].Name)
	assert.Equal(t, 3.0, st.Bands[2].Value, "requests in the current minute")
}

// testWindowQuota: a fixed window takes N units per aligned window, sends
// the next call to the next window's start, and keeps later calls behind
// it (first come, first served).
func testWindowQuota(t *testing.T, b backend) {
	ctx := context.Background()
	start := time.Date(2026, 11, 22, 1, 2, 50, 0, time.UTC) // 10 s before a whole minute
	clk := fakeclock.New(start)
	l := newLimiter(t, b, clk)
	pol := reserve.Policy{{Name: "q", Window: reserve.Window{N: 3, Length: time.Minute}}}
	var slots []time.Time
	for range 7 {
		r, err := l.ReserveN(ctx, reserve.Request{Key: "w", Policy: pol, Cost: reserve.Cost{"q": 1}})
		require.NoError(t, err)
		slots = append(slots, r.Time())
	}
	minute := start.Truncate(time.Minute)
	want := []time.Time{start, start, start, minute.Add(time.Minute), minute.Add(time.Minute), minute.Add(time.Minute), minute.Add(2 * time.Minute)}
	assert.Equal(t, want, slots)
	// A window with an origin of its own: windows of 10 s starting at :05.
	pol2 := reserve.Policy{{Name: "q", Window: reserve.Window{N: 1, Length: 10 * time.Second, Origin: start.Add(-45 * time.Second)}}}
	r1, err := l.ReserveN(ctx, reserve.Request{Key: "w2", Policy: pol2, Cost: reserve.Cost{"q": 1}})
	require.NoError(t, err)
	r2, err := l.ReserveN(ctx, reserve.Request{Key: "w2", Policy: pol2, Cost: reserve.Cost{"q": 1}})
	require.NoError(t, err)
	assert.Equal(t, start, r1.Time())
	assert.Equal(t, start.Add(5*time.Second), r2.Time(), "the next window starts at :55")
}

// testSettle: Settle replaces the estimate with the actual cost: more moves
// the schedule later, less gives back what later reservations have not
// built on; it is done once, and not after Cancel.
func testSettle(t *testing.T, b backend) {
	ctx := context.Background()
	clk := fakeclock.New(epoch)
	l := newLimiter(t, b, clk)
	pol := reserve.Policy{{Name: "tpm", Unit: "tokens", Limit: reserve.Limit{Rate: 100, Burst: 1000}}}
	tok := func(n float64) reserve.Cost { return reserve.Cost{"tokens": n} }

	r, err := l.ReserveN(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(500)})
	require.NoError(t, err)
	require.NoError(t, r.Settle(ctx, tok(800)), "settle higher")
	st, err := l.Peek(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(1)})
	require.NoError(t, err)
	assert.InDelta(t, 200, st.Bands[0].Value, 1e-6, "1,000 - 800 actually used")
	assert.Equal(t, tok(800), r.Cost())
	assert.ErrorIs(t, r.Settle(ctx, tok(100)), reserve.ErrDone, "a second Settle")
	assert.ErrorIs(t, r.Cancel(ctx), reserve.ErrDone, "Cancel after Settle")

	// Less, after the slot: the unused part comes back.
	r2, err := l.ReserveN(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(200)})
	require.NoError(t, err)
	clk.Advance(time.Second) // +100 tokens
	require.NoError(t, r2.Settle(ctx, tok(50)))
	st, err = l.Peek(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(1)})
	require.NoError(t, err)
	assert.InDelta(t, 250, st.Bands[0].Value, 1e-6, "200 - 50 + 100 refilled")

	// Less, with a later reservation built on it: only what it did not
	// build on comes back.
	r3, err := l.ReserveN(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(250)}) // balance 0
	require.NoError(t, err)
	_, err = l.ReserveN(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(100)}) // queued behind it: -100
	require.NoError(t, err)
	require.NoError(t, r3.Settle(ctx, tok(0)))
	st, err = l.Peek(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(1)})
	require.NoError(t, err)
	assert.InDelta(t, 50, st.Bands[0].Value, 1e-6, "-100, and of the 250 reserved 100 were built on after: 150 back")

	// Bad settles change nothing.
	r4, err := l.ReserveN(ctx, reserve.Request{Key: "s", Policy: pol, Cost: tok(10)})
	require.NoError(t, err)
	before := snapshot(t, b, l, "s")
	assert.ErrorIs(t, r4.Settle(ctx, reserve.Cost{"points": 1}), reserve.ErrInvalidCost)
	assert.ErrorIs(t, r4.Settle(ctx, tok(-1)), reserve.ErrInvalidCost)
	assert.ErrorIs(t, r4.Settle(ctx, tok(math.NaN())), reserve.ErrInvalidCost)
	// Two bad units: the error names the same one every time (the first
	// in sorted order, as ReserveN's does), so every Limiter and every
	// backend says the same thing of the same settle.
	for range 20 {
		err := r4.Settle(ctx, reserve.Cost{"tokens": -1, "points": 1, "a": -2})
		require.ErrorIs(t, err, reserve.ErrInvalidCost)
		require.ErrorContains(t, err, `unit "a" is charged by no band`)
	}
	assert.Equal(t, before, snapshot(t, b, l, "s"))
	require.NoError(t, r4.Cancel(ctx))
	assert.ErrorIs(t, r4.Settle(ctx, tok(5)), reserve.ErrDone, "Settle after Cancel")
}

// TestPolicyText: a Policy goes through encoding/json (MarshalText,
// UnmarshalText) and back unchanged, in the form the scripts read; bad
// text is refused and leaves the Policy as it was.
func TestPolicyText(t *testing.T) {
	pol := reserve.Policy{
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 2.5, Burst: 5}},
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 5000, Length: 24 * time.Hour}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 500, Burst: 30_000}},
	}
	require.NoError(t, pol.Validate())
	text, err := pol.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "3 rps requests b 2.5 5 daily requests w 5000 86400000000:0 tokens tokens b 500 30000", string(text))
	data, err := json.Marshal(map[string]reserve.Policy{"api": pol})
	require.NoError(t, err)
	var back map[string]reserve.Policy
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, pol.String(), back["api"].String())

	_, err = reserve.Policy{{Name: "a"}}.MarshalText()
	assert.ErrorIs(t, err, reserve.ErrInvalidPolicy)
	assert.ErrorIs(t, reserve.Policy{{Name: "a", Limit: reserve.Limit{Rate: -1, Burst: 1}}}.Validate(), reserve.ErrInvalidRate)
	kept := back["api"]
	for _, bad := range []string{"2 a a b 1 1", "1 a a x 1 1", "1 a a b 0 1", "1 a a w 5 nope", "0"} {
		assert.ErrorIs(t, kept.UnmarshalText([]byte(bad)), reserve.ErrInvalidPolicy, "UnmarshalText(%q)", bad)
		assert.Equal(t, pol.String(), kept.String(), "UnmarshalText(%q) changed the Policy", bad)
	}

	// No policy (nil) goes through JSON as "" and back as nil: a struct
	// holding an unset Policy still encodes (the combination runner's
	// dump failed on one).
	type holder struct{ P reserve.Policy }
	data, err = json.Marshal(holder{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"P": ""}`, string(data))
	got := holder{P: pol}
	require.NoError(t, json.Unmarshal(data, &got))
	assert.Nil(t, got.P)
}
