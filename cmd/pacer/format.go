package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// human rounds d to what a person reads: ms under a second, tenths of a
// second under a minute, seconds under an hour, minutes beyond.
func human(d time.Duration) time.Duration {
	a := d.Abs()
	switch {
	case a == 0:
		return 0
	case a < time.Millisecond:
		return d.Round(time.Microsecond)
	case a < time.Second:
		return d.Round(time.Millisecond)
	case a < time.Minute:
		return d.Round(100 * time.Millisecond)
	case a < time.Hour:
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

// ago says when t was, seen at now: "3.2s ago", or "in 2s" if after now
// (clocks disagree).
func ago(now, t time.Time) string {
	d := human(now.Sub(t))
	if d < 0 {
		return "in " + (-d).String()
	}
	return d.String() + " ago"
}

// stamp is a time as status prints it, to the second.
func stamp(t time.Time) string {
	return t.UTC().Truncate(time.Second).Format(time.RFC3339)
}

// num formats a figure with one decimal.
func num(f float64) string {
	if math.IsNaN(f) {
		return "unknown"
	}
	return strconv.FormatFloat(f, 'f', 1, 64)
}

// clean makes text from Redis safe to print on a terminal: control
// characters (an escape sequence in a reason) are shown escaped.
func clean(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// orNone is s, or "none" for "".
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return clean(s)
}

// writeJSON writes v indented, ending with a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("json: %w", err)
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
