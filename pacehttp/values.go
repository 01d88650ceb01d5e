package pacehttp

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"time"
)

// The values of the headers ParseAdvice reads, each parser taking a value
// already trimmed of spaces and tabs, and the time the response came at.

var (
	errNegative = errors.New("negative")
	errNumber   = errors.New("not a non-negative decimal number")
)

// parseRetryAfter reads Retry-After: delta-seconds (a decimal is accepted)
// or an HTTP-date, which gives the time from now to it, or 0 once past.
func parseRetryAfter(v string, now time.Time) (time.Duration, error) {
	d, err := parseDecimal(v, time.Second)
	if !errors.Is(err, errNumber) {
		return d, err
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, errors.New("neither delta-seconds nor an HTTP-date")
	}
	return until(t, now), nil
}

// parseMillis reads retry-after-ms: a decimal number of milliseconds.
func parseMillis(v string, _ time.Time) (time.Duration, error) {
	return parseDecimal(v, time.Millisecond)
}

// unixTimeFloor separates the two readings of a number of seconds in
// x-ratelimit-reset and RateLimit-Reset: below it (under 31.7 years, before
// September 2001) a delay, at or above it a Unix time.
const unixTimeFloor = 1_000_000_000 * time.Second

// parseDelayOrUnix reads a number of seconds: below unixTimeFloor a delay,
// at or above it a Unix time, which gives the time from now to it, or 0
// once past.
func parseDelayOrUnix(v string, now time.Time) (time.Duration, error) {
	d, err := parseDecimal(v, time.Second)
	if err != nil || d < unixTimeFloor {
		return d, err
	}
	return until(time.Unix(0, 0).Add(d), now), nil
}

// parseRFC3339 reads an RFC 3339 time, which gives the time from now to it,
// or 0 once past.
func parseRFC3339(v string, now time.Time) (time.Duration, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return 0, errors.New("not an RFC 3339 time")
	}
	return until(t, now), nil
}

// parseGoDuration reads a non-negative duration in time.ParseDuration's
// format. One too long for a Duration, which ParseDuration refuses, gives
// the longest Duration.
func parseGoDuration(v string, _ time.Time) (time.Duration, error) {
	if strings.HasPrefix(v, "-") {
		return 0, errNegative
	}
	d, err := time.ParseDuration(v)
	if err == nil {
		return d, nil
	}
	if durationSyntax(v) {
		return math.MaxInt64, nil
	}
	return 0, errors.New("not a duration such as 1s, 6m0s or 12ms")
}

// durationSyntax reports whether s has the form time.ParseDuration reads,
// [-+]?([0-9]*(\.[0-9]*)?[a-z]+)+ or [-+]?0, with a known unit in each
// element, whatever its size. ParseDuration refuses such an s only when it
// is too long for a Duration.
func durationSyntax(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "0" {
		return true
	}
	if s == "" {
		return false
	}
	for s != "" {
		i := 0
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		digits := i > 0
		if i < len(s) && s[i] == '.' {
			i++
			j := i
			for i < len(s) && isDigit(s[i]) {
				i++
			}
			digits = digits || i > j
		}
		if !digits {
			return false
		}
		j := i
		for i < len(s) && s[i] != '.' && !isDigit(s[i]) {
			i++
		}
		switch s[j:i] {
		case "ns", "us", "µs", "μs", "ms", "s", "m", "h":
		default:
			return false
		}
		s = s[i:]
	}
	return true
}

// parseCount reads a count, a non-negative decimal, and returns its whole
// part (math.MaxInt64 for one too long).
func parseCount(v string) (int64, error) {
	if strings.HasPrefix(v, "-") {
		return 0, errNegative
	}
	whole, _, ok := splitDecimal(v)
	if !ok {
		return 0, errNumber
	}
	var n int64
	for i := 0; i < len(whole); i++ {
		d := int64(whole[i] - '0')
		if n > (math.MaxInt64-d)/10 {
			return math.MaxInt64, nil
		}
		n = n*10 + d
	}
	return n, nil
}

// parseDecimal reads a non-negative decimal number of units: digits, then
// optionally a point and more digits. unit must be a power of ten
// nanoseconds (time.Second, time.Millisecond); digits finer than a
// nanosecond are dropped, and a value too long for a Duration gives the
// longest one. A number that is well formed but for a leading '-' gives
// errNegative, anything else malformed errNumber.
func parseDecimal(v string, unit time.Duration) (time.Duration, error) {
	if rest, ok := strings.CutPrefix(v, "-"); ok {
		if _, _, ok := splitDecimal(rest); ok {
			return 0, errNegative
		}
		return 0, errNumber
	}
	whole, frac, ok := splitDecimal(v)
	if !ok {
		return 0, errNumber
	}
	var n time.Duration // whole units, saturated
	for i := 0; i < len(whole); i++ {
		n = addSat(mulSat(n, 10), time.Duration(whole[i]-'0'))
	}
	d := mulSat(n, unit)
	scale := unit
	for i := 0; i < len(frac) && scale > 1; i++ {
		scale /= 10
		d = addSat(d, time.Duration(frac[i]-'0')*scale)
	}
	return d, nil
}

// splitDecimal splits v, of the form 1*DIGIT [ "." 1*DIGIT ], into its
// whole and fractional digits; ok is false for any other form.
func splitDecimal(v string) (whole, frac string, ok bool) {
	whole, frac, point := strings.Cut(v, ".")
	if whole == "" || !allDigits(whole) || point && (frac == "" || !allDigits(frac)) {
		return "", "", false
	}
	return whole, frac, true
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isDigit(s[i]) {
			return false
		}
	}
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// until returns the time from now to t, or 0 when t is not after now.
// time.Time.Sub saturates, so a t centuries away gives the longest Duration.
func until(t, now time.Time) time.Duration {
	return max(t.Sub(now), 0)
}

// mulSat returns a×b for non-negative a and b, or the longest Duration when
// that overflows.
func mulSat(a, b time.Duration) time.Duration {
	if b != 0 && a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// addSat returns a+b for non-negative a and b, or the longest Duration when
// that overflows.
func addSat(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
