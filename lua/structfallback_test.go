package lua

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// structRoundTrip packs ARGV[5...] (numbers; "s<text>" a string, "-0"
// negative zero, "inf" and "-inf") with the format ARGV[3] (ARGV[4]
// values), unpacks the bytes again, and returns both: the bytes, then the
// values (numbers as %.17g; none for a format ending in a c0 with no
// size before it, which the scripts only pack). ARGV[1] and ARGV[2] are head.lua's (no
// deadline, the defaults).
const structRoundTrip = `
local fmt, n = ARGV[3], tonumber(ARGV[4])
local vals, zero = {}, 0
for i = 1, n do
  local a = ARGV[4 + i]
  if a == '-0' then
    vals[i] = -zero
  elseif a == 'inf' then
    vals[i] = 1 / zero
  elseif a == '-inf' then
    vals[i] = -1 / zero
  elseif string.sub(a, 1, 1) == 's' then
    vals[i] = string.sub(a, 2)
  else
    vals[i] = tonumber(a)
  end
end
local packed = struct.pack(fmt, unpack(vals, 1, n))
local back = {}
if string.sub(fmt, -4) ~= 'c0c0' then -- (a last c0 with no size before it: packed only)
  back = {struct.unpack(fmt, packed)}
end
for i = 1, #back do
  if type(back[i]) == 'number' then
    back[i] = string.format('%.17g', back[i])
  end
end
return {packed, back}
`

// TestStructFallback holds head.lua's pure-Lua struct (what the scripts
// use on a server without the library: miniredis, the demos' embedded
// Redis) to Redis's own library, on every format the scripts use, with
// random values in the ranges they write (integers within 2^53, any
// double but NaN, which the scripts never write). Since the in-process
// store finds its native library (luastore's rawget), nothing else runs
// the fallback on a real interpreter but miniredis.
func TestStructFallback(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.New(t).Client
	forced := strings.Replace(head, "rawget(_G, 'struct')", "nil", 1)
	if forced == head {
		t.Fatal("head.lua no longer finds struct with rawget(_G, 'struct'): update this test")
	}
	fallback, native := redis.NewScript(forced+structRoundTrip), redis.NewScript(head+structRoundTrip)
	r := rand.New(rand.NewPCG(1, 2))
	uint := func(bits int) string {
		return strconv.FormatUint(r.Uint64N(uint64(1)<<bits), 10)
	}
	sint := func(bits int) string {
		return strconv.FormatInt(r.Int64N(int64(1)<<bits)-int64(1)<<(bits-1), 10)
	}
	double := func() string {
		switch r.IntN(10) {
		case 0:
			return []string{"0", "-0", "inf", "-inf", "1", "-1", "0.5", "5e-324", "2.2250738585072014e-308", "1.7976931348623157e308"}[r.IntN(10)]
		case 1: // subnormal
			return strconv.FormatFloat(math.Float64frombits(r.Uint64N(1<<52)), 'g', -1, 64)
		case 2: // an integer
			return strconv.FormatInt(r.Int64N(1<<53)-1<<52, 10)
		}
		x := math.Float64frombits(r.Uint64())
		for math.IsNaN(x) || math.IsInf(x, 0) {
			x = math.Float64frombits(r.Uint64())
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	// A format's fields, as the scripts write them (lua/*.lua); "I4c0" is a
	// string's length and the string.
	formats := [][]string{
		{"B", "I7", "H", "B"},
		{"B", "I7", "I4", "I4", "i6", "i6"},
		{"B", "I7", "I4", "I6", "d", "d"},
		{"B", "I7", "I6", "I6", "d"},
		{"I7", "H", "B"},
		{"I7", "H", "I4"},
		{"I7", "H", "I4", "i8", "i8", "i8", "i8", "I4c0", "I4c0"},
		{"I7", "H", "I4", "i8", "i8", "I4c0", "I4c0", "c0"},
		{"I7", "I4", "I4", "i6", "i6"},
		{"I7", "I4", "I6", "d", "d"},
		{"d"},
		{"d", "d"},
	}
	cases := 0
	for _, fields := range formats {
		for range 60 {
			format, args := "<", []any{}
			for _, f := range fields {
				switch f {
				case "B":
					args = append(args, uint(8))
				case "H":
					args = append(args, uint(16))
				case "I4":
					args = append(args, uint(32))
				case "I6":
					args = append(args, uint(48))
				case "I7":
					args = append(args, uint(53))
				case "i6":
					args = append(args, sint(48))
				case "i8":
					args = append(args, sint(54))
				case "d":
					args = append(args, double())
				case "I4c0":
					s := strings.Repeat("xyz ", r.IntN(5))
					args = append(args, strconv.Itoa(len(s)), "s"+s)
				case "c0": // a string at the end, with no length before it
					args = append(args, "s")
				}
				format += f
			}
			argv := append([]any{"", "1", format, strconv.Itoa(len(args))}, args...)
			want, err := native.Run(ctx, rdb, nil, argv...).Result()
			if err != nil {
				t.Fatalf("%s %v: Redis's struct: %v", format, args, err)
			}
			got, err := fallback.Run(ctx, rdb, nil, argv...).Result()
			if err != nil {
				t.Fatalf("%s %v: head.lua's struct: %v", format, args, err)
			}
			if w, g := fmt.Sprintf("%q", want), fmt.Sprintf("%q", got); w != g {
				t.Fatalf("%s %v:\n Redis's struct:   %s\n head.lua's struct: %s", format, args, w, g)
			}
			cases++
		}
	}
	t.Logf("%d packs and unpacks alike", cases)
}
