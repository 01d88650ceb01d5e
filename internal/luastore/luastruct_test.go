package luastore

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The struct library (luastruct.go) held to Redis's lua_struct.c: each
// case is a script run on redis-server and on a Store, and the replies,
// and the errors' whole text, must be the same byte for byte.

// showLua is the scripts' first line: show(...) returns its arguments as
// an array of strings that keep all a script can tell of them: a number
// as "%.17g" ("-0", "nan" and "-nan" included), a string in hex (over 64
// bytes, its length and SHA1).
const showLua = `local function show(...) local a, o = {...}, {} for i = 1, select('#', ...) do local v, t = a[i], type(a[i]) if t == 'number' then o[i] = 'n:' .. string.format('%.17g', v) elseif t == 'string' and #v > 64 then o[i] = 's:' .. #v .. ' bytes, sha1 ' .. redis.sha1hex(v) elseif t == 'string' then o[i] = 's:' .. (string.gsub(v, '.', function(c) return string.format('%02x', string.byte(c)) end)) else o[i] = t .. ':' .. tostring(v) end end return o end local NZ, NAN = -tonumber('0'), 0 / 0 `

// structCase is one script: src follows showLua on its line.
type structCase struct {
	name string
	src  string
}

// exprCases makes a case "return show(e)" of each expression.
func exprCases(exprs ...string) []structCase {
	out := make([]structCase, len(exprs))
	for i, e := range exprs {
		out[i] = structCase{name: e, src: "return show(" + e + ")"}
	}
	return out
}

// runStructCases runs each case on both sides and compares the replies,
// and the errors' text, exactly (no allowance for gopher-lua's wording:
// every message here is the struct library's or Lua 5.1's auxiliary
// library's, which the store writes itself).
func runStructCases(t *testing.T, p *pair, cases []structCase) {
	t.Helper()
	ctx := context.Background()
	for _, c := range cases {
		src := showLua + c.src
		r := p.rdb.Eval(ctx, src, nil)
		s := p.st.Eval(ctx, src, nil)
		if d := sameExactly(r, s); d != "" {
			t.Errorf("%s: %s\nscript: %s", c.name, d, c.src)
		}
	}
}

// sameExactly is "" when r and s have equal values or errors of equal
// text.
func sameExactly(r, s *redis.Cmd) string {
	rerr, serr := r.Err(), s.Err()
	if (rerr == nil) != (serr == nil) || (rerr != nil && rerr.Error() != serr.Error()) {
		return fmt.Sprintf("errors differ:\nredis %s\nstore %s", errText(rerr), errText(serr))
	}
	if !reflect.DeepEqual(normal(r.Val()), normal(s.Val())) {
		return fmt.Sprintf("values differ:\nredis %s\nstore %s", show(r.Val()), show(s.Val()))
	}
	return ""
}

// luaBytes is a Lua string literal of b.
func luaBytes(b []byte) string {
	var sb strings.Builder
	sb.WriteByte('\'')
	for _, c := range b {
		fmt.Fprintf(&sb, "\\%d", c)
	}
	sb.WriteByte('\'')
	return sb.String()
}

// TestStructIntegers: every size of i and I, 1 to 8, in both orders, and
// the other integer options, packed from values in and out of range
// (wrapping, truncation of fractions, negatives as unsigned) and unpacked
// from edge patterns (sign extension, values past 2^53).
func TestStructIntegers(t *testing.T) {
	p := newPair(t)
	var exprs []string
	for n := 1; n <= 8; n++ {
		bits := 8 * n
		for _, e := range []string{"<", ">"} {
			si, ui := fmt.Sprintf("'%si%d'", e, n), fmt.Sprintf("'%sI%d'", e, n)
			// In range for both conversions: |n| < 2^63 or 0 <= n < 2^64.
			top := fmt.Sprintf("2^%d", bits-1)
			full := fmt.Sprintf("2^%d", bits)
			if n == 8 {
				full = "(2^64 - 2048)"
			}
			for _, v := range []string{"0", "1", "-1", "2.7", "-2.7", "0.5", "-0.5", "NZ", top, "-" + top, top + " - 1", "-" + top + " - 1", full, full + " - 1", "-" + full + " + 1", "255", "256", "-256", "65535", "2^31", "-2^31", "2^32 + 3", "2^53", "2^53 + 2", "-2^53", "2^62 + 2^40", "-(2^63)", "2^63 - 1024", "'12'", "' 0x10 '", "'1e2'", "'-7'"} {
				exprs = append(exprs, "struct.pack("+si+", "+v+")", "struct.pack("+ui+", "+v+")")
			}
			for _, d := range [][]byte{
				make([]byte, n),
				[]byte(strings.Repeat("\xff", n)),
				append([]byte{0x80}, make([]byte, n-1)...),
				append(make([]byte, n-1), 0x80),
				append([]byte{0x7f}, []byte(strings.Repeat("\xff", n-1))...),
				append([]byte(strings.Repeat("\xff", n-1)), 0x7f),
				[]byte("\x01\x23\x45\x67\x89\xab\xcd\xef"[:n]),
				[]byte("\x00\x20\x00\x00\x00\x00\x00\x01"[:n]),
				[]byte("\x01\x00\x00\x00\x00\x00\x20\x00"[:n]),
			} {
				exprs = append(exprs, "struct.unpack("+si+", "+luaBytes(d)+")", "struct.unpack("+ui+", "+luaBytes(d)+")")
			}
		}
	}
	for _, o := range []string{"b", "B", "h", "H", "l", "L", "T", "i", "I"} {
		for _, e := range []string{"", "<", ">"} {
			f := "'" + e + o + "'"
			exprs = append(exprs,
				"struct.pack("+f+", -3)", "struct.pack("+f+", 300.9)", "struct.pack("+f+", 2^40 + 7)",
				"struct.unpack("+f+", '\\255\\254\\253\\252\\251\\250\\249\\248\\247')",
				"struct.size("+f+")")
		}
	}
	// Sizes over 8 (packed zero-extended, unpacked from the last 8 bytes
	// read) and i0, unsigned: defined.
	for _, f := range []string{"'<I9'", "'>I9'", "'<I16'", "'>I16'", "'<I32'", "'>I32'", "'<I0'", "'>I0'", "'<i16'", "'>i16'", "'i0'"} {
		exprs = append(exprs, "struct.pack("+f+", -2)", "struct.pack("+f+", 2^64 - 2048)", "struct.size("+f+")")
		if !strings.Contains(f, "i") { // signed: see TestStructUndefined
			exprs = append(exprs, "struct.unpack("+f+", string.rep('\\1\\2\\3\\4\\5\\6\\7\\8', 4))")
		}
	}
	runStructCases(t, p, exprCases(exprs...))
}

// TestStructFloats: f and d, both orders, special values.
func TestStructFloats(t *testing.T) {
	p := newPair(t)
	var exprs []string
	for _, f := range []string{"'f'", "'<f'", "'>f'", "'d'", "'<d'", "'>d'"} {
		for _, v := range []string{"0", "NZ", "1", "-1.5", "0.1", "1/3", "1/0", "-1/0", "NAN", "-NAN", "2^53 + 2", "1e308", "1e308 * 10", "5e-324", "2.2250738585072014e-308", "1e39", "-1e39", "3.4028235677973366e38", "3.4028235677973362e38", "1e-45", "1e-46", "16777217", "'2.5'", "'inf'", "'-inf'", "'nan'", "'-nan'", "'0x1p-2'"} {
			exprs = append(exprs, "struct.pack("+f+", "+v+")")
		}
		// tonumber's NaNs: glibc's strtod, a payload from "nan(n)"
		for _, v := range []string{"'nan(123)'", "'-nan(0x7)'", "'NaN(017)'", "'nan(08)'", "'nan()'", "'nan(abc)'", "'nan(0xfffffffffffffffff)'", "'nan(99999999999999999999999)'", "'nan(0x8000000000001)'"} {
			exprs = append(exprs, "struct.pack("+f+", tonumber("+v+"))")
		}
		exprs = append(exprs, "struct.unpack("+f+", struct.pack("+f+", 0.1))", "struct.unpack("+f+", struct.pack("+f+", NZ))")
	}
	for _, d := range [][]byte{
		{0, 0, 0xc0, 0x7f}, {0x7f, 0xc0, 0, 0}, {1, 0, 0x80, 0x7f}, {0x7f, 0x80, 0, 1}, {0, 0, 0x80, 0xff}, {1, 0, 0, 0}, {0, 0, 0, 0x80},
		{0, 0, 0, 0, 0, 0, 0xf8, 0x7f}, {0xff, 0xf8, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0xf0, 0x7f}, {0x7f, 0xf0, 0, 0, 0, 0, 0, 1}, {1, 0, 0, 0, 0, 0, 0, 0}, {0x80, 0, 0, 0, 0, 0, 0, 0},
	} {
		for _, f := range []string{"'<f'", "'>f'", "'<d'", "'>d'"} {
			// A NaN's bits: the value packed again as a double.
			exprs = append(exprs, "struct.unpack("+f+", "+luaBytes(d)+")", "struct.pack('>d', (struct.unpack("+f+", "+luaBytes(d)+")))")
		}
	}
	runStructCases(t, p, exprCases(exprs...))
}

// TestStructStrings: c, c0, s and x, packing and unpacking, and the
// positions unpack starts at and returns.
func TestStructStrings(t *testing.T) {
	p := newPair(t)
	runStructCases(t, p, exprCases(
		"struct.pack('c0', '')", "struct.pack('c0', 'abc')", "struct.pack('c0', string.rep('ab', 6000))", "struct.pack('c0c0', 'ab', string.rep('x', 9000))",
		"struct.pack('c3', 'abcdef')", "struct.pack('c', 'xyz')", "struct.pack('c1c2', 'a', 'bc')", "struct.pack('c0', 12.5)", "struct.pack('c0', 1e15)", "struct.pack('c0', 1/3)",
		"struct.pack('c3', 'ab')", "struct.pack('bc3', 1, 'ab')", "struct.pack('c0', {})", "struct.pack('c0')", "struct.pack('c0', true)",
		"struct.pack('s', 'abc')", "struct.pack('s', '')", "struct.pack('s', 'a\\0b')", "struct.pack('ss', 'a', 'b')", "struct.pack('s', 2^53)", "struct.pack('s5', 'a')",
		"struct.pack('xbx', 1)", "struct.pack('x')", "struct.pack('xx', 1)", "struct.pack('c2147483647', 'a')",
		"struct.unpack('c0', 'ab')", "struct.unpack('xc0', 'ab')", "struct.unpack('bc0', '\\3abcd')", "struct.unpack('Bc0', '\\0')", "struct.unpack('Bc0', '\\0xyz')",
		"struct.unpack('<i4c0', '\\2\\0\\0\\0abc')", "struct.unpack('>I2c0', '\\0\\4abcde')", "struct.unpack('bc0', '\\10abc')", "struct.unpack('bc0b', '\\1ab')",
		"struct.unpack('c1c0', '3abc')", "struct.unpack('c1c0', 'xabc')", "struct.unpack('c2c0', ' 2ab')", "struct.unpack('sc0', '0x2\\0ab')", "struct.unpack('c3c0', '1e1abcdefghijk')",
		"struct.unpack('dc0', struct.pack('<d', 2.9) .. 'abc')", "struct.unpack('dc0', struct.pack('<d', -0.5) .. 'abc')", "struct.unpack('dc0', struct.pack('<d', NZ) .. 'abc')",
		"struct.unpack('bxc0', '\\2xabc')", "struct.unpack('b c0', '\\2abc')", "struct.unpack('b<c0', '\\2abc')", "struct.unpack('I4c0', struct.pack('I4', 9000) .. string.rep('z', 9000))",
		"struct.unpack('c2', 'a')", "struct.unpack('c2', 'ab')", "struct.unpack('c', 'ab')", "struct.unpack('c2c2', 'abcd')", "struct.unpack('c2147483647', 'a')",
		"struct.unpack('s', 'abc\\0def')", "struct.unpack('ss', 'a\\0b\\0')", "struct.unpack('s', '\\0')", "struct.unpack('s', 'abc')", "struct.unpack('s', '')", "struct.unpack('bs', 'a')",
		"struct.unpack('xbx', 'abc')", "struct.unpack('x', '')", "struct.unpack('xx', 'a')",
		"struct.unpack('b', 'abc', 2)", "struct.unpack('b', 'abc', 3)", "struct.unpack('b', 'abc', 4)", "struct.unpack('', 'abc', 4)", "struct.unpack('', 'abc', 10)", "struct.unpack('', '', 1)",
		"struct.unpack('b', 'abc', 0)", "struct.unpack('b', 'abc', -1)", "struct.unpack('', 'abc', -1)", "struct.unpack('', 'abc', -5)", "struct.unpack('!4i4', 'abcd', -1)", "struct.unpack('', 'abc', -2^62)",
		"struct.unpack('b', 'abc', 2.9)", "struct.unpack('b', 'abc', 0.5)", "struct.unpack('b', 'abc', -0.5)", "struct.unpack('b', 'abc', '2')", "struct.unpack('b', 'abc', ' 0x2 ')", "struct.unpack('b', 'abc', 'x')",
		"struct.unpack('b', 'abc', nil)", "struct.unpack('b', 'abc', {})", "struct.unpack('b', 'abc', true)", "struct.unpack('b', 'abc', 2, 'extra')", "struct.unpack('<', '', 2)", "struct.unpack(' ', 'a', 2)",
		"struct.unpack('b', 123)", "struct.unpack('c0', 2.5)", "struct.unpack('bb', 'a')",
		"struct.unpack(string.rep('B', 7997), string.rep('a', 7997))", "struct.unpack(string.rep('B', 7998), string.rep('a', 7998))",
		"struct.unpack(string.rep('B', 7996), string.rep('a', 7998), 1)", "struct.unpack(string.rep('B', 7997), string.rep('a', 7998), 1)",
		"struct.unpack(string.rep('x', 9000) .. 'B', string.rep('a', 9001))", "struct.unpack(string.rep('B', 7996) .. 'c0', string.rep('\\0', 7997))",
		"select('#', struct.unpack(string.rep('B', 7997), string.rep('a', 7997)))",
	))
}

// TestStructFormats: alignment, order, sizes, and the errors of formats
// and arguments, and the name an error gives the function.
func TestStructFormats(t *testing.T) {
	p := newPair(t)
	cases := exprCases(
		"struct.pack('!4 b i4', 1, 2)", "struct.pack('!b d', 1, 2)", "struct.pack('!2 b i8', 1, 2)", "struct.pack('!i3i3', 1, 2)", "struct.pack('!8 b h b i b l b T b f b d', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)",
		"struct.pack('!1 b i', 1, 2)", "struct.pack('! b x i', 1, 2)", "struct.pack('!16 b d', 1, 2)", "struct.pack('!4 b c3 i2 s h', 1, 'abc', 2, 'xy', 3)", "struct.pack('!4 b !2 i4', 1, 2)", "struct.pack('b!4i2i3I4', 1, 2, 3, 4)",
		"struct.pack('<i2>i2', 1, 1)", "struct.pack('> <i2', 1)", "struct.pack('  ')", "struct.pack('')", "struct.pack('i\\0y', 1)", "struct.pack('i0', 5)",
		"struct.unpack('!4 b i4', struct.pack('!4 b i4', -1, -2))", "struct.unpack('!4 i4', 'xabcdefg', 2)", "struct.unpack('!4 b i4', 'abcdefgh', 2)", "struct.unpack('!8 d', string.rep('\\0', 16), 3)", "struct.unpack('!i3i3', struct.pack('!i3i3', 5, 6))",
		"struct.size('i')", "struct.size('!8bd')", "struct.size('bhlTfdxi3I7')", "struct.size('c10')", "struct.size('c')", "struct.size('')", "struct.size('!4 b i4 b')", "struct.size('!bhbd')", "struct.size('!2 b i8 c3 h')", "struct.size('i\\0s')",
		"struct.size('y')", "struct.size('1')", "struct.size('i33')", "struct.size('!3')", "struct.size('%')", "struct.size('s')", "struct.size('c0')", "struct.size('bc0')", "struct.size(12)", "struct.size()", "struct.size({})",
		"struct.size('c2147483647c2147483647')", "struct.size('c99999999999')",
		"struct.pack('y')", "struct.pack('%')", "struct.pack('i33', 1)", "struct.pack('I99', 1)", "struct.pack('!')", "struct.pack('!3')", "struct.pack('!0')", "struct.pack('!6')", "struct.pack('!2147483648')", "struct.pack('!99999999999')", "struct.pack('i2147483647', 1)",
		"struct.pack('5')", "struct.pack(5)", "struct.pack('\\200')", "struct.pack('\\255', 1)", "struct.pack('i', 'abc')", "struct.pack('i', '')", "struct.pack('i', {})", "struct.pack('i', true)", "struct.pack('i')", "struct.pack('ii', 1)", "struct.pack('d', nil)", "struct.pack()", "struct.pack({})",
		"struct.unpack('y', 'abc')", "struct.unpack('q', '')", "struct.unpack('i33', '')", "struct.unpack('!5', 'a')", "struct.unpack()", "struct.unpack('b')", "struct.unpack('b', nil)", "struct.unpack({}, 'a')", "struct.unpack(1, 'a')", "struct.unpack('i4', 'ab')", "struct.unpack('\\200', 'a')",
		"struct.unpack('i', 'abcd')", "struct.unpack('l', 'abcdefgh')", "struct.unpack('T', 'abcdefgh')",
		"type(struct)", "type(struct.pack)", "pcall(struct.pack, 'y')", "pcall(struct.pack, 'i', 'x')", "pcall(struct.unpack, 'i4', 'ab')", "pcall(struct.unpack, 'c0', 'ab')", "pcall(struct.size, 's')", "pcall(struct.pack, 'i33')",
		"pcall(function() return struct.pack('y') end)", "pcall(function() local x = struct.pack('y') return x end)",
	)
	cases = append(cases,
		structCase{name: "error", src: "return struct.pack('y')"},
		structCase{name: "error line", src: "local x = 1\n\nlocal y = struct.unpack('i4', 'ab')\nreturn y"},
		structCase{name: "luaL_error line", src: "local x = 1\n\nlocal y = struct.unpack('s', 'ab')\nreturn y"},
		structCase{name: "local name", src: "local p = struct.pack return show(p('y'))"},
		structCase{name: "field name", src: "local t = {f = struct.size} return show(t.f('s'))"},
		structCase{name: "library alias", src: "local s = struct return show(s.unpack('b'))"},
		structCase{name: "index name", src: "return show(struct['pack']('i', {}))"},
		structCase{name: "computed name", src: "local k = 'pack' return show(struct[k]('i', {}))"},
		structCase{name: "readonly", src: "struct.pack = nil return 1"},
		structCase{name: "readonly new", src: "struct.x = 1 return 1"},
		structCase{name: "round trip", src: "local s = struct.pack('>!4 b i4 s d c0 h', -5, 123456, 'hi', 1/3, 'tail', -2) return show(#s, struct.size('>!4 b i4'), struct.unpack('>!4 b i4 s d c4 h', s))"},
	)
	runStructCases(t, p, cases)
}

// TestStructUndefined holds the store to what Redis's x86-64 build gives
// where lua_struct.c's result is undefined in C: doubles out of the
// integers' range, and NaN, packed as integers or taken as unpack's
// position or c0's length, and the sign extension of signed sizes 0 and 9
// to 32. Redis built for another CPU (arm64 saturates conversions, and
// may shift otherwise) can answer otherwise, so this runs on amd64 only.
func TestStructUndefined(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("undefined C conversions: the store copies x86-64's answers (this is %s)", runtime.GOARCH)
	}
	p := newPair(t)
	var exprs []string
	for _, f := range []string{"'<i8'", "'>I8'", "'<i4'", "'<I2'", "'<I16'"} {
		for _, v := range []string{"NAN", "-NAN", "1/0", "-1/0", "2^64", "2^64 + 2^12", "1e30", "-1e30", "-2^63 - 4096", "-2^64", "1e300", "'nan'"} {
			exprs = append(exprs, "struct.pack("+f+", "+v+")")
		}
	}
	for _, f := range []string{"'<i0'", "'>i0'", "'<i9'", "'>i9'", "'<i12'", "'<i16'", "'>i16'", "'<i31'", "'<i32'", "'>i32'"} {
		for _, d := range []string{"string.rep('\\0', 32)", "'\\1' .. string.rep('\\0', 31)", "'\\128' .. string.rep('\\0', 31)", "string.rep('\\0', 7) .. '\\128' .. string.rep('\\0', 24)", "string.rep('\\255', 32)", "string.rep('\\0', 8) .. '\\1' .. string.rep('\\0', 23)", "string.rep('\\0', 15) .. '\\128' .. string.rep('\\0', 16)"} {
			exprs = append(exprs, "struct.unpack("+f+", "+d+")")
		}
	}
	exprs = append(exprs,
		"struct.unpack('bc0', '\\255abc')", "struct.unpack('dc0', struct.pack('<d', -1) .. 'abc')", "struct.unpack('dc0', struct.pack('<d', NAN) .. 'abc')", "struct.unpack('dc0', struct.pack('<d', 1/0) .. 'abc')", "struct.unpack('dc0', struct.pack('<d', 2^64) .. 'abc')",
		"struct.unpack('', 'abc', NAN)", "struct.unpack('', 'abc', 1e30)", "struct.unpack('', 'abc', -1e30)", "struct.unpack('', 'abc', 2^63)", "struct.unpack('b', 'abc', 2^63)", "struct.unpack('', 'abc', 1/0)",
	)
	runStructCases(t, p, exprCases(exprs...))
}

// TestStructRoundTrip: random formats and values (seeded: the seed is
// logged; PACER_STRUCT_SEED=n replays it) packed and unpacked on both
// sides: the packed bytes, the values unpacked and the positions must be
// the same on both, and the values unpacked must be the values packed.
func TestStructRoundTrip(t *testing.T) {
	p := newPair(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("PACER_STRUCT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("PACER_STRUCT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("seed %d (replay: PACER_STRUCT_SEED=%d)", seed, seed)
	r := rand.New(rand.NewPCG(seed, 53))
	// ARGV: the format, then each value, "n" and a number or "s" and a
	// string. The reply: the packed string, struct.size's answer (or
	// "-" when the format has s or c0), then what unpack returns.
	const src = `local f = ARGV[1] local v = {} local i = 2 while i <= #ARGV do if ARGV[i] == 'n' then v[#v + 1] = tonumber(ARGV[i + 1]) else v[#v + 1] = ARGV[i + 1] end i = i + 2 end local s = struct.pack(f, unpack(v)) local size = '-' if not string.find(f, '[sc]') then size = struct.size(f) end local out = {s, size} for _, x in ipairs({struct.unpack(f, s)}) do if type(x) == 'number' then x = string.format('%.17g', x) end out[#out + 1] = x end return out`
	ctx := context.Background()
	n := 300
	if testing.Short() {
		n = 100
	}
	for iter := range n {
		format, args, want := randomStructFormat(r)
		rr := p.rdb.Eval(ctx, src, nil, args...)
		sr := p.st.Eval(ctx, src, nil, args...)
		if d := sameExactly(rr, sr); d != "" {
			t.Fatalf("seed %d, iteration %d: format %q, values %q: %s", seed, iter, format, args[1:], d)
		}
		got, err := rr.Slice()
		if err != nil {
			t.Fatalf("seed %d, iteration %d: format %q, values %q: %v", seed, iter, format, args[1:], err)
		}
		packed := got[0].(string)
		if size, ok := got[1].(int64); ok && int(size) != len(packed) {
			t.Errorf("seed %d, iteration %d: format %q: struct.size %d, packed %d bytes", seed, iter, format, size, len(packed))
		}
		values := got[2:]
		wantAll := append(want, strconv.Itoa(len(packed)+1))
		if len(values) != len(wantAll) {
			t.Fatalf("seed %d, iteration %d: format %q, values %q: unpacked %q, want %q", seed, iter, format, args[1:], values, wantAll)
		}
		for i, v := range values {
			if v != wantAll[i] {
				t.Fatalf("seed %d, iteration %d: format %q, values %q: unpacked %q, want %q", seed, iter, format, args[1:], values, wantAll)
			}
		}
	}
}

// randomStructFormat returns a format of a few options, the EVAL
// arguments that pack values for it (the format first), and what unpack
// must give back for each value: a number as "%.17g", a string as is.
func randomStructFormat(r *rand.Rand) (format string, args []any, want []string) {
	var f strings.Builder
	args = []any{""}
	num := func(x float64) {
		s := strconv.FormatFloat(x, 'g', 17, 64)
		args = append(args, "n", s)
		want = append(want, formatG(x, 17))
	}
	// an integer that fits a signed (or unsigned) integer of size bytes
	// and a double both
	integer := func(size int, signed bool) float64 {
		bits := 8 * size
		if bits > 64 {
			bits = 64
		}
		if r.IntN(4) == 0 { // an edge
			// the largest double below 2^top
			below := func(top int) float64 { return math.Nextafter(math.Ldexp(1, top), 0) }
			lo, hi := 0.0, below(bits)
			if signed {
				lo, hi = -math.Ldexp(1, bits-1), below(bits-1)
			}
			hi = math.Floor(hi)
			minus1 := 1.0
			if signed {
				minus1 = -1
			}
			return []float64{lo, hi, 0, minus1, 1}[r.IntN(5)]
		}
		mag := r.IntN(bits - b2i(signed))
		x := float64(r.Uint64() >> (64 - max(mag, 1)))
		if mag > 53 {
			x = math.Ldexp(float64(r.Uint64()>>11), mag-53)
		}
		if signed && x != 0 && r.IntN(2) == 0 {
			x = -x
		}
		return x
	}
	if r.IntN(3) == 0 {
		f.WriteString(fmt.Sprintf("!%d", 1<<r.IntN(4)))
	}
	for range 1 + r.IntN(6) {
		switch r.IntN(4) {
		case 0:
			f.WriteString([]string{"<", ">", " "}[r.IntN(3)])
		}
		switch k := r.IntN(12); k {
		case 0, 1, 2, 3:
			size := 1 + r.IntN(8)
			signed := r.IntN(2) == 0
			o := "I"
			if signed {
				o = "i"
			}
			fmt.Fprintf(&f, "%s%d", o, size)
			num(integer(size, signed))
		case 4:
			o := []string{"b", "B", "h", "H", "l", "L", "T", "i", "I"}[r.IntN(9)]
			size := map[string]int{"b": 1, "B": 1, "h": 2, "H": 2, "l": 8, "L": 8, "T": 8, "i": 4, "I": 4}[o]
			f.WriteString(o)
			num(integer(size, o[0] >= 'a'))
		case 5:
			f.WriteString("d")
			num([]float64{r.NormFloat64() * math.Pow(10, float64(r.IntN(40)-20)), math.Inf(1), math.Inf(-1), math.MaxFloat64, math.SmallestNonzeroFloat64, 0}[r.IntN(6)])
		case 6:
			f.WriteString("f")
			num(float64(float32(r.NormFloat64() * 1000)))
		case 7:
			f.WriteString("x")
		case 8, 9:
			s := randomBytes(r, r.IntN(12), false)
			if s != "" && r.IntN(2) == 0 {
				fmt.Fprintf(&f, "c%d", len(s))
			} else {
				// c0 packs the whole string; unpack takes its length from
				// the value before it
				fmt.Fprintf(&f, "I%dc0", 1+r.IntN(4))
				num(float64(len(s)))
				want = want[:len(want)-1]
			}
			args = append(args, "s", s)
			want = append(want, s)
		case 10, 11:
			s := randomBytes(r, r.IntN(12), true)
			f.WriteString("s")
			args = append(args, "s", s)
			want = append(want, s)
		}
	}
	args[0] = f.String()
	return f.String(), args, want
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// randomBytes returns n random bytes, without NUL when noZero.
func randomBytes(r *rand.Rand, n int, noZero bool) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
		for noZero && b[i] == 0 {
			b[i] = byte(r.IntN(256))
		}
	}
	return string(b)
}
