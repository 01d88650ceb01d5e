package main

import (
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// TestPolicyFileRoundTrip: a policy as status prints it (Policy.String),
// one band a line or all on one, reads back as the same policy (the same
// stored text), and so does the stored text form itself.
func TestPolicyFileRoundTrip(t *testing.T) {
	eight := time.Date(2026, 1, 1, 8, 0, 0, 0, time.UTC)
	for _, pol := range []reserve.Policy{
		reserve.Limit{Rate: 10, Burst: 5}.Policy(),
		{{Name: "requests", Window: reserve.Window{N: 500, Length: time.Minute}}, {Name: "tokens", Limit: reserve.Limit{Rate: 500, Burst: 30000}}},
		{{Name: "rpm", Unit: "requests", Limit: reserve.Limit{Rate: 0.0001, Burst: 1}},
			{Name: "daily", Unit: "requests", Window: reserve.Window{N: 10000, Length: 24 * time.Hour, Origin: eight}},
			{Name: "huge", Unit: "points", Limit: reserve.Limit{Rate: 1e9, Burst: 1 << 30}},
			{Name: "odd.name_1-x", Window: reserve.Window{N: 1.5, Length: 1500 * time.Millisecond, Origin: time.UnixMicro(7)}}},
		{{Name: "daily", Unit: "requests", Window: reserve.Window{N: 1500, Calendar: reserve.Day, Location: mustLoad(t, "America/Los_Angeles")}},
			{Name: "weekly", Unit: "requests", Window: reserve.Window{N: 9000, Calendar: reserve.Week}},
			{Name: "monthly", Unit: "requests", Window: reserve.Window{N: 30000, Calendar: reserve.Month, Location: mustLoad(t, "Australia/Lord_Howe")}}},
	} {
		want, err := pol.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range []string{
			pol.String(),
			"# a comment\n\n" + strings.ReplaceAll(pol.String(), "; ", "  # one band\n") + "\n",
			string(want),
		} {
			got, err := parsePolicy(text)
			if err != nil {
				t.Errorf("parsePolicy(%q) = %v", text, err)
				continue
			}
			if g, _ := got.MarshalText(); string(g) != string(want) {
				t.Errorf("parsePolicy(%q) = %s, want %s", text, g, want)
			}
		}
	}
}

// TestPolicyFileBad: what a policy file may not hold, each with the line
// that is wrong.
func TestPolicyFileBad(t *testing.T) {
	for _, tt := range []struct{ text, want string }{
		{"", "no band"},
		{"# nothing but a comment\n", "no band"},
		{"tokens 500/s", `line 1: "tokens 500/s": want "NAME: RATE/s, burst BURST"`},
		{"a: 1/s, burst 1\nb: 1/s burst 1", `line 2: "b: 1/s burst 1": want`},
		{"a: fast/s, burst 1", `rate "fast": want a number`},
		{"a: 1/s, burst 1.5", `burst "1.5": want a whole number`},
		{"a: 0/s, burst 1", `reserve: rate must be positive`},
		{"a: NaN/s, burst 1", `reserve: rate must be positive`},
		{"a: 1/s, burst 0", `reserve: burst must be`},
		{"a: 5 per soon", `window "soon": want a duration`},
		{"a: many per 1m", `N "many": want a number`},
		{"a: 0.5 per 1m", `reserve: a window needs N >= 1`},
		{"a: 5 per 0s", `reserve: a window needs N >= 1`},
		{"a: 5 per 1m from yesterday", `from "yesterday": want a time`},
		{"a: 5/fortnight UTC", `want "NAME: RATE/s`},
		{"a: 5/day Mars/Olympus", `zone "Mars/Olympus": want a tz database name`},
		{"a: 5/day Local", `zone "Local": want a tz database name`},
		{"a: 0/day UTC", `reserve: a window needs N >= 1`},
		{"a: 1/s, burst 1; a: 2/s, burst 1", `two bands named "a"`},
		{"a b: 1/s, burst 1", `want "NAME: RATE/s`},
		{"a: 1/s, burst 1 (two units)", `want "NAME: RATE/s`},
		{"2 a a b 1 1", `reserve: invalid policy`},
	} {
		_, err := parsePolicy(tt.text)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parsePolicy(%q) = %v, want an error containing %q", tt.text, err, tt.want)
		}
	}
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
