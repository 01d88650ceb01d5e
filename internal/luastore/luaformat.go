package luastore

import (
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// luaFormat is Lua 5.1's string.format, which hands each conversion to C's
// sprintf. gopher-lua passes the format to Go's fmt, which differs: "%d"
// of a string prints the string, "%x" of a negative number a minus sign,
// "%c" a UTF-8 rune, "%s" of a number Go's shortest form, the infinities
// "+Inf". The scripts write their state with string.format ("%d", "%.3f",
// "%.17g"), so here each conversion is C's.
func luaFormat(L *lua.LState) int {
	fmtStr := checkLString(L, 1, "format")
	var b strings.Builder
	arg := 1
	for i := 0; i < len(fmtStr); i++ {
		c := fmtStr[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(fmtStr) {
			L.RaiseError("invalid option '%%' to 'format'")
		}
		if fmtStr[i] == '%' {
			b.WriteByte('%')
			continue
		}
		arg++
		if arg > L.GetTop() {
			L.RaiseError("bad argument #%d to 'format' (no value)", arg)
		}
		// The spec: flags, width (2 digits at most), precision (the same).
		start := i
		for i < len(fmtStr) && strings.IndexByte("-+ #0", fmtStr[i]) >= 0 {
			i++
		}
		if i-start > 5 {
			L.RaiseError("invalid format (repeated flags)")
		}
		flags := fmtStr[start:i]
		width, prec := -1, -1
		j := i
		for i < len(fmtStr) && isDigit(fmtStr[i]) {
			i++
		}
		if i-j > 2 {
			L.RaiseError("invalid format (width or precision too long)")
		}
		if i > j {
			width, _ = strconv.Atoi(fmtStr[j:i])
		}
		if i < len(fmtStr) && fmtStr[i] == '.' {
			i++
			j = i
			for i < len(fmtStr) && isDigit(fmtStr[i]) {
				i++
			}
			if i-j > 2 {
				L.RaiseError("invalid format (width or precision too long)")
			}
			prec, _ = strconv.Atoi(fmtStr[j:i])
		}
		if i >= len(fmtStr) {
			L.RaiseError("invalid option '%%' to 'format'")
		}
		switch verb := fmtStr[i]; verb {
		case 'c':
			ch := string([]byte{byte(cInt64(checkLNumber(L, arg, "format")))})
			s := pad(ch, width, strings.IndexByte(flags, '-') >= 0)
			if k := strings.IndexByte(s, 0); k >= 0 {
				s = s[:k] // Lua adds C's buffer up to its NUL
			}
			b.WriteString(s)
		case 'd', 'i':
			b.WriteString(goFormat(cInt64(checkLNumber(L, arg, "format")), flags, width, prec, 'd'))
		case 'o', 'u', 'x', 'X':
			// The sign flags mean nothing to C's unsigned conversions.
			f := strings.NewReplacer("+", "", " ", "").Replace(flags)
			v := cUint64(checkLNumber(L, arg, "format"))
			if verb == 'u' {
				verb = 'd'
			}
			b.WriteString(goFormat(v, f, width, prec, verb))
		case 'e', 'E', 'f', 'F', 'g', 'G':
			b.WriteString(cFloat(checkLNumber(L, arg, "format"), flags, width, prec, verb))
		case 'q':
			writeQuoted(&b, checkLString(L, arg, "format"))
		case 's':
			s := checkLString(L, arg, "format")
			if prec < 0 && len(s) >= 100 {
				b.WriteString(s) // Lua adds a long string as it is
				break
			}
			// C's %s stops at a NUL, and counts bytes.
			if k := strings.IndexByte(s, 0); k >= 0 {
				s = s[:k]
			}
			if prec >= 0 && len(s) > prec {
				s = s[:prec]
			}
			b.WriteString(pad(s, width, strings.IndexByte(flags, '-') >= 0))
		default:
			L.RaiseError("invalid option '%%%c' to 'format'", verb)
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

// writeQuoted writes s as Lua 5.1's "%q" does.
func writeQuoted(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '\n':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\000`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
