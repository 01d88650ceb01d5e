package lua_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// TestSeatsRenewKeepsLaterTickets: a renew drops the caller's tickets it
// does not list, but for those numbered after the last it had made when
// it listed them (ARGV[9]): a call that took its seats while the renew was
// on its way is open, and its seats count. TestSeatsAcquireDuringRenew
// (reserve) saw 5 or 6 calls open on an in-flight band of 4 before.
func TestSeatsRenewKeepsLaterTickets(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	run := func(op string, more ...any) any {
		t.Helper()
		args := append([]any{op, "L 0 1 r", "*", "", "4", "60000", "1000 6000 0 60000"}, more...)
		v, err := sc.Run(ctx, srv.Client, keys, args...).Result()
		if err != nil {
			t.Fatalf("%s %v: %v", op, more, err)
		}
		return v
	}
	used := func() int64 {
		t.Helper()
		v := run("read").([]any)
		return v[1].(int64)
	}
	run("acquire", "L.a", "1", "0") // listed by the renew below
	run("acquire", "L.b", "1", "0") // made after its list: b > a
	run("renew", "L.a:1:h", "a")
	if u := used(); u != 2 {
		t.Fatalf("after a renew listing up to L.a: %d seats used, want 2 (L.b was made after the list)", u)
	}
	run("renew", "L.a:1:h", "b")
	if u := used(); u != 1 {
		t.Fatalf("after a renew listing up to L.b without it: %d seats used, want 1 (L.b ended)", u)
	}
	run("acquire", "L.c", "1", "0")
	run("renew", "L.a:1:h") // no number: every ticket not listed goes
	if u := used(); u != 1 {
		t.Fatalf("after a renew with no number: %d seats used, want 1", u)
	}
	if _, err := sc.Run(ctx, srv.Client, keys, "renew", "L 0 1 r", "*", "", "4", "60000", "1000 6000 0 60000", "L.a:1:h", "!").Result(); err == nil {
		t.Fatal("a renew with a bad number: no error")
	}
}

// TestSeatsStaleCallDropsNothing: a call Redis runs after the deadline in
// ARGV[7] (it stalled) is refused with PACER_STALE and changes nothing. Its
// view of the fleet is from before the stall: run, it would drop a live
// holder the view does not list, silent across the stall (combination
// runner, seed 128: a freeze of 1.53 s, a holder dropped at the thaw, 7
// calls open on N = 6). Without a deadline, the same call drops it.
func TestSeatsStaleCallDropsNothing(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	// I = 10 ms: a holder the caller's view does not list is gone after
	// 15 ms of silence.
	run := func(member, taken, times string, more ...any) (any, error) {
		args := append([]any{more[0], member, taken, "", "2", "60000", times}, more[1:]...)
		return sc.Run(ctx, srv.Client, keys, args...).Result()
	}
	if _, err := run("B 1 2 r", "0 1", "10 0 0 60000", "acquire", "B.1", "1", "0"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	past := strconv.FormatInt(time.Now().Add(-time.Second).UnixMilli(), 10)
	if _, err := run("A 0 1 r", "0", "10 0 0 60000 "+past, "acquire", "A.1", "1", "0"); code(err) != "PACER_STALE" {
		t.Fatalf("an acquire run after its deadline: %v, want PACER_STALE", err)
	}
	// Read as B: a read never drops its caller's own place (a read by A
	// would leave B out once silent 3.5 I, which a loaded machine reaches).
	read := func() []any {
		t.Helper()
		v, err := run("B 1 2 r", "*", "10 0 0 60000", "read")
		if err != nil {
			t.Fatal(err)
		}
		return v.([]any)
	}
	if v := read(); v[1] != int64(1) {
		t.Fatalf("after the stale acquire: %v seats used, want B's 1", v)
	}
	future := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
	if _, err := run("A 0 1 r", "0", "10 0 0 60000 "+future, "acquire", "A.1", "1", "0"); err != nil {
		t.Fatal(err)
	}
	if v := read(); v[1] != int64(1) {
		t.Fatalf("an acquire in time, on a view without B, silent 30 ms: %v seats used, want A's 1 (B gone)", v)
	}
}

// seatsRig returns a real Redis, seats.lua and its KEYS (seats, queue, an
// operator's N, tickets) under a prefix of t's own.
func seatsRig(t *testing.T) (*redistest.Server, *redis.Script, []string) {
	p := redistest.Prefix(t)
	return redistest.New(t), redis.NewScript(lua.Seats),
		[]string{p + "{s}:seats", p + "{s}:seatq", p + "{s}:seatn", p + "{s}:seatt"}
}
