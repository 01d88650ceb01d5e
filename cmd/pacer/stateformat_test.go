package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/reserve"
)

// TestStateFormat: pacer format shows the fleet's setting, the members and
// the keys by format; "format 3" switches the fleet, "format 2" and
// "format 1" switch it back and rewrite the keys; bad command lines change
// nothing.
func TestStateFormat(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 1)

	r := f.pacer("format")
	if r.code != 0 || !strings.Contains(r.stdout, "The fleet writes state format 2") ||
		!strings.Contains(r.stdout, "Keys: 0 in format 1, 1 in format 2, 0 in format 3.") ||
		!strings.Contains(r.stdout, "Members: 0 write format 1, 1 write format 2, 0 write format 3; 0 of v0.1.0") {
		t.Fatalf("pacer format = %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	bad := []struct {
		args   []string
		stderr string
	}{
		{[]string{"format", "4", "--reason", "x"}, `format: "4": want 1, 2 or 3`},
		{[]string{"format", "2"}, `format: --reason is required`},
		{[]string{"format", "2", "1", "--reason", "x"}, `format: unexpected argument "1"`},
		{[]string{"format", "2", "--reason", "x", "--json"}, `format: --json shows the status`},
		{[]string{"format", "1", "--reason", "x", "--wait", "0s"}, `format: --wait 0s: want a positive duration`},
	}
	for _, tc := range bad {
		r := f.pacer(tc.args...)
		if r.code != exitUsage || r.stdout != "" || !regexp.MustCompile(tc.stderr).MatchString(r.stderr) {
			t.Errorf("pacer %s = %d, stdout %q, stderr %q; want %d and %s", strings.Join(tc.args, " "), r.code, r.stdout, r.stderr, exitUsage, tc.stderr)
		}
	}
	// (The Limiter's heartbeats change the fleet's records: only the
	// setting and its history must be untouched.)
	if n, err := f.srv.Client.Exists(ctx, f.prefix+"{limiters}:format", f.prefix+"{limiters}:format:history").Result(); err != nil || n != 0 {
		t.Fatalf("bad command lines changed the setting: %d, %v", n, err)
	}

	r = f.pacer("format", "3", "--reason", "fleet upgraded", "--who", "ops")
	if r.code != 0 || !strings.Contains(r.stdout, "The fleet writes state format 3") {
		t.Fatalf("pacer format 3 = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// The Limiter writes format 3 from its next heartbeat.
	deadline := time.Now().Add(30 * time.Second)
	for {
		f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 1)
		v, err := f.srv.Client.Get(ctx, f.prefix+"{api}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if layout.StateFormat(v) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still format 2 after the switch: %q", v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	r = f.pacer("format", "1", "--reason", "rollback", "--who", "ops")
	if r.code != 0 || !strings.Contains(r.stdout, "1 keys rewritten in format 1") {
		t.Fatalf("pacer format 1 = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	v, err := f.srv.Client.Get(ctx, f.prefix+"{api}").Result()
	if err != nil || !strings.HasPrefix(v, "1 ") {
		t.Fatalf("after format 1: %q, %v", v, err)
	}
	r = f.pacer("format")
	if r.code != 0 || !strings.Contains(r.stdout, "3 -> 1  by ops: rollback (1 keys rewritten)") ||
		!strings.Contains(r.stdout, "2 -> 3  by ops: fleet upgraded") {
		t.Fatalf("pacer format = %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
