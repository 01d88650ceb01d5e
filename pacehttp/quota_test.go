package pacehttp

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// The fleet's count of a provider's calls (lua/quota.lua), driven through
// the script's operations. The script reads the time itself; the windows
// and refills here are long (minutes) so that a bound on a wait holds
// however slow each call is on a loaded machine.

func quotaTransport(t *testing.T) (*Transport, *redistest.Server) {
	t.Helper()
	s := redistest.New(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	tr, err := New(l, Options{Limit: reserve.Limit{Rate: 1000, Burst: 1}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return tr, s
}

// takeOnce runs one take: the wait, the take's number, whether a count is
// known.
func takeOnce(t *testing.T, tr *Transport, key string) (time.Duration, int64, bool) {
	t.Helper()
	res, err := tr.runQuota(context.Background(), key, "take", quotaKeep.Milliseconds(), quotaLapse.Milliseconds())
	if err != nil {
		t.Fatal(err)
	}
	r := res.([]any)
	return time.Duration(r[0].(int64)) * time.Millisecond, r[1].(int64), r[2].(int64) == 1
}

// takeAll takes from key's count until a take gets nothing, and returns
// how many got a number.
func takeAll(t *testing.T, tr *Transport, key string) int {
	t.Helper()
	got := 0
	for {
		if _, id, _ := takeOnce(t, tr, key); id == 0 {
			return got
		}
		got++
	}
}

// window answers take id with left calls until a fixed window's end reset
// away, exact to the millisecond.
func window(tr *Transport, key string, id, left int64, reset time.Duration) {
	tr.answer(context.Background(), key, id, Quota{Remaining: left, Reset: reset + time.Microsecond, Source: "x-ratelimit-remaining"}, time.Millisecond, false)
}

func TestQuotaSpread(t *testing.T) {
	tr, _ := quotaTransport(t)
	if _, id, known := takeOnce(t, tr, "k"); id != 0 || known {
		t.Fatalf("a key with no count: take gave number %d, known %v; want nothing taken", id, known)
	}
	window(tr, "k", 0, 20, 200*time.Second)
	var last time.Duration
	for i := range 20 {
		wait, id, known := takeOnce(t, tr, "k")
		if id != int64(i+1) || !known {
			t.Fatalf("take %d: number %d, known %v", i+1, id, known)
		}
		if i < 2 && wait != 0 {
			t.Fatalf("take %d waits %v: the first tenth goes at once", i+1, wait)
		}
		if wait >= 200*time.Second {
			t.Fatalf("take %d waits %v: after the window's end", i+1, wait)
		}
		if i >= 2 && wait <= last {
			t.Fatalf("take %d waits %v, after one that waits %v: not in order", i+1, wait, last)
		}
		last = wait
	}
	if last < 150*time.Second {
		t.Fatalf("the last of 20 calls over 200 s waits %v: not spread", last)
	}
	wait, id, _ := takeOnce(t, tr, "k")
	if id != 0 || wait <= last {
		t.Fatalf("the 21st take: number %d, wait %v; want none taken, and a wait for the window's end", id, wait)
	}
}

// TestQuotaInFlight: the calls an answer leaves are those it says, less the
// calls taken and not answered; a later answer can lower that, never raise
// it.
func TestQuotaInFlight(t *testing.T) {
	tr, _ := quotaTransport(t)
	window(tr, "k", 0, 100, time.Minute)
	for range 5 {
		takeOnce(t, tr, "k")
	}
	// Take 3 is answered: 10 left, and takes 1, 2, 4, 5 in flight.
	window(tr, "k", 3, 10, time.Minute)
	got := takeAll(t, tr, "k")
	if got != 6 {
		t.Fatalf("%d calls taken after an answer of 10 left with 4 in flight, want 6", got)
	}
	// An answer that says more are left (read late, or a refusal not
	// counted) does not raise the count.
	window(tr, "k", 1, 50, time.Minute)
	if _, id, _ := takeOnce(t, tr, "k"); id != 0 {
		t.Fatalf("a take after an answer that would raise the count got number %d", id)
	}
}

// TestQuotaProbe: after the window's end one call goes alone; its answer
// opens the next window; a probe not sent lets the next take probe; an
// answer with no count after the end stops the counting.
func TestQuotaProbe(t *testing.T) {
	tr, _ := quotaTransport(t)
	window(tr, "k", 0, 0, 30*time.Millisecond)
	wait, id, _ := takeOnce(t, tr, "k")
	if id != 0 || wait <= 0 {
		t.Fatalf("a take with nothing left: number %d, wait %v; want a wait for the end", id, wait)
	}
	time.Sleep(wait + time.Millisecond)
	_, probe, _ := takeOnce(t, tr, "k")
	if probe == 0 {
		t.Fatal("no probe after the window's end")
	}
	if _, id, _ := takeOnce(t, tr, "k"); id != 0 {
		t.Fatalf("a second call took number %d while the probe is out", id)
	}
	tr.drop(context.Background(), "k", probe)
	_, probe, _ = takeOnce(t, tr, "k")
	if probe == 0 {
		t.Fatal("no new probe after the first was dropped")
	}
	window(tr, "k", probe, 3, time.Minute)
	for i := range 3 {
		if _, id, _ := takeOnce(t, tr, "k"); id == 0 {
			t.Fatalf("take %d of the 3 the new window has: none", i+1)
		}
	}
	if _, id, _ := takeOnce(t, tr, "k"); id != 0 {
		t.Fatalf("a 4th take in a window of 3 got number %d", id)
	}

	// The provider stops counting.
	window(tr, "j", 0, 0, 30*time.Millisecond)
	time.Sleep(40 * time.Millisecond)
	_, probe, _ = takeOnce(t, tr, "j")
	tr.answer(context.Background(), "j", probe, Quota{}, time.Millisecond, false)
	if _, id, known := takeOnce(t, tr, "j"); id != 0 || known {
		t.Fatalf("after an answer with no count: take number %d, known %v; want no count", id, known)
	}
}

// TestQuotaRefillAsWindow: a quota OpenAI's or Anthropic's headers report
// (Refill) is counted as a fixed window ending at its reset: with nothing
// left, the calls wait for the reset, not for one call's refill (reset /
// limit), which would send a fixed window's calls into refusals until its
// end.
func TestQuotaRefillAsWindow(t *testing.T) {
	tr, _ := quotaTransport(t)
	tr.answer(context.Background(), "k", 0, Quota{Remaining: 0, Limit: 6, Reset: 599*time.Second + 500*time.Millisecond, Refill: true, Source: "x-ratelimit-remaining-requests"}, time.Millisecond, false)
	wait, id, known := takeOnce(t, tr, "k")
	if id != 0 || !known || wait < 590*time.Second || wait > 600*time.Second {
		t.Fatalf("a take with nothing left until a reset in 599.5 s: number %d, known %v, wait %v; want none taken and a wait for the reset", id, known, wait)
	}
	// Calls left are spread to the reset, as a window's are.
	tr.answer(context.Background(), "j", 0, Quota{Remaining: 3, Limit: 6, Reset: 300*time.Second + 500*time.Millisecond, Refill: true, Source: "x-ratelimit-remaining-requests"}, time.Millisecond, false)
	if got := takeAll(t, tr, "j"); got != 3 {
		t.Fatalf("%d calls taken of the 3 left, want 3", got)
	}
}

func TestQuotaBadInput(t *testing.T) {
	tr, s := quotaTransport(t)
	ctx := context.Background()
	if err := s.Client.Set(ctx, tr.quotaKeys("str")[0], "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.runQuota(ctx, "str", "take", 1000, 1000); !errors.Is(err, reserve.ErrWrongType) {
		t.Fatalf("take on a key holding a string: %v, want ErrWrongType", err)
	}
	if err := s.Client.Set(ctx, tr.quotaKeys("fl")[1], "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.runQuota(ctx, "fl", "take", 1000, 1000); !errors.Is(err, reserve.ErrWrongType) {
		t.Fatalf("take with its flight key holding a string: %v, want ErrWrongType", err)
	}
	for _, args := range [][]any{
		{"nope", 1000},
		{"take", 0, 1000},
		{"take", 1000, -1},
		{"answer", 1000, 1, "x", 1, 0, "0", 1, 1},
		{"answer", 1000, 1, 5, -1, 0, "0", 1, 1},
		{"answer", 1000, 1, 5, 1, 0, "2", 1, 1},
		{"drop", 1000, 1.5},
	} {
		if _, err := tr.runQuota(ctx, "k", args...); err == nil {
			t.Errorf("quota %v: no error", args)
		}
	}
	if n, err := s.Client.Exists(ctx, tr.quotaKeys("k")...).Result(); err != nil || n != 0 {
		t.Fatalf("bad arguments wrote %d keys (%v)", n, err)
	}
}

// TestQuotaKnownLimit: with the window's quota known, the calls left are the
// quota less the window's takes and less what others spent (the calls the
// provider counted beyond the takes), whatever order the answers come in;
// a take not sent is given back.
func TestQuotaKnownLimit(t *testing.T) {
	tr, _ := quotaTransport(t)
	answer := func(id, left int64) {
		tr.answer(context.Background(), "k", id, Quota{Remaining: left, Limit: 10, Reset: time.Minute + time.Microsecond, Source: "x-ratelimit-remaining"}, time.Millisecond, false)
	}
	// The window opens on an answer of a call made before any take: 9 left
	// of 10.
	answer(0, 9)
	var ids []int64
	for range 4 {
		_, id, _ := takeOnce(t, tr, "k")
		ids = append(ids, id)
	}
	// Answers in any order: take 4 counted first (5 left: ours 1 to 4 and
	// the first call), take 1 late (8 left). Neither lowers or raises what
	// is left: 10 - 1 - 4 = 5.
	answer(ids[3], 5)
	answer(ids[0], 8)
	tr.drop(context.Background(), "k", ids[1]) // never sent: given back
	got := takeAll(t, tr, "k")
	if got != 6 {
		t.Fatalf("%d calls taken, want 6 (10 less the first call and 3 takes sent)", got)
	}
	// Others spend: on a new key, the first call (9 left), two takes, and
	// an answer that says 4 are left: the provider counted 6, ours are 3,
	// others spent 3. 10 - 3 - 3 = 4 are left.
	answerF := func(id, left int64) {
		tr.answer(context.Background(), "f", id, Quota{Remaining: left, Limit: 10, Reset: time.Minute + time.Microsecond, Source: "x-ratelimit-remaining"}, time.Millisecond, false)
	}
	answerF(0, 9)
	_, first, _ := takeOnce(t, tr, "f")
	takeOnce(t, tr, "f")
	answerF(first, 4)
	got = takeAll(t, tr, "f")
	if got != 4 {
		t.Fatalf("%d calls taken after others spent 3, want 4", got)
	}
}

// TestQuotaKnownLimitOldInFlight: with the quota known, the calls a new
// window leaves are the quota less its takes and what others spent, and
// less the takes of the window before still in flight: sent before the
// end the count knew, they may reach the provider in its new window (its
// end is known to a second at best), after the probe's answer counted.
// Before, they were in neither figure, and the combination runner's seed
// 45 (calls 50 ms on their way, 30/s on a window of 24 per 2 s) had 27
// calls in one of the provider's windows.
func TestQuotaKnownLimitOldInFlight(t *testing.T) {
	tr, _ := quotaTransport(t)
	answer := func(id, left int64, reset time.Duration) {
		tr.answer(context.Background(), "k", id, Quota{Remaining: left, Limit: 10, Reset: reset + time.Microsecond, Source: "x-ratelimit-remaining"}, time.Millisecond, false)
	}
	answer(0, 3, 30*time.Millisecond) // 3 left of 10, the window ending in 30 ms
	for i := range 3 {
		if _, id, _ := takeOnce(t, tr, "k"); id == 0 {
			t.Fatalf("take %d of the old window's 3: none", i+1)
		}
	}
	var probe int64
	for probe == 0 { // the old window's end: the probe goes
		wait, id, _ := takeOnce(t, tr, "k")
		probe = id
		time.Sleep(max(wait, time.Millisecond))
	}
	// The provider counted the probe alone: the old window's 3 calls are
	// still on their way.
	answer(probe, 9, time.Minute)
	if got := takeAll(t, tr, "k"); got != 6 {
		t.Fatalf("%d calls taken in the new window, want 6 (10 less the probe and the old window's 3 in flight)", got)
	}
}

// TestQuotaKnownLimitOldAnswered: a take of the window before, answered
// once the new window is open, may have been counted in it: it is charged
// to the new window when it leaves the calls in flight. Before, it left
// the takes in flight and was charged nowhere, since every later answer's
// count of what others spent, limit - left - takes, was masked by the
// window's own takes still on their way. In the combination runner on a
// Redis Cluster (seed 28), 8 calls of a window were sent at once just
// after its end, and the next window of 24 had 28 calls.
func TestQuotaKnownLimitOldAnswered(t *testing.T) {
	tr, _ := quotaTransport(t)
	answer := func(id, left int64, reset time.Duration) {
		tr.answer(context.Background(), "k", id, Quota{Remaining: left, Limit: 10, Reset: reset + time.Microsecond, Source: "x-ratelimit-remaining"}, time.Millisecond, false)
	}
	// 3 left of 10, the window ending in 300 ms (time enough for the 3
	// takes on a loaded machine).
	answer(0, 3, 300*time.Millisecond)
	var old []int64
	for i := range 3 {
		_, id, _ := takeOnce(t, tr, "k")
		if id == 0 {
			t.Fatalf("take %d of the old window's 3: none", i+1)
		}
		old = append(old, id)
	}
	var probe int64
	for probe == 0 { // the old window's end: the probe goes
		wait, id, _ := takeOnce(t, tr, "k")
		probe = id
		time.Sleep(max(wait, time.Millisecond))
	}
	answer(probe, 9, time.Minute) // the probe counted alone
	var taken []int64
	for {
		_, id, _ := takeOnce(t, tr, "k")
		if id == 0 {
			break
		}
		taken = append(taken, id)
	}
	if len(taken) != 6 {
		t.Fatalf("%d calls taken in the new window, want 6 (10 less the probe and the old window's 3 in flight)", len(taken))
	}
	// The old window's 3 reach the provider in the new window, and are
	// answered: 8, 7, then 6 left. Then the first of the new window's 6:
	// 5 left (the probe, the old 3 and itself), 5 of ours on their way.
	for i, id := range old {
		answer(id, int64(8-i), time.Minute)
	}
	answer(taken[0], 5, time.Minute)
	if got := takeAll(t, tr, "k"); got != 0 {
		t.Fatalf("%d more calls taken; want 0: the probe, the old window's 3 and the 6 taken fill the 10", got)
	}
}

// TestQuotaLateAnswer: an answer read after its window ended (its call
// counted in that window, the script run late: Redis paused, a slow
// link) says nothing of the next window. Only the probe's answer, or a
// later one, opens it. Before, the late answer opened a window that ended
// its reset after the script ran, not after the provider wrote it: in the
// combination runner on a Redis Cluster (seed 28), an answer held 2.3 s by
// CLIENT PAUSE placed the window's end 0.3 s after the provider's, and
// the calls spread to it reached the provider in its next window.
func TestQuotaLateAnswer(t *testing.T) {
	tr, _ := quotaTransport(t)
	window(tr, "k", 0, 5, 300*time.Millisecond)
	wait, id, _ := takeOnce(t, tr, "k")
	if id == 0 || wait != 0 {
		t.Fatalf("a take of the 5 left: number %d, wait %v; want one at once", id, wait)
	}
	time.Sleep(350 * time.Millisecond) // the window is over
	// Its answer, written with 20 ms of the window left, is read now.
	window(tr, "k", id, 4, 20*time.Millisecond)
	if _, probe, _ := takeOnce(t, tr, "k"); probe == 0 {
		t.Fatal("no probe after the window's end")
	}
	if _, id, _ := takeOnce(t, tr, "k"); id != 0 {
		t.Fatalf("a second call took number %d while the probe is out: the late answer opened a window", id)
	}
}

// TestQuotaSpreadWithinEnd: a later answer that ends the window sooner
// pulls the spread back within the new end. Before, calls already spread
// past it kept the spread there, and every call after them was placed
// after the window's end, in the next window, at once.
func TestQuotaSpreadWithinEnd(t *testing.T) {
	tr, _ := quotaTransport(t)
	window(tr, "k", 0, 10, 10*time.Second)
	for range 5 { // spread to 0, 1, 2, 3 and 4 s
		takeOnce(t, tr, "k")
	}
	window(tr, "k", 0, 9, 2*time.Second) // the window ends in 2 s
	wait, id, _ := takeOnce(t, tr, "k")
	if id == 0 {
		t.Fatal("a take of the 4 left: none")
	}
	if wait > 2*time.Second {
		t.Fatalf("a take waits %v, past the window's end in 2 s", wait)
	}
}

// TestQuotaRelativeReset: a reset given as a delay (OpenAI's
// x-ratelimit-reset-requests, to the millisecond) counts from when the
// provider wrote it, within the call's round trip before the answer came
// back: the calls left are spread to the window's earliest end, a whole
// round trip before the answer's arrival plus the delay, while a call
// with nothing left still waits for the latest end (the probe goes once
// the window is over). Spread to the latest end, the last calls reached
// the provider in its next window, which the count did not charge them
// to, when the answer's way back was long: TestCountsDialects, openai at
// 0 ms under -race on a loaded machine, 2 refusals in its 4th window.
func TestQuotaRelativeReset(t *testing.T) {
	tr, _ := quotaTransport(t)
	q := Quota{Remaining: 3, Limit: 20, Reset: 100*time.Second + 500*time.Millisecond, Refill: true, Source: "x-ratelimit-remaining-requests"}
	spread := func(key string, relative bool) time.Duration {
		tr.answer(context.Background(), key, 0, q, 40*time.Second, relative)
		var last time.Duration
		for range 3 {
			w, id, _ := takeOnce(t, tr, key)
			if id == 0 {
				t.Fatalf("%s: a call of the 3 left not taken", key)
			}
			last = w
		}
		return last
	}
	// 3 calls spread over the 60.5 s to the earliest end: the last at
	// about 40 s (over 100.5 s: at 67 s).
	if last := spread("k", true); last > 61*time.Second || last < 30*time.Second {
		t.Fatalf("a delay of 100.5 s read after a round trip of 40 s: the last of 3 calls left waits %v, want within the 60.5 s to the earliest end", last)
	}
	if wait, id, _ := takeOnce(t, tr, "k"); id != 0 || wait < 95*time.Second {
		t.Fatalf("nothing left: number %d, wait %v; want a wait for the latest end, about 100.5 s", id, wait)
	}
	// A reset given as a time is where it says.
	if last := spread("j", false); last < 61*time.Second {
		t.Fatalf("a reset given as a time: the last of 3 calls left waits %v, want about 67 s", last)
	}
}
