package main

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// TestSetBands drives a key of two bands (a daily window of requests, a
// bucket of tokens) through set by band name, for a bucket and a window,
// refusals that change nothing (an unknown band, a change of mode that
// would switch another stored band, a band on a unit the code does not
// charge), a band added, a policy file with --replace and one on stdin, and
// compares pacer's text with testdata/bands.golden. After each change the
// limit in force is checked through admin: the stored bands over the
// code's, the code's others kept.
func TestSetBands(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.limiter()
	code := reserve.Policy{
		{Name: "requests", Window: reserve.Window{N: 500, Length: 24 * time.Hour}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 0.01, Burst: 1000}},
	}
	for range 3 {
		if _, err := l.ReserveN(ctx, reserve.Request{Key: "llm", Policy: code, Cost: reserve.Cost{"requests": 1, "tokens": 100}}); err != nil {
			t.Fatal(err)
		}
	}
	f.waitSource("llm", "code")
	if err := l.Close(); err != nil { // no heartbeat changes Redis from now on
		t.Fatal(err)
	}

	var n normalizer
	n.replace(f.prefix, "<PREFIX>")
	var text transcript
	step := func(code int, args ...string) {
		t.Helper()
		before := f.snapshot()
		r := f.pacer(args...)
		if r.code != code || (code == 0) != (r.stderr == "") {
			t.Errorf("pacer %q: exit %d, stderr %q; want %d", args, r.code, r.stderr, code)
		}
		if after := f.snapshot(); code != 0 && !maps.Equal(before, after) {
			t.Errorf("pacer %q failed and changed Redis:\nbefore %v\nafter  %v", args, before, after)
		}
		text.add(args, r, n.text)
	}
	inForce := func(want, stored string) {
		t.Helper()
		st, err := f.admin.Status(ctx, "llm")
		if err != nil || st.Limit != want || st.StoredLimit != stored {
			t.Errorf("Status(llm): limit %q, stored %q, %v; want %q, %q", st.Limit, st.StoredLimit, err, want, stored)
		}
	}
	const sample = "-sample=200ms"

	step(0, "status", "llm", sample)
	step(0, "set", "llm", "--band", "tokens", "--rate", "0.005", "--burst", "500", "--reason", "tier 2", "--who", "ops")
	inForce("requests: 500 per 24h0m0s; tokens: 0.005/s, burst 500", "tokens: 0.005/s, burst 500")
	step(0, "set", "llm", "--band", "requests", "--n", "400", "--window", "24h", "--reason", "fewer calls a day", "--who", "ops")
	inForce("requests: 400 per 24h0m0s; tokens: 0.005/s, burst 500", "tokens: 0.005/s, burst 500; requests: 400 per 24h0m0s")
	step(0, "status", "llm", sample)

	step(1, "set", "llm", "--band", "tokenz", "--rate", "1", "--burst", "1", "--reason", "a typo", "--who", "ops")
	step(1, "set", "llm", "--band", "tokens", "--rate", "1", "--burst", "1", "--shadow", "--reason", "try", "--who", "ops")
	step(1, "set", "llm", "--band", "images", "--add", "--rate", "1", "--burst", "1", "--reason", "a unit nobody charges", "--who", "ops")

	step(0, "set", "llm", "--band", "hourly", "--add", "--unit", "requests", "--n", "100", "--window", "1h", "--origin", "2026-01-01T00:30:00Z",
		"--reason", "the provider's hourly quota", "--who", "ops")
	inForce("requests: 400 per 24h0m0s; tokens: 0.005/s, burst 500; hourly: 100 per 1h0m0s from 1970-01-01T00:30:00Z (requests)",
		"tokens: 0.005/s, burst 500; requests: 400 per 24h0m0s; hourly: 100 per 1h0m0s from 1970-01-01T00:30:00Z (requests)")
	step(0, "set", "llm", "--file", "testdata/policy.txt", "--replace", "--reason", "tier 3", "--who", "ops")
	inForce("requests: 500 per 24h0m0s; tokens: 0.02/s, burst 2000", "tokens: 0.02/s, burst 2000")
	f.stdin = "requests: 450 per 24h0m0s; hourly: 90 per 1h0m0s (requests)\n"
	text.WriteString("(stdin: " + strings.TrimSpace(f.stdin) + ")\n")
	step(0, "set", "llm", "--file", "-", "--add", "--reason", "from a script", "--who", "ops")
	f.stdin = ""
	inForce("requests: 450 per 24h0m0s; tokens: 0.02/s, burst 2000; hourly: 90 per 1h0m0s (requests)",
		"tokens: 0.02/s, burst 2000; requests: 450 per 24h0m0s; hourly: 90 per 1h0m0s (requests)")
	step(0, "status", "llm", sample)
	step(0, "history", "llm")

	h, err := f.admin.History(ctx, "llm")
	if err != nil || len(h) != 5 {
		t.Fatalf("History(llm) = %d changes, %v; want 5, none for the refused", len(h), err)
	}
	golden(t, "bands.golden", text.String())
}

// TestOpsBandsBlock: the transcript docs/ops.md shows under "Setting
// bands" is lines of testdata/bands.golden (TestSetBands), and its policy
// file is testdata/policy.txt.
func TestOpsBandsBlock(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ops.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "bands.golden"))
	if err != nil {
		t.Fatal(err)
	}
	const marker = "<!-- lines of cmd/pacer/testdata/bands.golden: TestOpsBandsBlock -->\n```\n"
	_, block, ok := strings.Cut(string(doc), marker)
	block, _, ok2 := strings.Cut(block, "\n```\n")
	if !ok || !ok2 || block == "" {
		t.Fatalf("docs/ops.md has no block after %q", marker)
	}
	lines := strings.Split(string(want), "\n")
	for _, l := range strings.Split(block, "\n") {
		if !slices.Contains(lines, l) {
			t.Errorf("docs/ops.md shows %q, which is no line of testdata/bands.golden", l)
		}
	}
	file, err := os.ReadFile(filepath.Join("testdata", "policy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	indented := "  ```\n  " + strings.ReplaceAll(strings.TrimSuffix(string(file), "\n"), "\n", "\n  ") + "\n  ```\n"
	if !strings.Contains(string(doc), indented) {
		t.Errorf("docs/ops.md does not show testdata/policy.txt as\n%s", indented)
	}
}
