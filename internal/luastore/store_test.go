package luastore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// testClock is a clock a test moves by hand.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func newTestClock(t time.Time) *testClock { return &testClock{now: t} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 123456789, time.UTC)

func TestGoAPI(t *testing.T) {
	clock := newTestClock(t0)
	s := New(clock.Now)
	s.Set("a", "1", 0)
	s.Set("b", "2", 1500*time.Microsecond)
	s.Set("c", "3", time.Second)
	s.Set("x:1", "4", -time.Second)
	ctx := context.Background()
	if err := s.Eval(ctx, "redis.call('HSET', KEYS[1], 'f', 'v')", []string{"h"}).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("HSET: %v", err)
	}
	for _, c := range []struct {
		key  string
		val  string
		ok   bool
		pttl time.Duration
	}{
		{"a", "1", true, -1},
		{"b", "2", true, 2 * time.Millisecond}, // rounded up to a whole ms
		{"c", "3", true, time.Second},
		{"x:1", "4", true, -1}, // a ttl of zero or less: none
		{"h", "", false, -1},   // a hash: no string
		{"nope", "", false, -2},
	} {
		if v, ok := s.Get(c.key); v != c.val || ok != c.ok {
			t.Errorf("Get(%q) = %q, %v, want %q, %v", c.key, v, ok, c.val, c.ok)
		}
		if got := s.PTTL(c.key); got != c.pttl {
			t.Errorf("PTTL(%q) = %v, want %v", c.key, got, c.pttl)
		}
	}
	if got, want := s.Keys(""), []string{"a", "b", "c", "h", "x:1"}; !slices.Equal(got, want) {
		t.Errorf("Keys(%q) = %q, want %q", "", got, want)
	}
	if got, want := s.Keys("x:"), []string{"x:1"}; !slices.Equal(got, want) {
		t.Errorf("Keys(%q) = %q, want %q", "x:", got, want)
	}
	clock.Add(2 * time.Millisecond)
	if _, ok := s.Get("b"); !ok {
		t.Errorf("Get(%q) at its expiry: gone, want there (Redis expires a key after its time)", "b")
	}
	clock.Add(time.Millisecond)
	if _, ok := s.Get("b"); ok {
		t.Errorf("Get(%q) after its expiry: there, want gone", "b")
	}
	if got := s.Del("a", "b", "nope", "a"); got != 1 {
		t.Errorf("Del(a, b, nope, a) = %d, want 1", got)
	}
	clock.Add(time.Second)
	if got, want := s.Keys(""), []string{"h", "x:1"}; !slices.Equal(got, want) {
		t.Errorf("Keys(%q) = %q, want %q", "", got, want)
	}
	if got := s.Sweep(); got != 1 { // c; b was dropped when read
		t.Errorf("Sweep() = %d, want 1", got)
	}
	if got := s.Sweep(); got != 0 {
		t.Errorf("Sweep() again = %d, want 0", got)
	}
}

// TestEmpty: Empty follows every way a key comes and goes: a method, a
// script, an expiry swept.
func TestEmpty(t *testing.T) {
	clock := newTestClock(t0)
	s := New(clock.Now)
	ctx := context.Background()
	check := func(step string, want bool) {
		t.Helper()
		if got := s.Empty(); got != want {
			t.Errorf("after %s: Empty() = %v, want %v", step, got, want)
		}
	}
	check("New", true)
	s.Set("a", "1", time.Second)
	check("Set", false)
	s.Del("a")
	check("Del", true)
	if err := s.Eval(ctx, "redis.call('SET', KEYS[1], 'v', 'PX', 1000)", []string{"k"}).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("SET: %v", err)
	}
	check("a script's SET", false)
	if err := s.Eval(ctx, "redis.call('DEL', KEYS[1])", []string{"k"}).Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("DEL: %v", err)
	}
	check("a script's DEL", true)
	s.Set("b", "2", time.Second)
	clock.Add(2 * time.Second)
	check("an expiry not swept yet", false)
	s.Sweep()
	check("Sweep", true)
}

func TestExpiryInScripts(t *testing.T) {
	clock := newTestClock(t0)
	s := New(clock.Now)
	ctx := context.Background()
	run := func(src string, keys ...string) any {
		t.Helper()
		v, err := s.Eval(ctx, src, keys).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("Eval(%q): %v", src, err)
		}
		return v
	}
	run("redis.call('SET', KEYS[1], 'v', 'PX', 1000) redis.call('SET', KEYS[2], 'w', 'PX', 1000)", "k", "j")
	clock.Add(400 * time.Millisecond)
	if got := run("return redis.call('PTTL', KEYS[1])", "k"); got != int64(600) {
		t.Errorf("PTTL after 400ms = %v, want 600", got)
	}
	run("redis.call('SET', KEYS[1], 'v2', 'KEEPTTL') redis.call('PEXPIRE', KEYS[2], 5000)", "k", "j")
	clock.Add(600 * time.Millisecond)
	if got := run("return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}", "k"); fmt.Sprint(got) != "[v2 0]" {
		t.Errorf("at the expiry: %v, want [v2 0]", got)
	}
	clock.Add(time.Millisecond)
	if got := run("return {redis.call('EXISTS', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('TYPE', KEYS[1]).ok}", "k"); fmt.Sprint(got) != "[0 -2 none]" {
		t.Errorf("after the expiry: %v, want [0 -2 none]", got)
	}
	if got := s.PTTL("j"); got != 4399*time.Millisecond {
		t.Errorf("PTTL(j) = %v, want 4.399s", got)
	}
	// An expired key is absent to a write too: SET NX takes it.
	clock.Add(5 * time.Second)
	if got := run("return redis.call('SET', KEYS[1], 'new', 'NX')", "j"); got != "OK" {
		t.Errorf("SET NX on an expired key = %v, want OK", got)
	}
}

// TestServerTime runs the project's scripts with server time (ARGV[2]
// without a client clock): TIME is the Store's clock, and the script
// computes exactly what it does with that time passed as a client clock
// ("t<now_us>:<now_ns> "): the same reply, byte for byte, and the same
// state. One plain request on a Limit is fast.lua's (server time only),
// the client clock's core.lua's: they agree too.
func TestServerTime(t *testing.T) {
	clock := newTestClock(t0)
	server := New(clock.Now)
	client := New(clock.Now)
	ctx := context.Background()
	keys := []string{"{k}", "{k}:limit", "{k}:shadow"}
	if got := fmt.Sprint(server.Eval(ctx, "return redis.call('TIME')", nil).Val()); got != fmt.Sprintf("[%d %d]", t0.Unix(), t0.Nanosecond()/1000) {
		t.Errorf("TIME = %s, want the clock's", got)
	}
	reserve := redis.NewScript(lua.Reserve)
	for i, tc := range []struct {
		policy string
		reqs   []any
	}{
		{"L" + doubles(10, 5), nil}, // the common call: fast.lua on server time
		{"L" + doubles(10, 5), []any{"", doubles(-1, 1, -1, 1)}},
		{"1 permits 1 permits 1 b 10 5", nil},
		{"2 requests tokens 2 rps 1 b 100 10 day 2 w 100000 86400000000:0", []any{"", doubles(-1, 1, 1, -1, 1, 1)}},
	} {
		for _, env := range []string{"1", "f2 1"} {
			for step := range 5 {
				clock.Add(time.Duration(step*37) * time.Millisecond)
				now := clock.Now()
				args := append([]any{"", env, tc.policy}, tc.reqs...)
				sv, err := reserve.Run(ctx, server, keys, args...).Text()
				if err != nil {
					t.Fatalf("policy %d %q step %d: server time: %v", i, env, step, err)
				}
				args[1] = fmt.Sprintf("t%d:0 %s", now.UnixMicro(), env)
				cv, err := reserve.Run(ctx, client, keys, args...).Text()
				if err != nil {
					t.Fatalf("policy %d %q step %d: client clock: %v", i, env, step, err)
				}
				d, ok := decodeReserve(sv)
				if !ok || d.nowUS != now.UnixMicro() || d.nowNS != 0 {
					t.Errorf("policy %d %q step %d: now = %+v, want %d 0", i, env, step, d, now.UnixMicro())
				}
				if sv != cv {
					t.Errorf("policy %d %q step %d: server time %q, client clock %q", i, env, step, sv, cv)
				}
				a, _ := server.Get(keys[0])
				b, _ := client.Get(keys[0])
				if a != b {
					t.Errorf("policy %d %q step %d: states %q and %q", i, env, step, a, b)
				}
			}
			server.Del(keys...)
			client.Del(keys...)
		}
	}
	// The history's at_ms is the clock's too.
	admin := redis.NewScript(lua.Admin)
	entry, err := admin.Run(ctx, server, []string{"{k}", "{k}:limit", "{k}:shadow", "{k}:history", "{k}:weights"}, "set", "enforce 1 permits permits b 10 5", "me", "why", "5").Text()
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`"at_ms":%d`, clock.Now().UnixMilli()); !strings.Contains(entry, want) {
		t.Errorf("admin entry %s, want %s", entry, want)
	}
}

func TestScripter(t *testing.T) {
	ctx := context.Background()
	s := New(nil)
	src := "return redis.call('INCR', KEYS[1])"
	sc := redis.NewScript(src)

	err := s.EvalSha(ctx, sc.Hash(), []string{"n"}).Err()
	var rerr redis.Error
	if !errors.As(err, &rerr) || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		t.Fatalf("EvalSha of an unknown script: %v, want a redis.Error NOSCRIPT ...", err)
	}
	if got, err := sc.Run(ctx, s, []string{"n"}).Int64(); got != 1 || err != nil {
		t.Fatalf("Run = %d, %v, want 1 (EVAL after NOSCRIPT)", got, err)
	}
	if got, err := s.EvalSha(ctx, strings.ToUpper(sc.Hash()), []string{"n"}).Int64(); got != 2 || err != nil {
		t.Errorf("EvalSha(upper case) = %d, %v, want 2", got, err)
	}
	if got, err := s.ScriptExists(ctx, sc.Hash(), "0000000000000000000000000000000000000000").Result(); err != nil || !slices.Equal(got, []bool{true, false}) {
		t.Errorf("ScriptExists = %v, %v, want [true false]", got, err)
	}
	other := "return ARGV"
	sha, err := s.ScriptLoad(ctx, other).Result()
	if err != nil || sha != redis.NewScript(other).Hash() {
		t.Fatalf("ScriptLoad = %q, %v, want %q", sha, err, redis.NewScript(other).Hash())
	}
	if got, err := s.EvalShaRO(ctx, sha, nil, []string{"a", "b"}).StringSlice(); err != nil || !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("EvalShaRO(ARGV []string) = %q, %v, want [a b] (a lone slice is spread, as go-redis does)", got, err)
	}
	if err := s.EvalRO(ctx, src, []string{"n"}).Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR Write commands are not allowed from read-only scripts.") {
		t.Errorf("EvalRO of a write: %v, want ERR Write commands are not allowed ...", err)
	}
	if err := s.ScriptLoad(ctx, "return (").Err(); err == nil || !strings.HasPrefix(err.Error(), "ERR Error compiling script") {
		t.Errorf("ScriptLoad of a bad script: %v, want ERR Error compiling script ...", err)
	}
	if err := s.Eval(ctx, "return 1", nil, struct{}{}).Err(); err == nil || errors.As(err, &rerr) {
		t.Errorf("Eval with an argument go-redis cannot send: %v, want an error that is not Redis's", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Eval(cctx, "return 1", nil).Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Eval with a canceled context: %v, want context.Canceled", err)
	}
	err = s.Eval(ctx, "return redis.error_reply('PACER_ARG bad')", nil).Err()
	if !errors.As(err, &rerr) || err.Error() != "PACER_ARG bad" {
		t.Errorf("Eval of an error reply: %v (%T), want the redis.Error PACER_ARG bad", err, err)
	}
	if err := s.Eval(ctx, "return nil", nil).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("Eval of nil: %v, want redis.Nil", err)
	}
	cmd := s.EvalSha(ctx, sha, []string{"k"}, "a", 1)
	if got, want := fmt.Sprint(cmd.Args()), fmt.Sprintf("[evalsha %s 1 k a 1]", sha); got != want {
		t.Errorf("EvalSha's Args() = %s, want %s (as go-redis builds them)", got, want)
	}
}

// TestIsolation: a script that fails, overflows its stack or tries to
// leave a global behind changes nothing for the next one.
func TestIsolation(t *testing.T) {
	ctx := context.Background()
	s := New(nil)
	for _, src := range []string{
		"x = 1",
		"_G.x = 1",
		"rawset(_G, 'x', 1)",
		"setmetatable(_G, nil)",
		"string.len = nil",
		"math.huge = 1",
		"getmetatable('').__index.len = nil",
		"local function f() return f() + 1 end return f()",
		"local t = {} t.x = t return t",
		"redis.call('SET', KEYS[1], 'v') error('after a write')",
		"return (function() error({err = 'X y'}) end)()",
	} {
		s.Eval(ctx, src, []string{"w"})
		got, err := s.Eval(ctx, "return {tostring(pcall(function() return x end)), string.len('abc'), tostring(math.huge), type(_G), redis.call('GET', KEYS[1])}", []string{"w"}).Result()
		if err != nil {
			t.Fatalf("after %q: %v", src, err)
		}
		if fmt.Sprint(got) != "[false 3 inf table v]" && fmt.Sprint(got) != "[false 3 inf table <nil>]" {
			t.Errorf("after %q: %v, want [false 3 inf table ...]", src, got)
		}
	}
	if v, _ := s.Get("w"); v != "v" {
		t.Errorf("a script that wrote and then failed: Get = %q, want %q (Redis keeps the writes)", v, "v")
	}
}

// TestConcurrent runs scripts and Go-side calls from many goroutines: a
// script is atomic (its read and write of one counter never interleave
// with another's).
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := New(nil)
	incr := redis.NewScript("local n = tonumber(redis.call('GET', KEYS[1]) or '0') redis.call('SET', KEYS[1], n + 1) return n + 1")
	const workers, each = 8, 200
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if err := incr.Run(ctx, s, []string{"n"}).Err(); err != nil {
					t.Errorf("Run: %v", err)
					return
				}
				s.Set(fmt.Sprintf("w%d", w), strconv.Itoa(i), time.Minute)
				s.Get("n")
				s.Keys("w")
				s.Sweep()
			}
		})
	}
	wg.Wait()
	if got, _ := s.Get("n"); got != strconv.Itoa(workers*each) {
		t.Errorf("counter = %s, want %d", got, workers*each)
	}
}
