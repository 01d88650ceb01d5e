package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/reserve"
)

// TestEndToEnd drives a key through set, status, shadow mode, pause,
// resume, unset and history, with a Limiter of the fleet reserving in this
// process, and compares pacer's text and JSON with testdata/e2e*.golden
// (volatile parts normalized). The limits are slow (one permit per 10,000 s)
// so that the queues the goldens show do not drift while the test runs.
func TestEndToEnd(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.limiter()
	code := reserve.Limit{Rate: 0.0001, Burst: 2}
	f.reserve(l, "api", code, 5) // 2 at once, 3 queued: the last slot 30,000 s away
	f.reserve(l, "other", reserve.Limit{Rate: 0.0001, Burst: 1}, 1)
	f.waitSource("api", "code")
	f.waitSource("other", "code")
	fleet, err := f.admin.Fleet(ctx)
	if err != nil || len(fleet) != 1 || fleet[0].Mode != "redis" {
		t.Fatalf("Fleet() = %+v, %v; want the one Limiter, on Redis", fleet, err)
	}

	var n normalizer
	n.replace(f.srv.URL, "<URL>")
	n.replace(f.prefix, "<PREFIX>")
	n.replace(fleet[0].ID, "<ID>")
	var text, js transcript
	check := func(args []string, r result) {
		t.Helper()
		if r.code != 0 || r.stderr != "" {
			t.Errorf("pacer %q: exit %d, stderr %q; want 0 and nothing", args, r.code, r.stderr)
		}
	}
	step := func(args ...string) {
		t.Helper()
		r := f.pacer(args...)
		check(args, r)
		text.add(args, r, n.text)
	}
	stepJSON := func(args ...string) {
		t.Helper()
		r := f.pacer(args...)
		check(args, r)
		js.add(args, r, n.json)
	}
	const sample = "-sample=200ms" // nothing reserves meanwhile: 0/s exactly

	step("status", sample)
	stepJSON("status", "--json", sample)
	step("status", "a*", sample)
	// A pattern that matches nothing exits 1 naming the prefixes seen
	// (TestBadInput has its text; a shared REDIS_URL server may hold
	// others, so it is not in the transcript).
	if r := f.pacer("status", "nothing*", sample); r.code != exitRuntime || !strings.Contains(r.stderr, `no key matches "nothing*"`) || r.stdout != "" {
		t.Errorf("pacer status nothing*: exit %d, stdout %q, stderr %q; want 1, nothing, no key matches", r.code, r.stdout, r.stderr)
	}

	step("set", "api", "--rate", "0.0002", "--burst", "1", "--reason", "provider halved us (ticket 7)", "--who", "ops")
	st, err := f.admin.Status(ctx, "api")
	if err != nil || st.Source != "stored" || st.Shadow || st.Limit != "permits: 0.0002/s, burst 1" {
		t.Errorf("after set: Status(api) = %+v, %v; want the stored 0.0002/s, burst 1, enforced", st, err)
	}
	step("status", "api", sample)

	// Flags before the positional argument, in --name=value form.
	step("set", "--shadow", "--rate=0.0001", "--burst=1", "--who=ops", "--reason=try one permit at a time", "api")
	f.reserve(l, "api", code, 3) // the code's limit, counted against the shadow one
	st, err = f.admin.Status(ctx, "api")
	if err != nil || st.Source != "code" || !st.Shadow || st.ShadowFigures == nil || st.ShadowFigures.Calls != 3 {
		t.Errorf("after set --shadow: Status(api) = %+v, %v; want the code's limit in force, 3 calls counted", st, err)
	}
	step("status", "api", sample)
	stepJSON("status", "api", "--json", sample)

	step("pause", "--reason", "incident 42", "api", "90s", "--who", "ops")
	st, err = f.admin.Status(ctx, "api")
	if err != nil || st.Paused <= 0 {
		t.Errorf("after pause: Status(api) = %+v, %v; want paused", st, err)
	}
	step("status", "api", sample)
	stepJSON("status", "api", "--json", sample)
	step("resume", "api", "--reason", "provider is back", "--who", "ops")
	step("status", "api", sample)
	step("unset", "api", "--reason", "back to the code's", "--who", "ops")
	step("status", "api", sample)
	step("weight", "api", "acme", "3", "--reason", "acme pays for three", "--who", "ops")
	st, err = f.admin.Status(ctx, "api")
	if err != nil || st.Weights["acme"] != 3 {
		t.Errorf("after weight: Status(api) = %+v, %v; want acme's weight 3", st, err)
	}
	step("status", "api", sample)
	stepJSON("status", "api", "--json", sample)
	step("weight", "api", "acme", "--unset", "--reason", "back to the code's weight", "--who", "ops")
	step("history", "api")
	stepJSON("history", "api", "--json")
	step("history", "other")
	stepJSON("history", "other", "--json")

	// The global flags after the command and its argument.
	args := []string{"status", "other", sample, "-redis", f.srv.URL, "-prefix", f.prefix}
	r := f.run(args...)
	check(args, r)
	text.add(args, r, n.text)

	h, err := f.admin.History(ctx, "api")
	if err != nil || len(h) != 7 {
		t.Fatalf("History(api) = %d changes, %v; want 7", len(h), err)
	}
	for i, want := range []string{"weight", "weight", "unset", "resume", "pause 1m30s", "set", "set"} {
		if h[i].Op != want || h[i].Who != "ops" {
			t.Errorf("History(api)[%d] = %+v; want op %q by ops", i, h[i], want)
		}
	}
	golden(t, "e2e.golden", text.String())
	golden(t, "e2e_json.golden", js.String())
}

// TestDefaults: without -redis pacer uses $REDIS_URL, and a change made
// without --who is recorded as $USER@host.
func TestDefaults(t *testing.T) {
	f := newFixture(t)
	f.env = append(f.env, "USER=alice", "REDIS_URL="+f.srv.URL)
	r := f.run("-prefix", f.prefix, "set", "k", "--rate", "1", "--burst", "1", "--reason", "r")
	if r.code != 0 {
		t.Fatalf("set: exit %d, %q", r.code, r.stderr)
	}
	if want := `pacer: note: no Limiter has used or reported key "k" under prefix`; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("set of a key nobody uses: stderr %q, want a note starting %q", r.stderr, want)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.admin.History(context.Background(), "k")
	if err != nil || len(h) != 1 || h[0].Who != "alice@"+host {
		t.Fatalf("History(k) = %+v, %v; want one change by alice@%s", h, err, host)
	}
}

// TestHelp: help, -h and --help list every command; help COMMAND and
// COMMAND -h give its flags. None needs Redis.
func TestHelp(t *testing.T) {
	f := &fixture{t: t, env: childEnv()}
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}} {
		r := f.run(args...)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("pacer %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
		for _, cmd := range commands {
			if !strings.Contains(r.stdout, "\n  pacer "+cmd.name+" ") || !strings.Contains(r.stdout, "\n  "+cmd.name+" ") {
				t.Errorf("pacer %q does not list %s:\n%s", args, cmd.name, r.stdout)
			}
		}
	}
	for _, args := range [][]string{{"help", "set"}, {"set", "-h"}, {"set", "api", "--help"}} {
		r := f.run(args...)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: pacer set KEY") || !strings.Contains(r.stdout, "-rate") || !strings.Contains(r.stdout, "-redis") {
			t.Errorf("pacer %q: exit %d, stdout %q; want set's usage and flags", args, r.code, r.stdout)
		}
	}
}
