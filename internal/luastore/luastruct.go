package luastore

import (
	"fmt"
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The struct library as Redis 7.0 ships it (deps/lua/src/lua_struct.c,
// Roberto Ierusalimschy's struct.c 1.7): struct.pack(fmt, ...),
// struct.unpack(fmt, data [, pos]) and struct.size(fmt), with the C code's
// quirks kept, as Redis on x86-64 (and arm64, little-endian as well) runs
// it:
//
//   - the format ends at its first NUL; the default order is the host's,
//     little-endian; '!' alone aligns to 8; sizes are LP64's (h 2, i 4,
//     l and T 8); i and I take sizes 1 to 32, of which only the low 8
//     bytes carry the value (packed zero-extended, read as the last 8
//     bytes read);
//   - pack converts a number as C does: (unsigned long)(long)n when n < 0,
//     (unsigned long)n otherwise; unpack returns every number as a double
//     ("integer does not fit into Lua Integer" is the Lua 5.3 struct's,
//     not this one's), and its last value, the next position, as
//     lua_pushinteger does (a size_t through a ptrdiff_t);
//   - an argument missing from pack is "nil" in its error (the C code
//     pushes a nil before reading its arguments), unpack's and size's
//     "no value"; pack's "string too short" names the argument after the
//     string (the C code counts it before it checks); in unpack, the
//     position may be any integer (a negative one wraps around as a
//     size_t), every option, even '<', needs its position to be within the
//     data, and c0 takes its length from the previous value when that is a
//     number or a string that reads as one; struct.size skips a letter or
//     digit that is no option (pack and unpack refuse it);
//   - more than 7996 values from one unpack (with two arguments) fail as
//     Lua's stack check fails: "stack overflow (too many results)".
//
// Where C's result is undefined, the store gives what gcc's x86-64 code
// gives (a Debian or Docker Redis build): a double out of range, or NaN,
// packed as an integer or taken as unpack's position or c0's length (a
// truncating conversion whose out-of-range result is the "integer
// indefinite", 1<<63; to unsigned, values from 2^63 to 2^64 and beyond
// through a subtraction of 2^63), and the sign extension of a signed
// integer of size 0 or over 8 bytes (a shift by size*8-1, taken mod 64 by
// the CPU). An arm64 build may answer otherwise there; the tests hold the
// store to those answers only on amd64.
//
// Argument errors name the function as Lua 5.1 does from the call site
// ('pack', a local's name, '?' under pcall); a method call (struct:pack)
// is not told apart from a field call (Lua 5.1 says "calling 'pack' on
// bad self").

const (
	structMaxIntSize = 32        // MAXINTSIZE
	structMaxAlign   = 8         // MAXALIGN: the padding of a double after a char
	structMaxStack   = 8000      // LUAI_MAXCSTACK, which luaL_checkstack checks
	cIntMax          = 1<<31 - 1 // INT_MAX, getnum's bound
)

func structLib(L *lua.LState) *lua.LTable {
	t := L.CreateTable(0, 3)
	t.RawSetString("pack", L.NewFunction(structPack))
	t.RawSetString("unpack", L.NewFunction(structUnpack))
	t.RawSetString("size", L.NewFunction(structSize))
	return t
}

// structHeader is the C code's Header: the byte order and the alignment.
type structHeader struct {
	little bool
	align  uint64
}

func defaultStructHeader() structHeader { return structHeader{little: true, align: 1} }

// structFormat is a format being read, as the C code's const char **fmt.
type structFormat struct {
	s string
	i int
}

func (f *structFormat) more() bool { return f.i < len(f.s) }

func (f *structFormat) next() byte {
	c := f.s[f.i]
	f.i++
	return c
}

// luaLError raises msg as luaL_error does: with the position of the
// function that called the running Go function, when that is a Lua
// function.
func luaLError(L *lua.LState, format string, args ...any) {
	L.Error(lua.LString(where(L, 1)+fmt.Sprintf(format, args...)), 0)
}

// luaArgError raises luaL_argerror's "bad argument #n to 'name' (msg)",
// the name being the running function's as its call site gives it.
func luaArgError(L *lua.LState, n int, msg string) {
	luaLError(L, "bad argument #%d to '%s' (%s)", n, calledName(L), msg)
}

// calledName is the name Lua 5.1's getfuncname gives the running Go
// function: the name of the expression called (a field's key, a local's
// or a global's name), "?" when it was called by a Go function (pcall)
// or by an expression without a name.
func calledName(L *lua.LState) string {
	dbg, ok := L.GetStack(0)
	if !ok {
		return "?"
	}
	if _, err := L.GetInfo("n", dbg, lua.LNil); err != nil {
		return "?"
	}
	switch name := dbg.Name; {
	case name == "" || name == "(anonymous)" || name == "main chunk" || strings.HasPrefix(name, "<"):
		return "?"
	default:
		return name
	}
}

// argTypeName is luaL_typename of argument n: "no value" past the last,
// but "nil" in pack (past the arguments, the C code has pushed a nil).
func argTypeName(L *lua.LState, n int, pack bool) string {
	if n > L.GetTop() && !(pack && n > 1) {
		return "no value"
	}
	return typeName(L.Get(n))
}

// structCheckString is luaL_checklstring: a string, or a number written
// "%.14g".
func structCheckString(L *lua.LState, n int, pack bool) string {
	switch v := L.Get(n).(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return numberString(v)
	}
	luaArgError(L, n, "string expected, got "+argTypeName(L, n, pack))
	return ""
}

// structCheckNumber is luaL_checknumber (pack's: see argTypeName): a
// number, or a string that reads as one.
func structCheckNumber(L *lua.LState, n int) float64 {
	if x, ok := toNumber(L.Get(n)); ok {
		return float64(x)
	}
	luaArgError(L, n, "number expected, got "+argTypeName(L, n, true))
	return 0
}

// structFormatArg is the format, argument 1, up to its first NUL (the C
// code reads it as a C string).
func structFormatArg(L *lua.LState) *structFormat {
	s := structCheckString(L, 1, false)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return &structFormat{s: s}
}

// getnum reads the digits at the format's position, df if there are none.
func getnum(L *lua.LState, f *structFormat, df int) int {
	if !f.more() || !isDigit(f.s[f.i]) {
		return df
	}
	a := 0
	for f.more() && isDigit(f.s[f.i]) {
		d := int(f.s[f.i] - '0')
		if a > cIntMax/10 || a*10 > cIntMax-d {
			luaLError(L, "integral size overflow")
		}
		a = a*10 + d
		f.i++
	}
	return a
}

// optsize is the size of option opt (0 for the options without one).
func optsize(L *lua.LState, opt byte, f *structFormat) uint64 {
	switch opt {
	case 'B', 'b':
		return 1
	case 'H', 'h':
		return 2
	case 'L', 'l', 'T', 'd':
		return 8
	case 'f':
		return 4
	case 'x':
		return 1
	case 'c':
		return uint64(getnum(L, f, 1))
	case 'i', 'I':
		sz := getnum(L, f, 4)
		if sz > structMaxIntSize {
			luaLError(L, "integral size %d is larger than limit of %d", sz, structMaxIntSize)
		}
		return uint64(sz)
	}
	return 0
}

// gettoalign is the padding before an option of size size at position n.
func gettoalign(n uint64, h *structHeader, opt byte, size uint64) uint64 {
	if size == 0 || opt == 'c' {
		return 0
	}
	if size > h.align {
		size = h.align
	}
	return (size - (n & (size - 1))) & (size - 1)
}

// controloptions handles the options that are not values: ' ', '>', '<'
// and '!'; anything else is an invalid option.
func controloptions(L *lua.LState, opt byte, f *structFormat, h *structHeader) {
	switch opt {
	case ' ':
	case '>':
		h.little = false
	case '<':
		h.little = true
	case '!':
		a := getnum(L, f, structMaxAlign)
		if a <= 0 || a&(a-1) != 0 {
			luaLError(L, "alignment %d is not a power of 2", a)
		}
		h.align = uint64(a)
	default:
		luaArgError(L, 1, "invalid format option '"+string([]byte{opt})+"'")
	}
}

func isStructInteger(opt byte) bool {
	switch opt {
	case 'b', 'B', 'h', 'H', 'l', 'L', 'T', 'i', 'I':
		return true
	}
	return false
}

// cvttsd2si is x86-64's truncating conversion of a double to a 64-bit
// integer, C's (long)x there: NaN and values out of range give the
// "integer indefinite", math.MinInt64 (C leaves them undefined).
func cvttsd2si(x float64) int64 {
	if x >= -0x1p63 && x < 0x1p63 {
		return int64(x)
	}
	return math.MinInt64
}

// cToUint64 is C's (unsigned long)x as gcc compiles it for x86-64: below
// 2^63 (and NaN) a truncating conversion, from 2^63 one of x-2^63 with the
// top bit flipped (so that 2^64 and beyond, and +inf, give 0).
func cToUint64(x float64) uint64 {
	if x >= 0x1p63 {
		return uint64(cvttsd2si(x-0x1p63)) ^ 1<<63
	}
	return uint64(cvttsd2si(x))
}

// putUint appends the low size bytes of v in the order given (bytes past
// the eighth are zeros).
func putUint(b []byte, v uint64, little bool, size int) []byte {
	buf := make([]byte, size)
	for i := range size {
		j := i
		if !little {
			j = size - 1 - i
		}
		buf[j] = byte(v)
		v >>= 8
	}
	return append(b, buf...)
}

// getUint reads size bytes in the order given as the C code does: into a
// 64-bit integer, so that only the last 8 bytes read stay.
func getUint(b []byte, little bool, size int) uint64 {
	var l uint64
	for i := range size {
		j := i
		if little {
			j = size - 1 - i
		}
		l = l<<8 | uint64(b[j])
	}
	return l
}

// getinteger is the C code's getinteger: the value as a double.
func getinteger(b []byte, little, signed bool, size int) float64 {
	l := getUint(b, little, size)
	if !signed {
		return float64(l)
	}
	mask := ^uint64(0) << (uint(size*8-1) & 63) // x86-64 takes a shift count mod 64
	if l&mask != 0 {
		l |= mask
	}
	return float64(int64(l))
}

// structPack is struct.pack(fmt, ...).
func structPack(L *lua.LState) int {
	f := structFormatArg(L)
	h := defaultStructHeader()
	arg := 2
	var total uint64
	var b []byte
	for f.more() {
		opt := f.next()
		size := optsize(L, opt, f)
		toalign := gettoalign(total, &h, opt, size)
		total += toalign
		for ; toalign > 0; toalign-- {
			b = append(b, 0)
		}
		switch {
		case isStructInteger(opt):
			n := structCheckNumber(L, arg)
			arg++
			var v uint64
			if n < 0 {
				v = uint64(cvttsd2si(n))
			} else {
				v = cToUint64(n)
			}
			b = putUint(b, v, h.little, int(size))
		case opt == 'x':
			b = append(b, 0)
		case opt == 'f':
			n := structCheckNumber(L, arg)
			arg++
			b = putUint(b, uint64(math.Float32bits(float32(n))), h.little, 4)
		case opt == 'd':
			n := structCheckNumber(L, arg)
			arg++
			b = putUint(b, math.Float64bits(n), h.little, 8)
		case opt == 'c' || opt == 's':
			s := structCheckString(L, arg, true)
			arg++
			if size == 0 {
				size = uint64(len(s))
			}
			if uint64(len(s)) < size {
				luaArgError(L, arg, "string too short") // arg: already the next one, as in C
			}
			b = append(b, s[:size]...)
			if opt == 's' {
				b = append(b, 0)
				size++
			}
		default:
			controloptions(L, opt, f, &h)
		}
		total += size
	}
	L.Push(lua.LString(b))
	return 1
}

// structUnpack is struct.unpack(fmt, data [, pos]).
func structUnpack(L *lua.LState) int {
	f := structFormatArg(L)
	data := structCheckString(L, 2, false)
	ld := uint64(len(data))
	pos := uint64(1)
	if L.GetTop() >= 3 && L.Get(3) != lua.LNil {
		n, ok := toNumber(L.Get(3))
		if !ok {
			luaArgError(L, 3, "number expected, got "+argTypeName(L, 3, false))
		}
		pos = uint64(cvttsd2si(float64(n))) // lua_tointeger, then a size_t
	}
	if pos == 0 {
		luaArgError(L, 3, "offset must be 1 or greater")
	}
	pos--
	nargs := L.GetTop()
	h := defaultStructHeader()
	var res []lua.LValue
	for f.more() {
		opt := f.next()
		size := optsize(L, opt, f)
		pos += gettoalign(pos, &h, opt, size)
		if !(size <= ld && pos <= ld-size) {
			luaArgError(L, 2, "data string too short")
		}
		if nargs+len(res)+2 > structMaxStack {
			luaLError(L, "stack overflow (too many results)")
		}
		switch {
		case isStructInteger(opt):
			signed := opt >= 'a' && opt <= 'z'
			res = append(res, lua.LNumber(getinteger([]byte(data[pos:pos+size]), h.little, signed, int(size))))
		case opt == 'x':
		case opt == 'f':
			bits := uint32(getUint([]byte(data[pos:pos+4]), h.little, 4))
			res = append(res, lua.LNumber(float64(math.Float32frombits(bits))))
		case opt == 'd':
			bits := getUint([]byte(data[pos:pos+8]), h.little, 8)
			res = append(res, lua.LNumber(math.Float64frombits(bits)))
		case opt == 'c':
			if size == 0 {
				var prev lua.LNumber
				ok := false
				if len(res) > 0 {
					prev, ok = toNumber(res[len(res)-1])
				}
				if !ok {
					luaLError(L, "format 'c0' needs a previous size")
				}
				size = cToUint64(float64(prev))
				res = res[:len(res)-1]
				if !(size <= ld && pos <= ld-size) {
					luaArgError(L, 2, "data string too short")
				}
			}
			res = append(res, lua.LString(data[pos:pos+size]))
		case opt == 's':
			e := strings.IndexByte(data[pos:], 0)
			if e < 0 {
				luaLError(L, "unfinished string in data")
			}
			size = uint64(e) + 1
			res = append(res, lua.LString(data[pos:pos+uint64(e)]))
		default:
			controloptions(L, opt, f, &h)
		}
		pos += size
	}
	for _, v := range res {
		L.Push(v)
	}
	L.Push(lua.LNumber(float64(int64(pos + 1)))) // lua_pushinteger: a ptrdiff_t
	return len(res) + 1
}

// structSize is struct.size(fmt).
func structSize(L *lua.LState) int {
	f := structFormatArg(L)
	h := defaultStructHeader()
	var pos uint64
	for f.more() {
		opt := f.next()
		size := optsize(L, opt, f)
		pos += gettoalign(pos, &h, opt, size)
		if opt == 's' {
			luaArgError(L, 1, "option 's' has no fixed size")
		} else if opt == 'c' && size == 0 {
			luaArgError(L, 1, "option 'c0' has no fixed size")
		}
		if !isAlnum(opt) {
			controloptions(L, opt, f, &h)
		}
		pos += size
	}
	L.Push(lua.LNumber(float64(int64(pos))))
	return 1
}
