package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/reserve"
)

// TestSetCalendar: `pacer set --per day --tz America/Los_Angeles` stores a
// calendar window on a key whose code has none; the fleet's calls learn
// its zone (the script asks for the zone's table, and the call is sent
// again with it, as every later one on the key) and are held to it;
// status shows the band as
// "1500/day America/Los_Angeles", with what it used; a policy file reads
// the same form back.
func TestSetCalendar(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.limiter()
	code := reserve.Policy{{Name: "rps", Unit: "requests", Limit: reserve.Limit{Rate: 1000, Burst: 1000}}}
	req := reserve.Request{Key: "gemini", Policy: code, Cost: reserve.Cost{"requests": 1}}
	if _, err := l.ReserveN(ctx, req); err != nil {
		t.Fatal(err)
	}
	f.waitSource("gemini", "code")
	r := f.pacer("set", "gemini", "--band", "daily", "--add", "--unit", "requests", "--n", "3", "--per", "day", "--tz", "America/Los_Angeles",
		"--reason", "the provider's requests per day", "--who", "ops")
	if r.code != 0 {
		t.Fatalf("set: exit %d: %s", r.code, r.stderr)
	}
	st, err := f.admin.Status(ctx, "gemini")
	if err != nil || st.StoredLimit != "daily: 3/day America/Los_Angeles (requests)" {
		t.Fatalf("Status: stored %q, %v", st.StoredLimit, err)
	}
	// The Limiter's first call learns the zone (the script asks for its
	// table, and the call is sent again with it); then 3 a day (the band
	// counts from the set: the call before it had no daily band).
	granted := 0
	for range 5 {
		_, err := l.TryReserveN(ctx, req, 0)
		var wt *reserve.WaitTooLongError
		switch {
		case err == nil:
			granted++
		case errors.As(err, &wt):
			if wt.Band != "daily" {
				t.Errorf("refused by %q, want daily", wt.Band)
			}
		default:
			t.Fatal(err)
		}
	}
	if granted != 3 {
		t.Errorf("%d calls granted of 5, want 3 (the day's quota)", granted)
	}
	r = f.pacer("status", "gemini", "-sample=200ms")
	if r.code != 0 || !strings.Contains(r.stdout, "3/day America/Los_Angeles") {
		t.Errorf("status: exit %d\n%s%s\nwant the band shown as 3/day America/Los_Angeles", r.code, r.stdout, r.stderr)
	}
	t.Logf("status:\n%s", r.stdout)
	// A policy file in status's form.
	f.stdin = "daily: 2/week Europe/Paris (requests)\n"
	r = f.pacer("set", "gemini", "--file", "-", "--reason", "weekly now", "--who", "ops")
	f.stdin = ""
	if r.code != 0 {
		t.Fatalf("set --file: exit %d: %s", r.code, r.stderr)
	}
	st, err = f.admin.Status(ctx, "gemini")
	if err != nil || st.StoredLimit != "daily: 2/week Europe/Paris (requests)" {
		t.Errorf("Status after the file: stored %q, %v", st.StoredLimit, err)
	}
}
