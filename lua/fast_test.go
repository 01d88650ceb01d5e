package lua

// The fast path's differential test: Reserve (fast.lua in front of core.lua
// and reserve.lua) against core.lua and reserve.lua alone, on the same
// random calls on two keys of one real Redis. The fast path promises to do
// exactly what the general code does where it answers (a Limit), and to
// leave every other call to it: every reply (or error) and every state
// written must be the same, byte for byte.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestFastPathSameAsCore(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.New(t).Client
	prefix := redistest.Prefix(t)
	fastScript, slowScript := redis.NewScript(Reserve), redis.NewScript(core+reserve)
	// PACER_RESERVE_BEFORE names a file holding another Reserve's text (a
	// previous fast.lua + core.lua + reserve.lua): the test then compares
	// against it, forgiving nothing, to check that a change to the scripts
	// writes the same bytes as before.
	forgive := negZero
	if f := os.Getenv("PACER_RESERVE_BEFORE"); f != "" {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		slowScript, forgive = redis.NewScript(string(text)), strings.NewReplacer()
		t.Logf("against %s", f)
	}
	pauseScript, adminScript := redis.NewScript(Pause), redis.NewScript(Admin)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PACER_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PACER_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("PACER_SEED=%d", seed)
	r := rand.New(rand.NewPCG(seed, 0x66617374))

	keys := func(side string) []string {
		k := prefix + "{" + side + "}"
		return []string{k, k + ":limit", k + ":shadow"}
	}
	fastKeys, slowKeys := keys("fast"), keys("slow")
	run := func(s *redis.Script, keys []string, args []any) string {
		v, err := s.Run(ctx, rdb, keys, args...).Result()
		if err != nil && err != redis.Nil {
			// Lua's own errors name the script's line and SHA1.
			return "error: " + scriptRef.ReplaceAllString(err.Error(), "")
		}
		return fmt.Sprintf("%#v", v)
	}
	state := func(keys []string) string {
		v, err := rdb.Get(ctx, keys[0]).Result()
		if err == redis.Nil {
			return "(absent)"
		}
		if err != nil {
			return "error: " + err.Error()
		}
		return v
	}
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }

	// The client's clock runs an hour behind the server's, and never
	// catches up within the test: the server's clock is never behind a
	// state written on the client's (core.lua's rule for a server clock
	// that steps back would tell the two calls apart).
	now := time.Now().UnixMicro() - 3600_000_000
	// The policy: a Limit (fast.lua's), or several bands of buckets and
	// windows on one to three units (the general code's, on both keys).
	rate, burst := "3", "2"
	units, bands := "permits", []string{"permits", "1", "b", rate, burst}
	format := "1"
	draw := func() {
		format = pick("1", "f1 1")
		rate = pick("0.5", "3", "7", "100", "12345.6", "1000000", "1e6", "0.001")
		burst = pick("1", "2", "3", "4", "10", "1000")
		if r.IntN(2) == 0 {
			units, bands = "permits", []string{"permits", "1", "b", rate, burst}
			return
		}
		units = pick("permits", "requests tokens", "requests tokens", "a b c")
		nunits := len(strings.Fields(units))
		bands = nil
		for i := range 1 + r.IntN(3) {
			name := pick("rps", "tps", "daily", "permits", "x%y") + strconv.Itoa(i)
			if r.IntN(8) == 0 {
				name = "permits"
			}
			unit := strconv.Itoa(1 + r.IntN(nunits))
			if r.IntN(2) == 0 {
				bands = append(bands, name, unit, "b", pick("0.5", "3", "100", "12345.6", "1e6"), pick("1", "2", "5", "1000", "6000"))
			} else {
				bands = append(bands, name, unit, "w", pick("1", "3", "10", "2.5", "1e12"), pick("1000000:0", "3000000:250000", "86400000000:0", "60000000:17"))
			}
		}
	}
	answered, failed := 0, 0
	draw()
	for step := range 4000 {
		// Now and then, the policy changes, or the key is paused, given a
		// stored limit (falls through), emptied or spoilt.
		spoilt := false
		switch r.IntN(40) {
		case 0, 5:
			draw()
		case 1:
			a := []any{strconv.FormatInt(now, 10), "0", pick("1", "f1 1"), "permits", "0", strconv.Itoa(1 + r.IntN(3_000_000))}
			if x, y := run(pauseScript, fastKeys[:2], a), run(pauseScript, slowKeys[:2], a); x != y {
				t.Fatalf("step %d: Pause %v: %s, and on the other key %s", step, a, x, y)
			}
		case 2, 6, 7, 8:
			op, v := "set", pick("enforce 1 permits permits b 0.5 3", "enforce 1 rps0 requests b 2 5", "shadow 1 tps1 tokens b 1000 6000")
			if step%4 != 0 {
				op, v = "unset", ""
			}
			for _, k := range [][]string{fastKeys, slowKeys} {
				ak := []string{k[0], k[1], k[2], k[0] + ":history", k[0] + ":weights"}
				adminScript.Run(ctx, rdb, ak, op, v, "test", "", "50", "") // an unset with nothing stored fails on both
			}
		case 3:
			rdb.Del(ctx, fastKeys[0], slowKeys[0])
		case 4:
			v := pick("garbage", "1 2 3", "17000000000000 1 1 0 x y", "1 1700000000000000 5 1 0.000 0 permits 1.000", "1700000000000000 5 1 0 5 5 extra")
			rdb.Set(ctx, fastKeys[0], v, 0)
			rdb.Set(ctx, slowKeys[0], v, 0)
			spoilt = true
		}
		now += int64(r.IntN(3)) * int64(r.IntN(700_000))
		nowNS := "0"
		if r.IntN(4) == 0 {
			nowNS = strconv.Itoa(r.IntN(1000))
		}
		m := 1 + r.IntN(3)
		if r.IntN(10) == 0 {
			m = []int{0, 4, 7}[r.IntN(3)]
		}
		args := []any{strconv.FormatInt(now, 10), nowNS, format, units, strconv.Itoa(len(bands) / 5)}
		for _, b := range bands {
			args = append(args, b)
		}
		args = append(args, pick("", "", "", "", "", "", "", "", "", "250000", "!250000", "!0", "!3000000", "!250000:3", "!1000:1000", "!7:0"), strconv.Itoa(m))
		if r.IntN(10) == 0 { // the other format, a format prefix, a share
			args[2] = pick("1", "f1 1", "f2 1", "3 1")
		}
		if r.IntN(8) == 0 { // a deadline to come (one passed: TestConformanceStale)
			args[2] = "d99999999999999 " + args[2].(string)
		}
		if r.IntN(30) == 0 { // malformed, or another shape: falls through
			i := 3 + r.IntN(len(args)-3)
			args[i] = pick("", "0", "-1", "nan", "inf", "2", "w", "b", "x y", "1.5", "permits tokens", " permits", "a  b", "~p", "5:0", "1000000:x")
		}
		for range m {
			w := pick("-1", "-1", "-1", strconv.Itoa(r.IntN(2_000_000)), "0")
			if r.IntN(50) == 0 {
				w = pick("-2", "nan", "1.5", "inf", "x", "-1.0")
			}
			args = append(args, w)
			for range len(strings.Fields(units)) {
				c := pick("1", "1", "1", "1", "1", "0", "0.5", "0.25")
				if r.IntN(10) == 0 { // above some bursts and Ns
					c = pick("1.5", "2", "3.7", "500")
				}
				if r.IntN(50) == 0 {
					c = pick("-1", "nan", "inf", "11", "1001", "", "-0")
				}
				args = append(args, c)
			}
		}
		if r.IntN(60) == 0 {
			args = append(args, "1")
		}
		_ = units
		// With the server's clock the fast key goes first, and the slow one
		// replays its now on the client's: the same call.
		server := r.IntN(5) == 0
		fa := args
		if server {
			fa = append([]any{"", "0"}, args[2:]...)
		}
		x := run(fastScript, fastKeys, fa)
		sa := args
		if server {
			nowUS, ok := firstInt(x)
			if !ok { // an error: nothing to replay
				if spoilt {
					rdb.Del(ctx, fastKeys[0], slowKeys[0])
				}
				continue
			}
			sa = append([]any{strconv.FormatInt(nowUS, 10), "0"}, args[2:]...)
		}
		y := run(slowScript, slowKeys, sa)
		x, y = forgive.Replace(x), forgive.Replace(y)
		if x != y {
			t.Fatalf("step %d: Reserve %v:\n fast.lua:        %s\n core+reserve.lua: %s", step, fa, x, y)
		}
		if a, b := forgive.Replace(state(fastKeys)), forgive.Replace(state(slowKeys)); a != b {
			t.Fatalf("step %d: Reserve %v: states\n fast.lua:        %q\n core+reserve.lua: %q", step, fa, a, b)
		}
		if spoilt {
			rdb.Del(ctx, fastKeys[0], slowKeys[0])
		}
		// The states expire in real time, set by the client's clock: on a
		// slow machine one might expire between the two keys' calls. The
		// scripts never read a key's TTL.
		rdb.Persist(ctx, fastKeys[0])
		rdb.Persist(ctx, slowKeys[0])
		if len(x) > 7 && x[:7] == "error: " {
			failed++
		} else {
			answered++
		}
	}
	t.Logf("%d calls answered, %d errors, alike", answered, failed)
}

// negZero is the one difference the test forgives: in a format 1 state,
// where a time lies within half a thousandth of a ns below zero, fast.lua
// writes "0.000" (it rounds a time that close to a whole ns first, as
// format 2 does) and core.lua "-0.000" (its format 1 prints the time as it
// is). Every reader reads both as 0; both are as old as fast.lua, and
// which one a call wrote is kept as it was.
var negZero = strings.NewReplacer(" -0.000", " 0.000")

// scriptRef is where a Lua error says it happened.
var scriptRef = regexp.MustCompile(`user_script:\d+:|script: [0-9a-f]{40}, on @user_script:\d+\.`)

// firstInt returns the first integer of a reply printed by %#v.
func firstInt(s string) (int64, bool) {
	var v int64
	if _, err := fmt.Sscanf(s, "[]interface {}{%d", &v); err != nil {
		return 0, false
	}
	return v, true
}
