package lua

// The Limit's way's differential test: Reserve (head.lua, fast.lua,
// core.lua, reserve.lua) against the same script without fast.lua, on the
// same random calls on two keys of one real Redis. fast.lua promises to do
// exactly what the general code does where it answers (requests on a
// Limit, on the server's clock), and to leave every other call to it:
// every reply (or error) and every state written must be the same, byte
// for byte.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
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
	fastScript, slowScript := redis.NewScript(Reserve), redis.NewScript(head+core+reserve)
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
		return fmt.Sprintf("%q", v)
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
	doubles := func(xs ...float64) string {
		var b []byte
		for _, x := range xs {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
		}
		return string(b)
	}
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }

	// The policy: a Limit ("L" and its rate and burst: fast.lua's), the
	// same Limit as text, or several bands (the general code's, on both
	// keys).
	var policy string
	burst := 2.0
	draw := func() {
		rate := pick("0.5", "3", "7", "100", "12345.6", "1000000", "1e6", "0.001")
		b := pick("1", "2", "3", "4", "10", "1000")
		burst = num(b)
		switch r.IntN(4) {
		case 0, 1:
			policy = "L" + doubles(num(rate), burst)
		case 2:
			policy = "1 permits 1 permits 1 b " + rate + " " + b
		default:
			units := pick("permits", "requests tokens", "a b c")
			nunits := len(strings.Fields(units))
			var bands []string
			for i := range 1 + r.IntN(3) {
				name := pick("rps", "tps", "daily", "permits") + strconv.Itoa(i)
				unit := strconv.Itoa(1 + r.IntN(nunits))
				if r.IntN(2) == 0 {
					bands = append(bands, name, unit, "b", pick("0.5", "3", "100", "12345.6", "1e6"), pick("1", "2", "5", "1000", "6000"))
				} else {
					bands = append(bands, name, unit, "w", pick("1", "3", "10", "2.5", "1e12"), pick("1000000:0", "3000000:250000", "86400000000:0", "60000000:17"))
				}
			}
			policy = strconv.Itoa(nunits) + " " + units + " " + strconv.Itoa(len(bands)/5) + " " + strings.Join(bands, " ")
			burst = 1
		}
	}
	answered, failed, fast, fastClient := 0, 0, 0, 0
	draw()
	for step := range 4000 {
		// Now and then, the policy changes, or the key is paused, given a
		// stored limit (falls through), emptied or spoilt.
		spoilt := false
		switch r.IntN(40) {
		case 0, 5:
			draw()
		case 1:
			now := "t" + strconv.FormatInt(time.Now().UnixMicro(), 10) + ":0 "
			a := []any{"", now + pick("1", "f2 1", "f1 1"), "", strconv.Itoa(1 + r.IntN(3_000_000))}
			if x, y := run(pauseScript, fastKeys[:2], a), run(pauseScript, slowKeys[:2], a); x != y {
				t.Fatalf("step %d: Pause %q: %s, and on the other key %s", step, a, x, y)
			}
		case 2, 6:
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
			// (A state's t in the past: replayed on the client's clock,
			// the other key would not apply the server clock's rule for
			// a t ahead of now.)
			v := pick("garbage", "\xa0short", "\xb0\x00\x00\x00\x00\x00\x00\x0089012345678901234567", "1 2 3", "17000000000000 1 1 0 x y",
				"1 1700000000000000 5 1 0.000 0 permits 1.000", "1700000000000000 5 1 0 5 5 extra")
			rdb.Set(ctx, fastKeys[0], v, 0)
			rdb.Set(ctx, slowKeys[0], v, 0)
			spoilt = true
		}
		// The environment, on the server's clock: the format, a lost
		// horizon, now and then another share (the general code's).
		env := pick("1", "1", "1", "f2 1", "f2 1", "f1 1", "f3 1")
		if r.IntN(6) == 0 {
			env = pick("!250000 ", "!0 ", "!3000000:3 ", "!1000:1000 ", "!7:0 ", "!250000:1 ") + env
		}
		if r.IntN(15) == 0 {
			env = pick("3 1", "m 2 0 0", "f2 2 1")
		}
		deadline := ""
		if r.IntN(8) == 0 { // a deadline to come (one passed: TestConformanceStale)
			deadline = "99999999999999"
		}
		args := []any{deadline, env, policy}
		// The floor and the requests: none (one plain request), a number of
		// plain ones, or doubles; with a floor now and then.
		nunits := 1
		if f := strings.Fields(policy); policy[0] != 'L' {
			nunits, _ = strconv.Atoi(f[0])
		}
		switch r.IntN(6) {
		case 0, 1:
		case 2:
			args = append(args, "", pick("2", "3", "16", "0"))
		default:
			m := 1 + r.IntN(3)
			var xs []float64
			for range m {
				w := num(pick("-1", "-1", "-1", strconv.Itoa(r.IntN(2_000_000)), "0"))
				if r.IntN(50) == 0 {
					w = num(pick("-2", "nan", "1.5", "inf", "-1.0"))
				}
				xs = append(xs, w)
				for range nunits {
					c := num(pick("1", "1", "1", "1", "1", "0", "0.5", "0.25"))
					if r.IntN(10) == 0 { // above some bursts and Ns
						c = num(pick("1.5", "2", "3.7", "500"))
					}
					if r.IntN(50) == 0 {
						c = num(pick("-1", "nan", "inf", "11", "1001", "-0"))
					}
					xs = append(xs, c)
				}
			}
			args = append(args, pick("", "", "", "", "250000", "0"), doubles(xs...))
		}
		if r.IntN(30) == 0 { // malformed, or another shape: falls through
			// (Not the deadline: one passed is refused on the server's
			// clock alone; TestConformanceStale.)
			i := 1 + r.IntN(len(args)-1)
			args[i] = pick("", "0", "-1", "nan", "L", "L1234567890123456", "2", "x y", "1.5", " permits", "~p", "5:0", doubles(1, 2, 3))
		}
		if r.IntN(60) == 0 {
			args = append(args, "1")
		}
		// A third of the calls on a client's clock (Options.ClientTime,
		// pacertest's Limiter), on both keys: up to 2 s behind the server,
		// so that a state's t may lie ahead of now (the rule for a clock
		// that steps back is the server's alone), never ahead of the
		// server (the server's calls on the fast key would apply it where
		// the other key's replays on a client clock do not).
		client := r.IntN(3) == 0
		if client {
			us := time.Now().UnixMicro() - int64(r.IntN(2_000_000))
			args[1] = "t" + strconv.FormatInt(us, 10) + ":" + strconv.Itoa(r.IntN(1000)) + " " + fmt.Sprint(args[1])
		}
		// The fast key goes first, on the server's clock; the slow one
		// replays its now on the client's: the same call.
		x := run(fastScript, fastKeys, args)
		nowUS, ok := replyNow(x)
		if !ok { // an error: nothing to replay; the other key errs alike
			sa := append([]any{}, args...)
			if !client {
				sa[1] = "t" + strconv.FormatInt(time.Now().UnixMicro(), 10) + ":0 " + fmt.Sprint(args[1])
			}
			if y := run(slowScript, slowKeys, sa); y != x && !(strings.HasPrefix(x, "error: ") && strings.HasPrefix(y, "error: ")) {
				t.Fatalf("step %d: Reserve %q:\n fast.lua:    %s\n without it: %s", step, args, x, y)
			}
			if spoilt {
				rdb.Del(ctx, fastKeys[0], slowKeys[0])
			}
			failed++
			continue
		}
		sa := append([]any{}, args...)
		if !client {
			sa[1] = "t" + strconv.FormatInt(nowUS, 10) + ":0 " + fmt.Sprint(args[1])
		}
		y := run(slowScript, slowKeys, sa)
		if x != y {
			t.Fatalf("step %d: Reserve %q:\n fast.lua:    %s\n without it: %s", step, args, x, y)
		}
		if a, b := state(fastKeys), state(slowKeys); a != b {
			t.Fatalf("step %d: Reserve %q: states\n fast.lua:    %q\n without it: %q", step, args, a, b)
		}
		if spoilt {
			rdb.Del(ctx, fastKeys[0], slowKeys[0])
		}
		if policy[0] == 'L' && env != "" && (env[0] == '1' || env[0] == 'f') && len(args) <= 5 {
			fast++
			if client {
				fastClient++
			}
		}
		// The states expire in real time: on a slow machine one might
		// expire between the two keys' calls. The scripts never read a
		// key's TTL.
		rdb.Persist(ctx, fastKeys[0])
		rdb.Persist(ctx, slowKeys[0])
		answered++
	}
	t.Logf("%d calls answered (%d of them fast.lua's shape, %d of those on a client's clock), %d errors, alike", answered, fast, fastClient, failed)
	if fast < 500 || fastClient < 100 {
		t.Errorf("only %d calls of fast.lua's shape, %d on a client's clock", fast, fastClient)
	}
}

// scriptRef is where a Lua error says it happened.
var scriptRef = regexp.MustCompile(`user_script:\d+:|script: [0-9a-f]{40}, on @user_script:\d+\.`)

// replyNow returns the now_us a Reserve reply (printed by %q) begins with.
func replyNow(s string) (int64, bool) {
	v, err := strconv.Unquote(s)
	if err != nil || len(v) < 7 {
		return 0, false
	}
	var b [8]byte
	copy(b[:], v[:7])
	return int64(binary.LittleEndian.Uint64(b[:])), true
}
