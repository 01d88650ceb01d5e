package reserve_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/fakeclock"
	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testSleepIntoPause: a sleeper whose slot a pause (made by another
// Limiter, after the reservation) comes to cover never returns into it: it
// takes the first slot after the pause.
func testSleepIntoPause(t *testing.T, b backend) {
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	rec := newRecorder()
	newL := func(m reserve.Metrics) *reserve.Limiter {
		l, err := reserve.New(b.pacer(), reserve.Options{KeyPrefix: prefix, FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet, Metrics: m})
		require.NoError(t, err)
		closeLimiter(t, l)
		return l
	}
	sleeper, other := newL(rec), newL(nil)
	lim := reserve.Limit{Rate: 10, Burst: 1}
	_, err := sleeper.Reserve(ctx, "p", lim)
	require.NoError(t, err)
	r, err := sleeper.Reserve(ctx, "p", lim) // about 100 ms away
	require.NoError(t, err)
	slot := r.Time()
	require.NoError(t, other.Pause(ctx, "p", 300*time.Millisecond))
	paused := time.Now().Add(300 * time.Millisecond)
	require.NoError(t, r.Sleep(ctx))
	assert.False(t, time.Now().Before(paused), "Sleep returned inside the pause")
	assert.True(t, r.Time().After(slot), "the reservation kept its slot inside the pause")
	assert.Contains(t, rec.snapshot().moved, reserve.MovedPause)

	// Wait too: a slot granted before the pause is not used inside it.
	_, err = sleeper.Reserve(ctx, "p", lim)
	require.NoError(t, err)
	done := make(chan time.Time, 1)
	go func() {
		assert.NoError(t, sleeper.Wait(ctx, "p", lim))
		done <- time.Now()
	}()
	time.Sleep(20 * time.Millisecond) // the Wait holds its slot, ~200 ms away
	require.NoError(t, other.Pause(ctx, "p", 500*time.Millisecond))
	paused = time.Now().Add(500 * time.Millisecond)
	assert.False(t, (<-done).Before(paused), "Wait returned inside a pause made while it slept")
}

// lateLimiter is a Limiter on b on a fake clock from epoch (ClientTime:
// lateness is exact), its Metrics recorded.
func lateLimiter(t *testing.T, b backend) (*fakeclock.Clock, *recorder, *reserve.Limiter) {
	clk := fakeclock.New(epoch)
	rec := newRecorder()
	l, err := reserve.New(b.pacer(), reserve.Options{Clock: clk, ClientTime: true, KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet, Metrics: rec})
	require.NoError(t, err)
	closeLimiter(t, l)
	return clk, rec, l
}

// secondSlot reserves key twice on l at 100/s, burst 1 (10 ms apart:
// MaxLateness 5 ms), and returns the second reservation, 10 ms after the
// first, and the limit.
func secondSlot(t *testing.T, l *reserve.Limiter, key string) (*reserve.Reservation, reserve.Limit) {
	t.Helper()
	lim := reserve.Limit{Rate: 100, Burst: 1}
	_, err := l.Reserve(context.Background(), key, lim)
	require.NoError(t, err)
	r, err := l.Reserve(context.Background(), key, lim)
	require.NoError(t, err)
	return r, lim
}

// passSoon advances clk by d 50 ms (of wall time) from now, once a Sleep
// begun meanwhile waits for a fresh slot d ahead on it: the slot passes.
func passSoon(clk *fakeclock.Clock, d time.Duration) {
	go func() {
		time.Sleep(50 * time.Millisecond)
		clk.Advance(d)
	}()
}

// testSleepLate: a sleeper that wakes more than MaxLateness after its slot
// takes a fresh slot instead of firing late (testSleepLateAgain: and
// again, up to MaxLateMoves times). A fake clock makes the
// lateness exact: the slot has passed by 10 ms when Sleep starts.
func testSleepLate(t *testing.T, b backend) {
	ctx := context.Background()
	clk, rec, l := lateLimiter(t, b)
	r, lim := secondSlot(t, l, "late")
	first := r.Time()
	clk.Advance(14 * time.Millisecond) // 4 ms late: within MaxLateness
	require.NoError(t, r.Sleep(ctx))
	assert.Equal(t, first, r.Time(), "4 ms late: the slot is used")

	r2, err := l.Reserve(ctx, "late", lim) // at +20 ms
	require.NoError(t, err)
	second := r2.Time()
	clk.Advance(16 * time.Millisecond) // now +30: 10 ms late
	before := rec.snapshot().moved
	passSoon(clk, 10*time.Millisecond) // the fresh slot, at +30 ms
	require.NoError(t, r2.Sleep(ctx))
	assert.True(t, r2.Time().After(second), "10 ms late: a fresh slot")
	assert.Equal(t, append(before, reserve.MovedLate), rec.snapshot().moved)
}

// testSleepAgainLate: a caller that slept to its slot and then waited on
// something else before its call (pacehttp's Transport and package worker:
// the seats' last check, which may wait for seats again) asks
// hook.LateForSlot, and sleeps again when it is later than MaxLateness
// after the slot: Sleep then takes a fresh slot, as for a sleeper that
// woke that late. Before, the call went on the old slot, late.
func testSleepAgainLate(t *testing.T, b backend) {
	ctx := context.Background()
	clk, rec, l := lateLimiter(t, b)
	r, _ := secondSlot(t, l, "again")
	slot := r.Time()
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, r.Sleep(ctx))
	require.Equal(t, slot, r.Time(), "on time: the slot is used")
	clk.Advance(4 * time.Millisecond)
	assert.False(t, hook.LateForSlot(r), "4 ms after the slot: within MaxLateness")
	clk.Advance(6 * time.Millisecond) // 10 ms after the slot
	require.True(t, hook.LateForSlot(r), "10 ms after the slot: past MaxLateness")
	before := rec.snapshot().moved
	passSoon(clk, 10*time.Millisecond) // the fresh slot, at +30 ms
	require.NoError(t, r.Sleep(ctx))
	assert.True(t, r.Time().After(slot), "a fresh slot")
	assert.Equal(t, append(before, reserve.MovedLate), rec.snapshot().moved)
}

// testSleepLateAgain: a sleeper late again on its fresh slot moves again,
// up to reserve.MaxLateMoves times in all; the last fresh slot is used
// however late (a machine that cannot wake in time that often would
// otherwise never fire, and spend a slot on each try). Before, it moved
// once and then fired late on the fresh slot, together with callers on
// time: the combination runner's provider saw calls over the limit on
// arrival (seeds 4, 10, 13 and 17 of 30: sleepers moved once, then held
// hundreds of ms past their fresh slots by a pause check on a frozen or
// slow Redis), and package worker's task, late again after a wait for
// seats, fired late.
func testSleepLateAgain(t *testing.T, b backend) {
	ctx := context.Background()
	clk, rec, l := lateLimiter(t, b)
	r, _ := secondSlot(t, l, "lateagain")
	clk.Advance(10 * time.Millisecond)
	require.NoError(t, r.Sleep(ctx))
	before := rec.snapshot().moved
	var want []string
	for i := range reserve.MaxLateMoves {
		slot := r.Time()
		clk.Advance(10 * time.Millisecond) // 10 ms after the slot: past MaxLateness (5 ms)
		require.True(t, hook.LateForSlot(r), "late %d time(s) after %d move(s): it moves", i+1, i)
		passSoon(clk, 10*time.Millisecond) // the fresh slot, 10 ms ahead, passes
		require.NoError(t, r.Sleep(ctx))
		assert.True(t, r.Time().After(slot), "move %d: a fresh slot", i+1)
		want = append(want, reserve.MovedLate)
		assert.Equal(t, append(slices.Clone(before), want...), rec.snapshot().moved)
	}
	clk.Advance(time.Second)
	assert.False(t, hook.LateForSlot(r), "moved %d times for lateness: its slot is used", reserve.MaxLateMoves)
	slot := r.Time()
	require.NoError(t, r.Sleep(ctx))
	assert.Equal(t, slot, r.Time(), "no move past MaxLateMoves")
	assert.Equal(t, append(slices.Clone(before), want...), rec.snapshot().moved)
}

// testSleepLateWindow: a sleeper that wakes too late for its slot gives
// the slot's window units back before it takes a fresh one: it never fired
// on it, so the provider counted nothing. Before, the fresh slot was
// charged a second unit; on a window of N=1 it was the next window's, a
// day away, and otelpacer's TestWaitRefusedSpan, whose first Wait on a
// daily window of 1 woke 5 ms late beside a CPU hog, slept on for good.
// The window then holds that one call, and no other.
func testSleepLateWindow(t *testing.T, b backend) {
	ctx := context.Background()
	clk, rec, l := lateLimiter(t, b)
	daily := reserve.Policy{
		{Name: "daily", Unit: "requests", Window: reserve.Window{N: 1, Length: 24 * time.Hour, Origin: epoch}},
		{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 100, Burst: 1}}, // MaxLateness 5 ms
	}
	req := reserve.Request{Key: "daily", Policy: daily, Cost: reserve.Cost{"requests": 1}}
	r, err := l.ReserveN(ctx, req)
	require.NoError(t, err)
	require.Equal(t, epoch, r.Time())
	clk.Advance(10 * time.Millisecond) // 10 ms late
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	require.NoError(t, r.Sleep(sctx), "the late sleeper's fresh slot is in the window its own slot gave back")
	assert.Equal(t, epoch.Add(10*time.Millisecond), r.Time(), "a fresh slot at once")
	assert.Equal(t, []string{reserve.MovedLate}, rec.snapshot().moved)

	// The window holds one call: the next is a day away.
	_, err = l.TryReserveN(ctx, req, time.Hour)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "the window holds the moved call")
	assert.Equal(t, "daily", tooLong.Band)
	// (The scripts place a window's origin on a whole µs.)
	assert.InDelta(t, epoch.Add(24*time.Hour).Sub(clk.Now()), tooLong.Wait, float64(time.Microsecond), "the next window's first instant")

	// A slot a pause comes to cover gives its units back too: the fresh
	// slot, after the pause, is in the same window. (On the system clock:
	// the sleeper polls for a resume until the pause's end.)
	rec = newRecorder()
	l, err = reserve.New(b.pacer(), reserve.Options{KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet, Metrics: rec})
	require.NoError(t, err)
	closeLimiter(t, l)
	req.Key = "paused"
	req.Policy[0].Window = reserve.Window{N: 2, Length: 24 * time.Hour, Origin: time.Now()}
	_, err = l.ReserveN(ctx, req)
	require.NoError(t, err)
	r, err = l.ReserveN(ctx, req) // the window's last unit, 10 ms away
	require.NoError(t, err)
	// The pause ends 100 ms after Redis runs it, so no earlier than 100 ms
	// after this: taken before the call, not after it returns (on a loaded
	// machine the reply can come late, and the end read after it was later
	// than the pause's: a CI run beside a CPU hog failed here).
	end := time.Now().Add(100 * time.Millisecond)
	require.NoError(t, l.Pause(ctx, req.Key, 100*time.Millisecond))
	require.NoError(t, r.Sleep(sctx), "the paused-over slot's unit is the fresh slot's")
	assert.False(t, time.Now().Before(end), "Sleep returned inside the pause")
	assert.Contains(t, rec.snapshot().moved, reserve.MovedPause)
	_, err = l.TryReserveN(ctx, req, time.Hour)
	require.ErrorAs(t, err, &tooLong, "the window holds the two calls")
	assert.Equal(t, "daily", tooLong.Band)
}

// TestOwnPauseAfterItEnds: a sleeper whose pause check comes after its own
// Limiter's pause has ended, with Redis unreadable (a CLIENT PAUSE, a
// stall), does not fire on a slot the pause covered. Seed 4 of the
// combination runner, beside a CPU hog, found a hot-key call fired on its
// slot 0.3 ms inside its own process's pause of 297 ms: the check, blocked
// by CLIENT PAUSE until after the pause's end, dropped the pause as over,
// and the reservation had already used its one late move. A fake clock
// makes it exact; MaxLateness -1 stands for the used late move.
func TestOwnPauseAfterItEnds(t *testing.T) {
	// Mostly waiting, on a server of its own: beside the other parallel
	// tests (the package's time in CI).
	t.Parallel()
	ctx := context.Background()
	s := redistest.NewProcess(t)
	clk := fakeclock.New(epoch)
	l, err := reserve.New(s.Client, reserve.Options{Clock: clk, ClientTime: true, KeyPrefix: redistest.Prefix(t),
		MaxLateness: -1, CallTimeout: time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 1, Burst: 1}
	_, err = l.Reserve(ctx, "k", lim)
	require.NoError(t, err)
	r, err := l.Reserve(ctx, "k", lim) // 1 s away
	require.NoError(t, err)
	slot := r.Time()
	require.NoError(t, l.Pause(ctx, "k", 1500*time.Millisecond)) // covers the slot
	end := clk.Now().Add(1500 * time.Millisecond)
	s.Stop(t)                    // the check cannot read Redis
	clk.Advance(2 * time.Second) // and comes after the pause's end
	if err := r.Sleep(ctx); err == nil && r.Time().Before(end) {
		t.Errorf("Sleep returned nil on slot %v, inside this Limiter's pause (until %v)", r.Time().Sub(epoch), end.Sub(epoch))
	} else {
		t.Logf("Sleep: %v; slot %v (was %v), the pause until %v", err, r.Time().Sub(epoch), slot.Sub(epoch), end.Sub(epoch))
	}
}

// TestStalledProcessLosesOnlyItsStall: a process whose sleepers all wake
// late by the same stall (the clock jumps 5.5 ms at once, as when the
// process is left off the CPU) loses the slots that passed more than
// MaxLateness before it woke, and no others: those sleepers take fresh
// slots, each after every slot granted before it (after another process's
// queue: a mover never fires together with callers that are on time), and
// the rest fire on their own slots, in order. No rule can keep the lost
// slots (docs/design.md, "A stalled process"); this one loses no more.
// The clock is a fake one: the lateness is exact however slow the machine.
func TestStalledProcessLosesOnlyItsStall(t *testing.T) {
	s := redistest.New(t)
	ctx := t.Context()
	clk := fakeclock.New(epoch)
	prefix := redistest.Prefix(t)
	rec := newRecorder()
	newL := func(m reserve.Metrics) *reserve.Limiter {
		l, err := reserve.New(s.NewClient(t), reserve.Options{Clock: clk, ClientTime: true, KeyPrefix: prefix, FailClosed: true,
			CallTimeout: 10 * time.Second, Logger: quiet, Metrics: m, LeaseSpan: -1})
		require.NoError(t, err)
		closeLimiter(t, l)
		return l
	}
	stalled, other := newL(rec), newL(nil)
	lim := reserve.Limit{Rate: 1000, Burst: 1} // 1 ms apart: MaxLateness 1 ms
	var rs []*reserve.Reservation
	for range 10 { // slots at +0 ... +9 ms
		r, err := stalled.Reserve(ctx, "k", lim)
		require.NoError(t, err)
		rs = append(rs, r)
	}
	var others []time.Time
	for range 5 { // the other process's queue: +10 ... +14 ms
		r, err := other.Reserve(ctx, "k", lim)
		require.NoError(t, err)
		others = append(others, r.Time())
	}
	var slots []time.Time
	for i, r := range rs {
		require.Equal(t, epoch.Add(time.Duration(i)*time.Millisecond), r.Time(), "slot %d", i)
		slots = append(slots, r.Time())
	}
	clk.Advance(5500 * time.Microsecond) // the stall: +5.5 ms at once
	before := len(rec.snapshot().moved)
	var last time.Time // the latest slot a sleeper fired on
	for i, r := range rs {
		require.NoError(t, r.Sleep(ctx), "sleeper %d", i)
		late := epoch.Add(5500 * time.Microsecond).Sub(slots[i])
		if late > time.Millisecond {
			assert.True(t, r.Time().After(others[len(others)-1]), "sleeper %d, %v late: a fresh slot %v after the queue granted before (last %v)",
				i, late, r.Time().Sub(epoch), others[len(others)-1].Sub(epoch))
			assert.True(t, r.Time().After(last), "sleeper %d: the movers' fresh slots in order", i)
		} else {
			assert.Equal(t, slots[i], r.Time(), "sleeper %d, %v late: its own slot", i, late)
		}
		last = r.Time()
	}
	moved := rec.snapshot().moved[before:]
	assert.Equal(t, []string{reserve.MovedLate, reserve.MovedLate, reserve.MovedLate, reserve.MovedLate, reserve.MovedLate}, moved,
		"moved: the sleepers whose slots passed more than MaxLateness before the stall ended (+0 ... +4 ms)")
}

// TestLostKeyReadKeepsHorizon: a sleeper's pause check that reads a key
// Redis lost (restarted empty, flushed) must not make its Limiter forget
// the slots Redis granted it ahead: its next call on the key still tells
// Redis their horizon (the lost key's floor), so that Redis grants nothing
// before the slots its other sleepers hold. Before, the read replaced the
// key's seen state, horizon included, and the next call took a slot among
// theirs: with the key absent, and with a state another Limiter wrote
// since (numbered from 1 again).
func TestLostKeyReadKeepsHorizon(t *testing.T) {
	for _, other := range []bool{false, true} {
		t.Run(map[bool]string{false: "absent", true: "rewritten"}[other], func(t *testing.T) {
			s := redistest.New(t)
			ctx := t.Context()
			opts := reserve.Options{KeyPrefix: redistest.Prefix(t), FailClosed: true,
				CallTimeout: 10 * time.Second, Logger: quiet, LeaseSpan: -1, HeartbeatInterval: time.Hour}
			l, err := reserve.New(s.Client, opts)
			require.NoError(t, err)
			closeLimiter(t, l)
			lim := reserve.Limit{Rate: 10, Burst: 1} // 100 ms apart
			var rs []*reserve.Reservation
			for range 5 { // slots at +0, +100, ..., +400 ms
				r, err := l.Reserve(ctx, "k", lim)
				require.NoError(t, err)
				rs = append(rs, r)
			}
			require.NoError(t, s.Client.FlushAll(ctx).Err()) // Redis lost the key
			if other {
				// Another Limiter reserves on the key Redis lost: a state
				// numbered 1, which knows nothing of l's slots.
				o, err := reserve.New(s.Client, opts)
				require.NoError(t, err)
				closeLimiter(t, o)
				_, err = o.Reserve(ctx, "k", lim)
				require.NoError(t, err)
			}
			// The second sleeper's pause check reads the key.
			require.NoError(t, rs[1].Sleep(ctx))
			r, err := l.Reserve(ctx, "k", lim)
			require.NoError(t, err)
			// On the server's clock: the local times place the slots by the
			// clock estimate of their replies, which a loaded machine's
			// round trips shift by milliseconds (CI beside a CPU hog: 97.3 ms).
			last, ok := reserve.ServerSlot(rs[len(rs)-1])
			require.True(t, ok)
			slot, ok := reserve.ServerSlot(r)
			require.True(t, ok)
			assert.GreaterOrEqual(t, slot-last, int64(99*time.Millisecond),
				"a slot %v after the last slot this Limiter's sleepers hold, want 100 ms after it at least", time.Duration(slot-last))
		})
	}
}

// TestLostKeySleepersMove: sleepers whose slots Redis granted from a state
// it has lost since (restarted empty, flushed), and from which another
// Limiter has reserved since, take fresh slots: the new state knows
// nothing of theirs, and the other's slots fall among them (a process
// stopped across a Redis restart empty resumes with such sleepers).
// Sleepers whose state Redis kept keep their slots.
func TestLostKeySleepersMove(t *testing.T) {
	for _, lost := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "lost"}[lost], func(t *testing.T) {
			s := redistest.New(t)
			ctx := t.Context()
			rec := newRecorder()
			opts := reserve.Options{KeyPrefix: redistest.Prefix(t), FailClosed: true,
				CallTimeout: 10 * time.Second, Logger: quiet, LeaseSpan: -1, HeartbeatInterval: time.Hour}
			withRec := opts
			withRec.Metrics = rec
			// Sleepers that wake late keep their slots: the moves counted are
			// the lost state's only (a loaded machine's CI woke two of the
			// kept case's sleepers over the default 50 ms late, and they
			// moved for it).
			withRec.MaxLateness = -1
			l, err := reserve.New(s.Client, withRec)
			require.NoError(t, err)
			closeLimiter(t, l)
			o, err := reserve.New(s.Client, opts)
			require.NoError(t, err)
			closeLimiter(t, o)
			lim := reserve.Limit{Rate: 10, Burst: 1} // 100 ms apart
			slot := func(r *reserve.Reservation) int64 {
				t.Helper()
				ns, ok := reserve.ServerSlot(r)
				require.True(t, ok)
				return ns
			}
			var rs []*reserve.Reservation
			var granted []int64
			for range 5 { // slots at +0, +100, ..., +400 ms
				r, err := l.Reserve(ctx, "k", lim)
				require.NoError(t, err)
				rs, granted = append(rs, r), append(granted, slot(r))
			}
			if lost {
				require.NoError(t, s.Client.FlushAll(ctx).Err()) // Redis lost the key
			}
			var all []int64
			for range 3 { // lost: a state numbered from 1, at +0, +100, +200 ms again
				r, err := o.Reserve(ctx, "k", lim)
				require.NoError(t, err)
				all = append(all, slot(r))
			}
			errs := make([]error, len(rs))
			var wg sync.WaitGroup
			for i, r := range rs {
				wg.Go(func() { errs[i] = r.Sleep(ctx) })
			}
			wg.Wait()
			moved := 0
			for i, r := range rs {
				require.NoError(t, errs[i])
				all = append(all, slot(r))
				if slot(r) != granted[i] {
					moved++
				}
			}
			slices.Sort(all)
			for i := 1; i < len(all); i++ {
				assert.GreaterOrEqual(t, all[i]-all[i-1], int64(100*time.Millisecond)-int64(time.Microsecond),
					"slots %d and %d of both Limiters' %d only %v apart, want 100 ms", i-1, i, len(all), time.Duration(all[i]-all[i-1]))
			}
			if lost {
				assert.Equal(t, len(rs), moved, "sleepers that took a fresh slot")
				assert.Equal(t, slices.Repeat([]string{reserve.MovedLost}, len(rs)), rec.snapshot().moved)
			} else {
				assert.Zero(t, moved, "sleepers that took a fresh slot")
				assert.Empty(t, rec.snapshot().moved)
			}
		})
	}
}

// checkSignal is a recorder that closes checked at a sleeper's first pause
// check (a Redis call "check").
type checkSignal struct {
	*recorder
	once    sync.Once
	checked chan struct{}
}

func (c *checkSignal) RedisCall(op string, d time.Duration, err error) {
	c.recorder.RedisCall(op, d, err)
	if op == "check" {
		c.once.Do(func() { close(c.checked) })
	}
}

// TestSleepOwnPauseAfterCheck: a pause this Limiter makes after its
// sleeper's pause check, covering the sleeper's slot (another caller's 429
// meanwhile), is honoured: the sleeper does not fire into it. Its Limiter
// knows of the pause at once, so its last look before the slot is its own
// record, no read. Before, the sleeper slept from the check to its slot
// without looking again and fired 13.8 ms into its own process's pause (the
// combination runner's seed 21 beside a CPU hog, whose round trips made the
// check lead over 10 ms). A long PreciseWake here makes the time from the
// check to the slot 2 s; the slot is 4 s away, so that the check reads the
// key (the reservation's reply, seen just before, would stand for it).
func TestSleepOwnPauseAfterCheck(t *testing.T) {
	t.Parallel() // it sleeps 10 s
	s := redistest.New(t)
	ctx := context.Background()
	m := &checkSignal{recorder: newRecorder(), checked: make(chan struct{})}
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), PreciseWake: time.Second, Logger: quiet, Metrics: m})
	require.NoError(t, err)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 0.25, Burst: 1}
	_, err = l.Reserve(ctx, "own", lim)
	require.NoError(t, err)
	r, err := l.Reserve(ctx, "own", lim) // 4 s away
	require.NoError(t, err)
	slot := r.Time()
	slept := make(chan error, 1)
	go func() { slept <- r.Sleep(ctx) }()
	select {
	case <-m.checked: // the sleeper's check: its last read before the slot
	case err := <-slept:
		t.Fatalf("Sleep returned (%v) with no pause check", err)
	case <-time.After(time.Minute):
		t.Fatal("no pause check in a minute")
	}
	end := time.Now().Add(4 * time.Second)
	require.NoError(t, l.Pause(ctx, "own", 4*time.Second))
	require.True(t, slot.Before(end), "the pause covers the slot")
	require.NoError(t, <-slept)
	assert.False(t, time.Now().Before(end), "Sleep returned inside its own Limiter's pause")
	assert.True(t, r.Time().After(slot), "the reservation kept its slot inside the pause")
	assert.Contains(t, m.snapshot().moved, reserve.MovedPause)
}
