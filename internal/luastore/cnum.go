package luastore

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Numbers as C reads and prints them. Redis's Lua 5.1 reads numbers with
// strtod and prints them with printf ("%.14g" in tostring, "%.17g" for a
// number handed to redis.call), and Redis itself parses scores and ranges
// with strtod: this file holds those rules once, in Go, for glibc on
// x86-64 and arm64.

// isCSpace reports whether c is white space for C's isspace in the "C"
// locale.
func isCSpace(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r')
}

// strtod parses the longest prefix of s that C's strtod (glibc) takes:
// leading white space, a sign, then a decimal or hexadecimal number,
// "inf", "infinity" or "nan" (any case, "nan(...)" included). It returns
// the value, how many bytes it took (0: no number, v is 0), and whether
// the value overflowed or underflowed to zero (errno ERANGE).
func strtod(s string) (v float64, n int, erange bool) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	start := i
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	rest := s[i:]
	switch {
	case hasPrefixFold(rest, "inf"):
		n = i + 3
		if hasPrefixFold(rest, "infinity") {
			n = i + 8
		}
		return math.Copysign(math.Inf(1), sign(neg)), n, false
	case hasPrefixFold(rest, "nan"):
		n = i + 3
		bits := uint64(0x7ff8000000000000) // glibc's NAN
		if j := strings.IndexByte(rest[3:], ')'); len(rest) > 3 && rest[3] == '(' && j > 0 {
			ok := true
			for _, c := range []byte(rest[4 : 3+j]) {
				if !isAlnum(c) && c != '_' {
					ok = false
					break
				}
			}
			if ok {
				n = i + 3 + j + 1
				if mant, all := strtoull0(rest[4 : 3+j]); all {
					bits |= mant & (1<<51 - 1) // glibc's SET_MANTISSA: below the quiet bit
				}
			}
		}
		return math.Copysign(math.Float64frombits(bits), sign(neg)), n, false
	}
	if len(rest) > 2 && rest[0] == '0' && (rest[1] == 'x' || rest[1] == 'X') {
		if end, nonzero := scanHex(rest[2:]); end > 0 {
			text := s[start:i+2+end] + "p0"
			if strings.ContainsAny(rest[2:2+end], "pP") {
				text = s[start : i+2+end]
			}
			f, err := strconv.ParseFloat(text, 64)
			return f, i + 2 + end, rangeErr(f, err, nonzero)
		}
		// "0x" without a hexadecimal digit: the "0" alone.
		return math.Copysign(0, sign(neg)), i + 1, false
	}
	end, nonzero := scanDecimal(rest)
	if end == 0 {
		return 0, 0, false
	}
	f, err := strconv.ParseFloat(s[start:i+end], 64)
	return f, i + end, rangeErr(f, err, nonzero)
}

// strtoull0 is C's strtoull(s, &end, 0) on the characters of a
// "nan(...)" (letters, digits and '_'): the value (saturated on
// overflow), and whether it took all of s, as glibc's strtod requires
// before it puts the value in a NaN's mantissa.
func strtoull0(s string) (uint64, bool) {
	base, i := uint64(10), 0
	switch {
	case len(s) > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && hexDigit(s[2]) >= 0:
		base, i = 16, 2
	case len(s) > 0 && s[0] == '0':
		base = 8
	}
	var v uint64
	over := false
	start := i
	for ; i < len(s); i++ {
		d := uint64(hexDigit(s[i]))
		if hexDigit(s[i]) < 0 || d >= base {
			break
		}
		if v > (math.MaxUint64-d)/base {
			over = true
		}
		v = v*base + d
	}
	if over {
		v = math.MaxUint64
	}
	return v, i == len(s) && i > start
}

// hexDigit is c's value as a hexadecimal digit, -1 if it is none.
func hexDigit(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

func sign(neg bool) float64 {
	if neg {
		return -1
	}
	return 1
}

func rangeErr(f float64, err error, nonzero bool) bool {
	return err != nil || math.IsInf(f, 0) || (f == 0 && nonzero)
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func isAlnum(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// scanDecimal returns the length of the decimal number (digits, a point,
// digits, an exponent) at the start of s, 0 if there is none, and whether
// a digit of it is not zero.
func scanDecimal(s string) (int, bool) {
	i, digits, nonzero := 0, 0, false
	for i < len(s) && isDigit(s[i]) {
		nonzero = nonzero || s[i] != '0'
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isDigit(s[i]) {
			nonzero = nonzero || s[i] != '0'
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return 0, false
	}
	return i + scanExponent(s[i:], 'e'), nonzero
}

// scanHex is scanDecimal for the part of a hexadecimal number after "0x",
// its exponent a "p" and decimal digits.
func scanHex(s string) (int, bool) {
	i, digits, nonzero := 0, 0, false
	for i < len(s) && isHex(s[i]) {
		nonzero = nonzero || s[i] != '0'
		i, digits = i+1, digits+1
	}
	if i < len(s) && s[i] == '.' {
		i++
		for i < len(s) && isHex(s[i]) {
			nonzero = nonzero || s[i] != '0'
			i, digits = i+1, digits+1
		}
	}
	if digits == 0 {
		return 0, false
	}
	return i + scanExponent(s[i:], 'p'), nonzero
}

// scanExponent returns the length of an exponent ("e-12") at the start of
// s, 0 if there is none (an "e" without digits is not one).
func scanExponent(s string, letter byte) int {
	if len(s) < 2 || (s[0]|0x20) != letter {
		return 0
	}
	i := 1
	if s[i] == '+' || s[i] == '-' {
		i++
	}
	j := i
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	if j == i {
		return 0
	}
	return j
}

// strtoul is C's strtoul for base 2 to 36: white space, a sign, an
// optional "0x" in base 16, then digits; it returns the value (wrapped as
// C does for a "-"; ULONG_MAX on overflow) and how many bytes it took.
func strtoul(s string, base int) (uint64, int) {
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	if base == 16 && len(s) > i+2 && s[i] == '0' && (s[i+1]|0x20) == 'x' && digitValue(s[i+2]) < 16 {
		i += 2
	}
	var v uint64
	overflow := false
	j := i
	for ; j < len(s); j++ {
		d := digitValue(s[j])
		if d >= base {
			break
		}
		if v > (math.MaxUint64-uint64(d))/uint64(base) {
			overflow = true
		}
		v = v*uint64(base) + uint64(d)
	}
	if j == i {
		return 0, 0
	}
	if overflow {
		return math.MaxUint64, j
	}
	if neg {
		v = -v
	}
	return v, j
}

func digitValue(c byte) int {
	switch {
	case isDigit(c):
		return int(c - '0')
	case c >= 'a' && c <= 'z':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'Z':
		return int(c-'A') + 10
	}
	return 99
}

// cInt64 converts f to an integer as C's (long long) cast does on x86-64:
// toward zero, and LLONG_MIN for NaN and values out of range.
func cInt64(f float64) int64 {
	if f != f || f >= 0x1p63 || f < -0x1p63 {
		return math.MinInt64
	}
	return int64(f)
}

// cUint64 converts f as C's (unsigned long) cast does with GCC on x86-64.
// (cvttsd2si below 2^63, else of f - 2^63 with the top bit flipped).
func cUint64(f float64) uint64 {
	if f >= 0x1p63 {
		return uint64(cInt64(f-0x1p63)) ^ 1<<63
	}
	return uint64(cInt64(f))
}

// cFloat formats f as C's printf does with the conversion verb (e, E, f,
// F, g or G), the flags ("-+ #0") and the width and precision (-1: none).
// For finite numbers Go's fmt gives C's output; the infinities and NaN
// are written as glibc writes them ("inf", "-nan").
func cFloat(f float64, flags string, width, prec int, verb byte) string {
	if !math.IsInf(f, 0) && !math.IsNaN(f) {
		return goFormat(f, flags, width, prec, verb)
	}
	s := "inf"
	if math.IsNaN(f) {
		s = "nan"
	}
	if verb >= 'A' && verb <= 'Z' {
		s = strings.ToUpper(s)
	}
	switch {
	case math.Signbit(f):
		s = "-" + s
	case strings.IndexByte(flags, '+') >= 0:
		s = "+" + s
	case strings.IndexByte(flags, ' ') >= 0:
		s = " " + s
	}
	return pad(s, width, strings.IndexByte(flags, '-') >= 0)
}

// goFormat is fmt.Sprintf with a verb built from the parts.
func goFormat(v any, flags string, width, prec int, verb byte) string {
	b := make([]byte, 0, 16)
	b = append(b, '%')
	b = append(b, flags...)
	if width >= 0 {
		b = strconv.AppendInt(b, int64(width), 10)
	}
	if prec >= 0 {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(prec), 10)
	}
	b = append(b, verb)
	return fmt.Sprintf(string(b), v)
}

// pad pads s with spaces to width bytes, on the left or (left) the right.
func pad(s string, width int, left bool) string {
	if len(s) >= width {
		return s
	}
	fill := strings.Repeat(" ", width-len(s))
	if left {
		return s + fill
	}
	return fill + s
}

// formatG returns f as C's "%.<prec>g" prints it: tostring uses 14
// digits, a number handed to redis.call or a score in a reply 17.
func formatG(f float64, prec int) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return cFloat(f, "", -1, prec, 'g')
	}
	return strconv.FormatFloat(f, 'g', prec, 64)
}
