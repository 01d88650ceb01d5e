package luastore

import (
	"math"
	"strings"
)

// How Redis reads numbers in command arguments (util.c).

// string2ll is Redis's strict integer parser: an optional "-", then digits
// without a leading zero (but "0"), nothing else, in range.
func string2ll(s string) (int64, bool) {
	if len(s) == 0 || len(s) >= 21 {
		return 0, false
	}
	if s == "0" {
		return 0, true
	}
	neg := false
	p := s
	if p[0] == '-' {
		neg, p = true, p[1:]
		if len(p) == 0 {
			return 0, false
		}
	}
	if p[0] < '1' || p[0] > '9' {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > math.MaxUint64/10 {
			return 0, false
		}
		v *= 10
		if v > math.MaxUint64-uint64(c-'0') {
			return 0, false
		}
		v += uint64(c - '0')
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}

// string2d is Redis's float parser for a score: strtod of the whole
// string, not empty, no leading space, no NaN, no overflow.
func string2d(s string) (float64, bool) {
	if len(s) == 0 || isCSpace(s[0]) || strings.IndexByte(s, 0) >= 0 {
		return 0, false
	}
	v, n, erange := strtod(s)
	if n != len(s) || (erange && (math.IsInf(v, 0) || v == 0)) || math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// scoreBound is one end of a score range (ZRANGEBYSCORE min max).
type scoreBound struct {
	v         float64
	exclusive bool
}

// parseScoreBound reads a range end as Redis's zslParseRange does: "("
// for an exclusive end, then strtod, which must take the whole (C) string
// ("" reads as 0), and no NaN.
func parseScoreBound(s string) (scoreBound, bool) {
	var b scoreBound
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	if len(s) > 0 && s[0] == '(' {
		b.exclusive, s = true, s[1:]
	}
	v, n, _ := strtod(s)
	if n != len(s) || math.IsNaN(v) {
		return b, false
	}
	b.v = v
	return b, true
}

// inRange reports whether score lies in [min, max] with their exclusions.
func inRange(score float64, min, max scoreBound) bool {
	if min.exclusive && score <= min.v || !min.exclusive && score < min.v {
		return false
	}
	if max.exclusive && score >= max.v || !max.exclusive && score > max.v {
		return false
	}
	return true
}
