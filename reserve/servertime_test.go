package reserve

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClockSyncPlacement drives the offset estimate with calls whose
// server reading happened at a known local instant, exactly, on synthetic
// clocks.
func TestClockSyncPlacement(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	const offset = int64(3 * time.Second) // server = local + offset
	serverAt := func(local time.Time) int64 { return local.UnixNano() + offset }
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }

	var c clockSync
	// First call: round trip 100 µs, the script ran 70 µs after sending.
	send := t0
	got, _ := c.place(serverAt(send.Add(us(70))), send, send.Add(us(100)))
	assert.Equal(t, send.Add(us(100)), got, "the first call is placed at its reply's arrival")

	// A call with a 20 µs round trip, the script 5 µs in: the new anchor,
	// 15 µs late of the truth.
	send = t0.Add(time.Second)
	got, _ = c.place(serverAt(send.Add(us(5))), send, send.Add(us(20)))
	assert.Equal(t, send.Add(us(20)), got)

	// A slow call (1 ms round trip, the reply delayed 900 µs): placed by
	// the anchor, 15 µs late of the truth, not at its reply's arrival.
	send = t0.Add(2 * time.Second)
	truth := send.Add(us(100))
	got, late := c.place(serverAt(truth), send, send.Add(time.Millisecond))
	assert.Equal(t, truth.Add(us(15)), got)
	assert.Zero(t, late)

	// A reply delayed 5 ms: the estimate would be 4.9 ms before the
	// arrival; it is placed MaxEarly before it.
	send = t0.Add(3 * time.Second)
	truth = send.Add(us(100))
	recv := send.Add(5 * time.Millisecond)
	got, late = c.place(serverAt(truth), send, recv)
	assert.Equal(t, recv.Add(-MaxEarly), got)
	assert.Equal(t, recv.Add(-MaxEarly).Sub(truth.Add(us(15))), late, "late: from the estimate to where it is placed")

	// The server's clock steps back 2 s: the anchor would place this
	// call's reading before the call was sent; the call replaces it.
	send = t0.Add(4 * time.Second)
	got, _ = c.place(serverAt(send.Add(us(40)))-int64(2*time.Second), send, send.Add(us(60)))
	assert.Equal(t, send.Add(us(60)), got)
	assert.Equal(t, us(60), c.rtt)

	// An old anchor is kept against a call slower than its round trip plus
	// the drift its age allows (maxDrift: 5.5 ms at 11 s): a reply that
	// waited 80 ms for its process is placed by it, late by 79 ms. Before,
	// an anchor over 10 s old was replaced by the next call, however slow,
	// and its slot placed 80 ms late with nothing to say so.
	stepped := func(local time.Time) int64 { return serverAt(local) - int64(2*time.Second) }
	send = t0.Add(15 * time.Second)
	truth = send.Add(us(200))
	recv = send.Add(80 * time.Millisecond)
	got, late = c.place(stepped(truth), send, recv)
	assert.Equal(t, recv.Add(-MaxEarly), got)
	assert.Equal(t, recv.Add(-MaxEarly).Sub(truth.Add(us(20))), late)
	assert.Equal(t, us(60), c.rtt, "the 11 s old anchor of 60 µs is kept")
	// A call within that allowance replaces it.
	send = t0.Add(15*time.Second + 500*time.Millisecond)
	got, late = c.place(stepped(send.Add(time.Millisecond)), send, send.Add(5*time.Millisecond))
	assert.Equal(t, send.Add(5*time.Millisecond), got)
	assert.Zero(t, late)
	assert.Equal(t, 5*time.Millisecond, c.rtt)
}

// TestClockSyncBounds: whatever the calls, a reading is placed within the
// call's bounds and at most MaxEarly before its reply arrived; clocks
// stepping now and then (by more than a round trip), never before the truth,
// and late of it by at most the round trip of the call the estimate rests on
// or, when that would be too early, by what MaxEarly forces.
func TestClockSyncBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var c clockSync
	offset := int64(0)
	local := time.Unix(1_800_000_000, 0)
	for i := range 100_000 {
		if i%10_000 == 5_000 {
			step := int64(100*time.Millisecond) + rng.Int64N(int64(time.Second))
			if rng.IntN(2) == 0 {
				step = -step
			}
			offset += step
		}
		local = local.Add(time.Duration(rng.Int64N(int64(time.Millisecond))))
		send := local
		toServer := time.Duration(rng.ExpFloat64() * float64(30*time.Microsecond))
		back := time.Duration(rng.ExpFloat64() * float64(30*time.Microsecond))
		if rng.IntN(50) == 0 {
			back += time.Duration(rng.Int64N(int64(10 * time.Millisecond))) // a stalled reply
		}
		truth := send.Add(toServer)
		recv := truth.Add(back)
		got, late := c.place(truth.UnixNano()+offset, send, recv)
		est := got.Add(-late) // where the estimate placed it
		require.False(t, est.Before(truth), "call %d estimated early", i)
		require.True(t, est.Sub(truth) <= c.rtt+drifted(recv.Sub(c.taken)), "call %d: estimated late by more than its anchor's error", i)
		require.True(t, late == 0 || got.Equal(recv.Add(-MaxEarly)), "call %d: late %v, not placed MaxEarly before its reply", i, late)
		require.False(t, got.Before(send), "call %d placed before it was sent", i)
		require.False(t, got.After(recv), "call %d placed after its reply arrived", i)
		require.False(t, got.Before(recv.Add(-MaxEarly)), "call %d placed more than MaxEarly early", i)
		require.False(t, got.Before(truth), "call %d placed early", i)
		require.True(t, got.Sub(truth) <= c.rtt || got.Equal(recv.Add(-MaxEarly)), "call %d: late by more than its anchor's round trip", i)
		local = recv
	}
}

// TestClockSyncLowRTT: how far away Redis is (clockSync.lowRTT) is the
// shortest round trip of the calls placed in the current window and the
// one before it: one slow call (a stall) does not lengthen it, a Redis that
// moved farther is followed within two windows, and none is 0.
func TestClockSyncLowRTT(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var c clockSync
	assert.Zero(t, c.lowRTT(), "no call yet")
	call := func(at, rtt time.Duration) {
		send := t0.Add(at)
		c.place(send.Add(rtt/2).UnixNano(), send, send.Add(rtt))
	}
	call(0, ms(5))
	assert.Equal(t, ms(5), c.lowRTT())
	call(ms(100), ms(3000)) // a call across a stall
	assert.Equal(t, ms(5), c.lowRTT(), "a stall does not lengthen it")
	call(ms(200), ms(4))
	assert.Equal(t, ms(4), c.lowRTT())
	call(lowWindow+ms(1), ms(9)) // a second window
	assert.Equal(t, ms(4), c.lowRTT(), "the window before still counts")
	call(2*lowWindow+ms(2), ms(8)) // a third: the first is forgotten
	assert.Equal(t, ms(8), c.lowRTT(), "Redis moved farther")
	call(5*lowWindow, ms(20)) // after two windows without a call
	assert.Equal(t, ms(20), c.lowRTT(), "the old windows are forgotten")
}
