package lua_test

import (
	"context"
	"fmt"
	"slices"
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
	// B silent while C calls on the key (a silence no call broke is no
	// holder's: TestSeatsKeyServerFrozen), until C's last call is 20 ms
	// after B's. C's view holds B, so C drops nothing.
	for {
		if _, err := sc.Run(ctx, srv.Client, keys, "renew", "C 2 3 r", "0 1 2", "1", "2", "60000", "10 0 0 60000", "").Result(); err != nil {
			t.Fatal(err)
		}
		b, c := lastCall(t, srv, keys[0], "1"), lastCall(t, srv, keys[0], "2")
		if c-b > 20 {
			break
		}
		time.Sleep(time.Millisecond)
	}
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
		t.Fatalf("an acquire in time, on a view without B, silent over 20 ms: %v seats used, want A's 1 (B gone)", v)
	}
}

// lastCall returns the last call the seats hash records for holder, Unix
// ms.
func lastCall(t *testing.T, srv *redistest.Server, seats, holder string) int64 {
	t.Helper()
	v, err := srv.Client.HGet(context.Background(), seats, "r:"+holder).Result()
	if err != nil {
		t.Fatal(err)
	}
	var id string
	var ms, c int64
	if _, err := fmt.Sscanf(v, "%s %d %d", &id, &ms, &c); err != nil {
		t.Fatalf("holder %s's record %q: %v", holder, v, err)
	}
	return ms
}

// seatsRig returns a real Redis, seats.lua and its KEYS (seats, queue, an
// operator's N, tickets) under a prefix of t's own.
func seatsRig(t testing.TB) (*redistest.Server, *redis.Script, []string) {
	p := redistest.Prefix(t)
	return redistest.New(t), redis.NewScript(lua.Seats),
		[]string{p + "{s}:seats", p + "{s}:seatq", p + "{s}:seatn", p + "{s}:seatt"}
}

// seatsCaller returns a call of seats.lua on keys for member ("<limiter
// id> <holder> <n> <mode>") of a fleet that lists ranks 0 to 2 and holds
// held, on a band of N: its operation and the operation's arguments.
func seatsCaller(t testing.TB, srv *redistest.Server, sc *redis.Script, keys []string, N string) func(member, held string, more ...any) []any {
	return func(member, held string, more ...any) []any {
		t.Helper()
		args := append([]any{more[0], member, "0 1 2", held, N, "60000", "1000 6000 0 60000"}, more[1:]...)
		v, err := sc.Run(context.Background(), srv.Client, keys, args...).Result()
		if err != nil {
			t.Fatalf("%s %v: %v", member, more, err)
		}
		return v.([]any)
	}
}

// TestSeatsNoHandOffToHeld: a seat freed goes to the first call waiting
// whose holder the fleet does not hold. A held member (silent, or pacing
// locally) keeps its share of N counted, and its calls waiting on Redis
// wait until it is back (its renew keeps their places). Before, the freed
// seats went to it in the queue's order: a killed process, held while the
// fleet was unsure of it after a Redis fault, took every seat of a key's
// band as they freed, 5 of 5 for 8 s (combination runner, seed 18).
func TestSeatsNoHandOffToHeld(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	// N = 4 over 3 members: rank 0's share is 2, ranks 1 and 2 have 1.
	run := seatsCaller(t, srv, sc, keys, "4")
	for _, tk := range []string{"A.1", "A.2", "A.3", "A.4"} {
		if v := run("A 0 3 r", "", "acquire", tk, "1", "1"); v[0] != int64(1) {
			t.Fatalf("acquire %s: %v, want granted", tk, v)
		}
	}
	if v := run("B 1 3 r", "", "acquire", "B.1", "1", "1"); v[0] != int64(0) || v[1] != int64(1) {
		t.Fatalf("B.1: %v, want queued first", v)
	}
	if v := run("C 2 3 r", "", "acquire", "C.1", "1", "1"); v[0] != int64(0) || v[1] != int64(2) {
		t.Fatalf("C.1: %v, want queued second", v)
	}
	// B is held now: its share (1) stays counted, so the first seat freed
	// goes to nobody (3 held by A and B's 1), the second to C, not B.
	if v := run("A 0 3 r", "1", "release", "A.1"); len(v) != 2 {
		t.Fatalf("the first release: %v, want no seat handed (B's share counted)", v)
	}
	v := run("A 0 3 r", "1", "release", "A.2")
	if len(v) != 3 || v[2] != "C.1" {
		t.Fatalf("the second release: %v, want C.1 handed its seat, not B.1 (held)", v)
	}
	// B back (not held): the next seat freed is its.
	if v := run("A 0 3 r", "", "release", "A.3"); len(v) != 3 || v[2] != "B.1" {
		t.Fatalf("a release with B back: %v, want B.1 handed its seat", v)
	}
	// Held B's call at the queue's head does not hold back a call that
	// fits: A.4, B.1, C.1 and A.5 hold the 4; B.2 waits; A.5 ends.
	if v := run("A 0 3 r", "", "acquire", "A.5", "1", "1"); v[0] != int64(1) {
		t.Fatalf("acquire A.5: %v, want granted", v)
	}
	if v := run("B 1 3 r", "", "acquire", "B.2", "1", "1"); v[0] != int64(0) || v[1] != int64(1) {
		t.Fatalf("B.2: %v, want queued first", v)
	}
	if v := run("A 0 3 r", "1", "release", "A.5"); len(v) != 2 {
		t.Fatalf("A.5's release with B held: %v, want no seat handed", v)
	}
	if v := run("C 2 3 r", "1", "acquire", "C.2", "1", "0"); v[0] != int64(1) {
		t.Fatalf("C.2 with a seat free and only held B's call waiting: %v, want granted", v)
	}
}

// seatsBehindB sets up a band of N = 6 over 3 members (each share 2) on
// keys: A (rank 0) holds all six seats in two calls, A.1 and A.2; B (rank
// 1) queues nB calls of one seat, B.1 to B.nB, and C (rank 2) nC behind
// them, C.1 to C.nC. It returns seatsCaller's call on that band.
func seatsBehindB(t *testing.T, srv *redistest.Server, sc *redis.Script, keys []string, nB, nC int) func(member, held string, more ...any) []any {
	t.Helper()
	run := seatsCaller(t, srv, sc, keys, "6")
	for _, tk := range []string{"A.1", "A.2"} {
		if v := run("A 0 3 r", "", "acquire", tk, "3", "1"); v[0] != int64(1) {
			t.Fatalf("acquire %s: %v, want granted", tk, v)
		}
	}
	for i := 1; i <= nB; i++ {
		if v := run("B 1 3 r", "", "acquire", fmt.Sprintf("B.%d", i), "1", "1"); v[0] != int64(0) || v[1] != int64(i) {
			t.Fatalf("B.%d: %v, want queued at place %d", i, v, i)
		}
	}
	for i := 1; i <= nC; i++ {
		if v := run("C 2 3 r", "", "acquire", fmt.Sprintf("C.%d", i), "1", "1"); v[0] != int64(0) || v[1] != int64(nB+i) {
			t.Fatalf("C.%d: %v, want queued at place %d", i, v, nB+i)
		}
	}
	return run
}

// TestSeatsPassHeldOnce: a call that passes over a held member's calls
// waiting records where they end ("f": its view, the place), and the calls
// after it in the same view (mode, the caller's holder if it is held
// itself, held ranks) start there: a record dropped among the calls passed
// over is not met again (before, every call read them all: about 1.1 µs of
// Redis each). Callers of every member the fleet does not hold share the
// view (before, each member's rank made one of its own, and two members'
// calls took turns at reading them all: BenchmarkSeatsPastHeld). A call in
// another view (the member back) reads them, and meets it.
func TestSeatsPassHeldOnce(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	const nB = 50
	run := seatsBehindB(t, srv, sc, keys, nB, 5)
	f := func() string {
		t.Helper()
		v, err := srv.Client.HGet(ctx, keys[0], "f").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// B held: its share (2) counts. A.1 ends: 3 + 2 used, one seat goes
	// to C.1, past B's calls, and the call records where they end.
	if v := run("A 0 3 r", "1", "release", "A.1"); !slices.Equal(v[2:], []any{"C.1"}) {
		t.Fatalf("A.1's release with B held: %v, want C.1 handed its seat", v)
	}
	if got, want := f(), fmt.Sprintf("r - 1 %d", nB); got != want {
		t.Fatalf("f: %q, want %q (B's calls, places 1 to %d, passed over by a caller not held)", got, want, nB)
	}
	// One of B's calls loses its record. A.2 ends in the same view: three
	// seats go to C.2 to C.4, and B's calls are not read again: the dead
	// call stays in the queue.
	if err := srv.Client.HDel(ctx, keys[3], "w:B.7").Err(); err != nil {
		t.Fatal(err)
	}
	if v := run("A 0 3 r", "1", "release", "A.2"); !slices.Equal(v[2:], []any{"C.2", "C.3", "C.4"}) {
		t.Fatalf("A.2's release with B held: %v, want C.2 to C.4 handed seats", v)
	}
	if err := srv.Client.ZScore(ctx, keys[1], "B.7").Err(); err != nil {
		t.Fatalf("B.7 after a call in the view that passed over it: %v, want still in the queue (not met)", err)
	}
	// C, another member the fleet does not hold, is in the same view: it
	// starts after B's calls too.
	if v := run("C 2 3 r", "1", "release", "C.1"); !slices.Equal(v[2:], []any{"C.5"}) {
		t.Fatalf("C.1's release with B held: %v, want C.5 handed its seat", v)
	}
	if err := srv.Client.ZScore(ctx, keys[1], "B.7").Err(); err != nil {
		t.Fatalf("B.7 after C's call in the same view: %v, want still in the queue (not met)", err)
	}
	if got, want := f(), fmt.Sprintf("r - 1 %d", nB); got != want {
		t.Fatalf("f after C's call: %q, want %q", got, want)
	}
	// B back (no one held): C.2 ends, and B's first calls with records get
	// the three seats free, in order; then one each as C's end, and the
	// dead call is met and dropped on the way to B.8.
	if v := run("C 2 3 r", "", "release", "C.2"); !slices.Equal(v[2:], []any{"B.1", "B.2", "B.3"}) {
		t.Fatalf("C.2's release with B back: %v, want B.1 to B.3 handed seats", v)
	}
	for _, rel := range []struct{ member, tk, want string }{
		{"C 2 3 r", "C.3", "B.4"}, {"C 2 3 r", "C.4", "B.5"}, {"C 2 3 r", "C.5", "B.6"}, {"B 1 3 r", "B.1", "B.8"},
	} {
		if v := run(rel.member, "", "release", rel.tk); !slices.Equal(v[2:], []any{rel.want}) {
			t.Fatalf("%s's release with B back: %v, want %s handed its seat", rel.tk, v, rel.want)
		}
	}
	if err := srv.Client.ZScore(ctx, keys[1], "B.7").Err(); err != redis.Nil {
		t.Fatalf("B.7 once B is back: %v, want dropped when met", err)
	}
}

// TestSeatsHeldCallerHasItsOwnView: a caller the fleet holds itself (back
// on Redis before the others heard) is not passed over its own calls
// waiting: its view names its holder, so it does not start where the
// callers not held start, after them.
func TestSeatsHeldCallerHasItsOwnView(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	const nB, nC = 50, 5
	run := seatsBehindB(t, srv, sc, keys, nB, nC)
	// B and C held (shares 2 each): A's two calls end, 4 of 6 counted,
	// and A's release passes over every call waiting, B's and C's.
	run("A 0 3 r", "1 2", "release", "A.1")
	if v := run("A 0 3 r", "1 2", "release", "A.2"); len(v) != 2 {
		t.Fatalf("A.2's release with B and C held: %v, want no seat handed", v)
	}
	if got, _ := srv.Client.HGet(ctx, keys[0], "f").Result(); got != fmt.Sprintf("r - 1 2 %d", nB+nC) {
		t.Fatalf("f: %q, want every call passed over in the view of a caller not held", got)
	}
	// C calls, held itself: its own calls are not passed over for it, so
	// a new call of its, refused rather than queued, waits behind C.1.
	if v := run("C 2 3 r", "1 2", "acquire", "C.new", "1", "0"); v[0] != int64(0) {
		t.Fatalf("C.new, C held with C.1 first in its view: %v, want refused (behind C.1)", v)
	}
	if got, _ := srv.Client.HGet(ctx, keys[0], "f").Result(); got != fmt.Sprintf("r 2 1 2 %d", nB) {
		t.Fatalf("f after C's call: %q, want C's view, past B's calls to place %d", got, nB)
	}
}

// TestSeatsHandOffPastManyHeld: calls of a held member waiting in front
// keep their places, however many (the queue is read in pages); seats
// freed together go, in one hand-off, to the calls behind them in order;
// tickets without a record leave the queue wherever they are met; once
// the member is back, its calls are next, in order.
func TestSeatsHandOffPastManyHeld(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	const nB = 100
	run := seatsBehindB(t, srv, sc, keys, nB, 3)
	// Three of B's calls lose their records, in the first page and in
	// later ones: they count for nothing, and leave the queue when met.
	dead := []string{"B.2", "B.40", "B.77"}
	for _, tk := range dead {
		if err := srv.Client.HDel(ctx, keys[3], "w:"+tk).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// B held: its share (2) counts. A.1 ends: 3 + 2 used, one seat goes to
	// C.1, past B's 100 calls.
	if v := run("A 0 3 r", "1", "release", "A.1"); len(v) != 3 || v[2] != "C.1" {
		t.Fatalf("A.1's release with B held: %v, want C.1 handed its seat", v)
	}
	// A.2 ends: 0 + 2 + 1 used, three free, two calls not held wait: both
	// go, in order, in one hand-off.
	if v := run("A 0 3 r", "1", "release", "A.2"); len(v) != 4 || v[2] != "C.2" || v[3] != "C.3" {
		t.Fatalf("A.2's release with B held: %v, want C.2 and C.3 handed their seats", v)
	}
	queue, err := srv.Client.ZRange(ctx, keys[1], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := 1; i <= nB; i++ {
		if tk := fmt.Sprintf("B.%d", i); !slices.Contains(dead, tk) {
			want = append(want, tk)
		}
	}
	if !slices.Equal(queue, want) {
		t.Fatalf("the queue: %v, want B's calls with records, in order (%d)", queue, len(want))
	}
	// B back: C.1 ends, four seats are free (C holds 2), to B's first four
	// calls; then one each as C.2 and C.3 end.
	if v := run("C 2 3 r", "", "release", "C.1"); !slices.Equal(v[2:], []any{want[0], want[1], want[2], want[3]}) {
		t.Fatalf("C.1's release with B back: %v, want %v handed seats", v, want[:4])
	}
	for i, tk := range []string{"C.2", "C.3"} {
		if v := run("C 2 3 r", "", "release", tk); len(v) != 3 || v[2] != want[4+i] {
			t.Fatalf("%s's release: %v, want %s handed its seat", tk, v, want[4+i])
		}
	}
}

// BenchmarkSeatsPastHeld is what a call on an in-flight band costs Redis
// while a held member's calls wait in front: N = 6 over 3 members, B
// (rank 1) held with 2 seats and 1,000 calls waiting, and A (rank 0) and C (rank 2),
// neither held, each in turn taking a seat and giving it back (an
// acquire, then a release). It reports Redis's own time per script call
// (INFO commandstats, EVALSHA and EVAL) beside the round trip.
//
//	go test -run '^$' -bench BenchmarkSeatsPastHeld -benchtime 2000x ./lua/
func BenchmarkSeatsPastHeld(b *testing.B) {
	srv, sc, keys := seatsRig(b)
	ctx := context.Background()
	call := seatsCaller(b, srv, sc, keys, "6")
	// C holds 4 seats and B 2 while B queues 1,000 calls more; then C
	// gives its 4 back with B held (B's 2 still counted).
	const nB = 1000
	call("C 2 3 r", "", "acquire", "C.hold", "4", "1")
	for i := 1; i <= nB+2; i++ {
		if v := call("B 1 3 r", "", "acquire", fmt.Sprintf("B.%d", i), "1", "1"); v[0] != int64(min(max(3-i, 0), 1)) {
			b.Fatalf("B.%d: %v, want granted for the first 2, then queued", i, v)
		}
	}
	call("C 2 3 r", "1", "release", "C.hold")
	members := []string{"A 0 3 r", "C 2 3 r"}
	scripts := func() (calls, usec int64) {
		st, err := redistest.CommandStats(ctx, srv.Client)
		if err != nil {
			b.Fatal(err)
		}
		return st["evalsha"].Calls + st["eval"].Calls, st["evalsha"].Usec + st["eval"].Usec
	}
	c0, u0 := scripts()
	b.ResetTimer()
	for i := range b.N {
		m := members[i%2]
		tk := fmt.Sprintf("%c.%d", m[0], i)
		if v := call(m, "1", "acquire", tk, "1", "0"); v[0] != int64(1) {
			b.Fatalf("acquire %s: %v, want granted", tk, v)
		}
		call(m, "1", "release", tk)
	}
	b.StopTimer()
	c1, u1 := scripts()
	b.ReportMetric(float64(u1-u0)/float64(max(c1-c0, 1)), "redis-µs/call")
}

// TestSeatsKeyServerFrozen: a holder is not taken for gone for a silence
// no call on the key broke. On a Redis Cluster the key's master can freeze
// while the fleet's records, on another master, answer: the holders'
// heartbeats go on (the fleet neither forgets nor holds them), but their
// renews on the key fail. At the thaw, a call on a view that lists every
// holder found a live holder silent for over 3.5 I and dropped its seats
// while its calls were open (the combination runner's Cluster seed 27: a
// freeze of 3 s, 4 calls open on N = 3). A gap between calls on the key
// beyond I now counts as no holder's silence. A holder gone for good is
// still dropped once the key has been called for 3.5 I without it.
func TestSeatsKeyServerFrozen(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	// I = 20 ms: a holder neither held nor heard from is gone after 70 ms
	// of silence.
	run := func(member string, more ...any) []any {
		t.Helper()
		future := strconv.FormatInt(time.Now().Add(time.Minute).UnixMilli(), 10)
		args := append([]any{more[0], member, "0 1", "", "1", "60000", "20 0 0 60000 " + future}, more[1:]...)
		v, err := sc.Run(ctx, srv.Client, keys, args...).Result()
		if err != nil {
			t.Fatalf("%s %v: %v", member, more, err)
		}
		return v.([]any)
	}
	if v := run("B 1 2 r", "acquire", "B.1", "1", "0"); v[0] != int64(1) {
		t.Fatalf("B's acquire on a free band: %v", v)
	}
	time.Sleep(200 * time.Millisecond) // the key's server frozen: no call reaches it
	if v := run("A 0 2 r", "acquire", "A.1", "1", "1"); v[0] != int64(0) || v[1] != int64(1) {
		t.Fatalf("A's acquire after the key's server stalled 200 ms (10 I): %v, want queued first (B, live, holds the seat)", v)
	}
	// B's process really is gone (its rank taken again by a member that
	// does not use the key): A's renews of its waiting call drop it once
	// they have reached the key for 3.5 I without B.
	for i := 0; ; i++ {
		v := run("A 0 2 r", "renew", "A.1:1:w")
		if slices.Contains(v[2:], any("A.1")) {
			break
		}
		if i == 1000 {
			t.Fatalf("A's ticket not handed B's seat after %d renews: %v", i, v)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestSeatsRankChangeKeepsOpenCalls: a member forgotten by the fleet and
// ranked again (another holder) renews its open call under its new place:
// the call's seats move there, and do not go when the old place does
// (1.5 I after its last call, once the fleet no longer lists the old rank).
// Before, the renew left them under the old place, the key dropped it, and
// the seat went to another member while the call was still open: 2 calls
// open on N = 1.
func TestSeatsRankChangeKeepsOpenCalls(t *testing.T) {
	srv, sc, keys := seatsRig(t)
	ctx := context.Background()
	// I = 100 ms (the old place is gone 150 ms after its last call, the
	// new one 350 ms after its renew, below); N = 1.
	run := func(member, taken string, more ...any) []any {
		t.Helper()
		args := append([]any{more[0], member, taken, "", "1", "60000", "100 0 0 60000"}, more[1:]...)
		v, err := sc.Run(ctx, srv.Client, keys, args...).Result()
		if err != nil {
			t.Fatalf("%s %v: %v", member, more, err)
		}
		return v.([]any)
	}
	if v := run("L 0 2 r", "0 1", "acquire", "L.1", "1", "0"); v[0] != int64(1) {
		t.Fatalf("L's acquire on a free band: %v", v)
	}
	// L is ranked 2 now (the fleet lists 1 and 2), its call still open. It
	// renews it at its next heartbeat, under its new place; M's calls go on
	// (each within I: the key answers) until the old place is 200 ms silent,
	// past its 150 ms, while L's new one is not gone.
	old := lastCall(t, srv, keys[0], "0")
	run("L 2 3 r", "1 2", "renew", "L.1:1:h")
	for {
		run("M 1 3 r", "1 2", "renew", "")
		if lastCall(t, srv, keys[0], "1")-old > 200 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if v := run("M 1 3 r", "1 2", "acquire", "M.1", "1", "1"); v[0] != int64(0) {
		t.Fatalf("M's acquire while L's call is open (L renewed it under its new rank): %v, want queued (N = 1)", v)
	}
	if v := run("L 2 3 r", "1 2", "read"); v[1] != int64(1) {
		t.Fatalf("seats used: %v, want L's 1", v)
	}
	if v := run("L 2 3 r", "1 2", "release", "L.1"); v[0] != int64(1) || !slices.Contains(v[2:], any("M.1")) {
		t.Fatalf("L's release: %v, want its seat given back and handed to M.1", v)
	}
}
