package lua_test

import (
	"context"
	"testing"

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
	srv := redistest.New(t)
	ctx := context.Background()
	sc := redis.NewScript(lua.Seats)
	p := redistest.Prefix(t)
	keys := []string{p + "{s}:seats", p + "{s}:seatq", p + "{limiters}:events", p + "{s}:seatn", p + "{s}:seatt"}
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
