package luastore

import (
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Lua 5.1's rules for numbers and strings, where gopher-lua has its own:
// gopher-lua prints numbers with Go's shortest form (Lua 5.1: "%.14g", so
// tostring(1/3) is "0.33333333333333" and tostring(123456789012345) is
// "1.2345678901234e+14"), reads "010" as octal and refuses "1e5" and "inf"
// in tonumber (Lua 5.1: strtod), and computes a % b with fmod (Lua 5.1:
// a - floor(a/b)*b, which differs in sign and for large or infinite
// operands). The environment (luaenv.go) installs the functions below in
// their place, and the compiler (rewrite.go) routes % and .. through them.

// numberString is Lua 5.1's tostring of a number: "%.14g", with glibc's
// "inf", "-inf", "nan" and "-nan".
func numberString(n lua.LNumber) string {
	return formatG(float64(n), 14)
}

// toNumber converts v as Lua 5.1's lua_tonumber does: a number as is, a
// string by str2number; ok is false for anything else.
func toNumber(v lua.LValue) (lua.LNumber, bool) {
	switch v := v.(type) {
	case lua.LNumber:
		return v, true
	case lua.LString:
		f, ok := str2number(string(v))
		return lua.LNumber(f), ok
	}
	return 0, false
}

// str2number is Lua 5.1's luaO_str2d: strtod on the string up to its first
// NUL, then nothing but white space.
func str2number(s string) (float64, bool) {
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	v, n, _ := strtod(s)
	if n == 0 {
		return 0, false
	}
	for ; n < len(s); n++ {
		if !isCSpace(s[n]) {
			return 0, false
		}
	}
	return v, true
}

// luaToString is Lua 5.1's tostring (the base library function).
func luaToString(L *lua.LState) int {
	v := L.CheckAny(1)
	switch v := v.(type) {
	case lua.LNumber:
		L.Push(lua.LString(numberString(v)))
	case lua.LString:
		L.Push(v)
	default:
		L.Push(L.ToStringMeta(v))
	}
	return 1
}

// luaToNumber is Lua 5.1's tonumber(e [, base]).
func luaToNumber(L *lua.LState) int {
	base := L.OptInt(2, 10)
	if base == 10 {
		v := L.CheckAny(1)
		if n, ok := toNumber(v); ok {
			L.Push(n)
			return 1
		}
		L.Push(lua.LNil)
		return 1
	}
	s := checkLString(L, 1, "tonumber")
	if base < 2 || base > 36 {
		L.ArgError(2, "base out of range")
	}
	n, used := strtoul(s, base)
	if used > 0 {
		for used < len(s) && isCSpace(s[used]) {
			used++
		}
		if used == len(s) {
			L.Push(lua.LNumber(float64(n)))
			return 1
		}
	}
	L.Push(lua.LNil)
	return 1
}

// luaMod is Lua 5.1's a % b on numbers: a - floor(a/b)*b.
func luaMod(a, b float64) float64 {
	p := float64(math.Floor(a/b) * b) // (a conversion: no fused multiply-add)
	return a - p
}

// arith computes a op b as Lua 5.1 does once both are numbers.
func arith(op string, a, b float64) float64 {
	switch op {
	case "__add":
		return a + b
	case "__sub":
		return a - b
	case "__mul":
		return a * b
	case "__div":
		return a / b
	case "__mod":
		return luaMod(a, b)
	case "__pow":
		return math.Pow(a, b)
	case "__unm":
		return -a
	}
	return math.NaN()
}

// arithMeta returns the metamethod for op that the environment puts on
// the string metatable: gopher-lua calls it for an arithmetic operation on
// a string (it tries the metamethod before its own conversion), and it
// converts both operands as Lua 5.1 does.
func arithMeta(op string) lua.LGFunction {
	return func(L *lua.LState) int {
		a := L.Get(1)
		b := a
		if op != "__unm" {
			b = L.Get(2)
		}
		x, ok1 := toNumber(a)
		y, ok2 := toNumber(b)
		if !ok1 || !ok2 {
			bad := a
			if ok1 {
				bad = b
			}
			L.RaiseError("attempt to perform arithmetic on a %s value", bad.Type().String())
		}
		L.Push(lua.LNumber(arith(op, float64(x), float64(y))))
		return 1
	}
}

// modFunc is what a % b compiles to (rewrite.go): Lua 5.1's modulo, with
// its coercion of strings and its error.
func modFunc(L *lua.LState) int {
	a, b := L.Get(1), L.Get(2)
	x, ok1 := toNumber(a)
	y, ok2 := toNumber(b)
	if ok1 && ok2 {
		L.Push(lua.LNumber(luaMod(float64(x), float64(y))))
		return 1
	}
	// A table with a __mod metamethod, as Lua 5.1 allows.
	for _, v := range []lua.LValue{a, b} {
		if v.Type() == lua.LTTable || v.Type() == lua.LTUserData {
			if mm := L.GetMetaField(v, "__mod"); mm.Type() == lua.LTFunction {
				L.Push(mm)
				L.Push(a)
				L.Push(b)
				L.Call(2, 1)
				return 1
			}
		}
	}
	bad := a
	if ok1 {
		bad = b
	}
	L.RaiseError("attempt to perform arithmetic on a %s value", bad.Type().String())
	return 0
}

// concatFunc is what each operand of .. that is not a string literal
// compiles to (rewrite.go): a number becomes its Lua 5.1 string ("%.14g");
// anything else is left to the concatenation, which takes strings and
// raises Lua's error for the rest.
func concatFunc(L *lua.LState) int {
	v := L.Get(1)
	if n, ok := v.(lua.LNumber); ok {
		L.Push(lua.LString(numberString(n)))
		return 1
	}
	L.Push(v)
	return 1
}

// checkLString returns argument n as a string the way luaL_checklstring
// does: a number is converted with "%.14g".
func checkLString(L *lua.LState, n int, fname string) string {
	switch v := L.Get(n).(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return numberString(v)
	default:
		L.RaiseError("bad argument #%d to '%s' (string expected, got %s)", n, fname, typeName(v))
	}
	return ""
}

// checkLNumber returns argument n as a number the way luaL_checknumber
// does: a string is converted by str2number.
func checkLNumber(L *lua.LState, n int, fname string) float64 {
	v := L.Get(n)
	if x, ok := toNumber(v); ok {
		return float64(x)
	}
	L.RaiseError("bad argument #%d to '%s' (number expected, got %s)", n, fname, typeName(v))
	return 0
}

// typeName is a value's type as Lua's error messages name it ("no value"
// for a missing argument is left to the caller: gopher-lua reads it as nil).
func typeName(v lua.LValue) string {
	return v.Type().String()
}

// stringArgs wraps a string library function so that its string
// arguments at the positions given, when numbers, reach it as Lua 5.1
// writes them ("%.14g") rather than as gopher-lua does.
func stringArgs(f lua.LGFunction, positions ...int) lua.LGFunction {
	return func(L *lua.LState) int {
		for _, i := range positions {
			if n, ok := L.Get(i).(lua.LNumber); ok {
				L.Replace(i, lua.LString(numberString(n)))
			}
		}
		return f(L)
	}
}

// numberArgs wraps a math library function so that its arguments, when
// strings, reach it as Lua 5.1 reads them (gopher-lua reads "010" as 8).
func numberArgs(f lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		for i := 1; i <= L.GetTop(); i++ {
			if s, ok := L.Get(i).(lua.LString); ok {
				if n, ok := str2number(string(s)); ok {
					L.Replace(i, lua.LNumber(n))
				}
			}
		}
		return f(L)
	}
}

// forNumFunc is what a bound of a numeric for loop that is not a literal
// compiles to (rewrite.go): a string becomes the number Lua 5.1 reads in
// it; anything else is left to the loop, which takes numbers only.
func forNumFunc(L *lua.LState) int {
	v := L.Get(1)
	if s, ok := v.(lua.LString); ok {
		if n, ok := str2number(string(s)); ok {
			L.Push(lua.LNumber(n))
			return 1
		}
	}
	L.Push(v)
	return 1
}
