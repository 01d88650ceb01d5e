package reserve

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Bounded growth (issue 21, finding 18): what a Limiter keeps per key, and
// what the fleet keeps in Redis for operators, stays bounded however many
// keys come and go.

// TestKeysBounded: past maxKeys keys, the least recently used idle ones
// go, and new keys are still reported (before the keys' states, a Limiter
// stopped reporting new keys at 10,000, and pacer status and pause then
// called them unknown).
func TestKeysBounded(t *testing.T) {
	l := &Limiter{clock: systemClockValue}
	s, err := Limit{Rate: 1, Burst: 1}.Policy().compile()
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxKeys + 50 {
		l.reportUse(fmt.Sprint("k", i), s)
	}
	time.Sleep(time.Millisecond)
	l.reportUse("newest", s)
	l.sweepKeys()
	if n := len(l.states.m); n > maxKeys {
		t.Fatalf("%d keys kept, want at most %d", n, maxKeys)
	}
	if l.states.peek("newest") == nil {
		t.Fatal("the newest key is not kept")
	}
	due := l.reportsDue(time.Now(), nil)
	if len(due) != 2*reportBatch {
		t.Fatalf("%d reports due, want a batch of %d keys", len(due)/2, reportBatch)
	}
}

// TestPoliciesPruned: the fleet's hash of the policies Limiters report
// drops a key no Limiter has reported for keep_ms, while Limiters go on
// heartbeating (before, it was never pruned while any Limiter lived, and
// each restart added up to 10,000 entries).
func TestPoliciesPruned(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	k := prefix + "{limiters}"
	keys := layout.FleetKeys(prefix)
	hb := redis.NewScript(lua.Heartbeat)
	now := time.Now().UnixMilli()
	run := func(args ...any) {
		t.Helper()
		base := []any{"me", "redis", fmt.Sprint(now, " 0"), 2000, 60_000, 1250, 500, "", ""}
		if err := hb.Run(ctx, s.Client, keys, append(base, args...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	run("old", fmt.Sprint(now-10_000, " 1 permits permits b 1 1"), "fresh", fmt.Sprint(now, " 1 permits permits b 1 1"))
	run()
	got, err := s.Client.HKeys(ctx, k+":policies").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] != "fresh" {
		t.Fatalf("policies kept %v, want [fresh] (keep_ms 500, old reported 10 s ago)", got)
	}
}

// TestStableRanks: a member keeps its rank while it lives, whoever joins or
// leaves: a rank by id order shifted every member after one that joined or
// left, and members whose views differed for a heartbeat could pace
// locally on one rank's lattice instants (the combination runner saw it
// around a process killed and started again). A newcomer takes the
// smallest free rank, or the one it asks for (its own, after Redis lost
// the fleet).
func TestStableRanks(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	keys := layout.FleetKeys(redistest.Prefix(t))
	hb := redis.NewScript(lua.Heartbeat)
	beat := func(id, want string) (rank, n int64) {
		t.Helper()
		res, err := hb.Run(ctx, s.Client, keys, id, "redis", fmt.Sprint(time.Now().UnixMilli(), " 0"), 60_000, 60_000, 60_000, 60_000, want).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return res[3].(int64), res[4].(int64)
	}
	for i, id := range []string{"m", "c", "x"} { // not in id order
		if r, _ := beat(id, ""); r != int64(i) {
			t.Fatalf("%s joined with rank %d, want %d", id, r, i)
		}
	}
	if r, n := beat("a", ""); r != 3 || n != 4 {
		t.Fatalf("a joined with rank %d of %d, want 3 of 4 (no other rank moves)", r, n)
	}
	if err := hb.Run(ctx, s.Client, keys, "m", "check", "c", "").Err(); err != nil { // c exited
		t.Fatal(err)
	}
	for id, want := range map[string]int64{"m": 0, "x": 2, "a": 3} {
		if r, n := beat(id, ""); r != want || n != 4 {
			t.Errorf("%s has rank %d of %d after c left, want %d of 4", id, r, n, want)
		}
	}
	if r, _ := beat("b", ""); r != 1 {
		t.Errorf("b took rank %d, want the free 1", r)
	}
	if r, _ := beat("z", "0"); r != 4 {
		t.Errorf("z asked for 0 (taken) and got %d, want the smallest free, 4", r)
	}
}

// TestReportsDeduplicated: heartbeat.lua does not rewrite a report of the
// same policy younger than keep_ms / 3, whichever member made it (issue 43:
// 4 processes on 10,000 keys each wrote all 10,000, four times what the
// hash keeps); it writes a changed policy at once, and one older than
// keep_ms / 3.
func TestReportsDeduplicated(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	keys := layout.FleetKeys(prefix)
	now := time.Now().UnixMilli()
	run := func(id string, pairs ...any) {
		t.Helper()
		// keep_ms 30 s: a report younger than 10 s is fresh.
		base := []any{id, "redis", fmt.Sprint(now, " 0"), 2000, 60_000, 1250, 30_000, "", ""}
		if err := heartbeatScript.Run(ctx, s.Client, keys, append(base, pairs...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	held := func(key string) (string, float64) {
		t.Helper()
		v, err := s.Client.HGet(ctx, keys[2], key).Result()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		at, err := s.Client.ZScore(ctx, keys[5], key).Result()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return v, at
	}
	p, q := " 1 permits permits b 1 1", " 2 permits permits b 2 1"
	a := fmt.Sprint(now-5000, p)
	run("a", "same", a, "changed", a, "old", fmt.Sprint(now-12_000, p))
	run("b", "same", fmt.Sprint(now, p), "changed", fmt.Sprint(now, q), "old", fmt.Sprint(now, p), "new", fmt.Sprint(now, p))
	for key, want := range map[string]string{
		"same":    a,                  // a's, 5 s old: fresh, not rewritten
		"changed": fmt.Sprint(now, q), // another policy: written
		"old":     fmt.Sprint(now, p), // 12 s old: renewed
		"new":     fmt.Sprint(now, p), // none held
	} {
		v, at := held(key)
		ms, _, _ := strings.Cut(want, " ")
		if v != want || fmt.Sprint(int64(at)) != ms {
			t.Errorf("%s: held %q at %v, want %q at %s", key, v, int64(at), want, ms)
		}
	}
}

// TestReportsOnceAcrossFleet: of two Limiters using the same keys with the
// same policy, the second's heartbeat does not send the reports the first
// made fresh (it reads them first), and counts them reported; a heartbeat
// carries at most reportBatch reports.
func TestReportsOnceAcrossFleet(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	opts := Options{KeyPrefix: prefix, HeartbeatInterval: time.Hour, RequireRedis: true}
	a, err := New(s.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := New(s.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	sp, err := Limit{Rate: 1, Burst: 1}.Policy().compile()
	if err != nil {
		t.Fatal(err)
	}
	for i := range reportBatch + 10 {
		a.reportUse(fmt.Sprint("k", i), sp)
		b.reportUse(fmt.Sprint("k", i), sp)
	}
	if _, err := a.heartbeatOnce(ctx); err != nil {
		t.Fatal(err)
	}
	first, err := s.Client.HGetAll(ctx, layout.Policies(prefix)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != reportBatch {
		t.Fatalf("a's heartbeat wrote %d reports, want a batch of %d", len(first), reportBatch)
	}
	time.Sleep(2 * time.Millisecond) // b's reports carry a later ms
	if _, err := b.heartbeatOnce(ctx); err != nil {
		t.Fatal(err)
	}
	both, err := s.Client.HGetAll(ctx, layout.Policies(prefix)).Result()
	if err != nil {
		t.Fatal(err)
	}
	kept := 0
	for k, v := range first {
		if both[k] == v {
			kept++
		}
	}
	// b sends the 10 reports a did not send, and leaves a's as they are.
	if added := len(both) - len(first); kept != len(first) || added != 10 {
		t.Fatalf("after b's heartbeat: %d of a's %d reports kept, %d added; want all kept, 10 added", kept, len(first), added)
	}
	if due := b.reportsDue(time.Now(), nil); len(due) != 0 {
		t.Fatalf("b has %d reports due after its heartbeat, want none: a made the others fresh", len(due)/2)
	}
}

// scriptArgs is a go-redis hook that records the ARGV of every call of one
// script (by its SHA, or the script itself after a NOSCRIPT).
type scriptArgs struct {
	src, sha string
	mu       sync.Mutex
	calls    [][]any
}

func (h *scriptArgs) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptArgs) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) > 3 && (a[1] == h.sha || a[1] == h.src) {
			if nk, ok := a[2].(int); ok {
				h.mu.Lock()
				h.calls = append(h.calls, a[3+nk:])
				h.mu.Unlock()
			}
		}
		return next(ctx, cmd)
	}
}

func (h *scriptArgs) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestReportsInChunks: the reports due go after the heartbeat, reportChunk
// to a call of heartbeat.lua's "report" (a heartbeat carrying 100 held
// Redis up to 3.7 ms), and a report call writes the reports alone: the
// fleet's records are the heartbeat's. Bad arguments change nothing.
func TestReportsInChunks(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	o, err := redis.ParseURL(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries = -1, true, 1
	c := redis.NewClient(o)
	defer c.Close()
	h := &scriptArgs{src: lua.Heartbeat, sha: heartbeatScript.Hash()}
	c.AddHook(h)
	l, err := New(c, Options{KeyPrefix: prefix, HeartbeatInterval: time.Hour, RequireRedis: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sp, err := Limit{Rate: 1, Burst: 1}.Policy().compile()
	if err != nil {
		t.Fatal(err)
	}
	const keys = 2*reportChunk + 5
	for i := range keys {
		l.reportUse(fmt.Sprint("k", i), sp)
	}
	h.mu.Lock()
	h.calls = nil
	h.mu.Unlock()
	if _, err := l.heartbeatOnce(ctx); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	calls := h.calls
	h.mu.Unlock()
	var modes []string
	var pairs []int
	for _, a := range calls {
		modes = append(modes, fmt.Sprint(a[1]))
		pairs = append(pairs, max(len(a)-9, 0)/2)
	}
	if want := []string{"redis", "report", "report", "report"}; fmt.Sprint(modes) != fmt.Sprint(want) {
		t.Fatalf("calls %v, want %v", modes, want)
	}
	if want := []int{0, reportChunk, reportChunk, 5}; fmt.Sprint(pairs) != fmt.Sprint(want) {
		t.Fatalf("reports per call %v, want %v", pairs, want)
	}
	got, err := c.HLen(ctx, layout.Policies(prefix)).Result()
	if err != nil || got != keys {
		t.Fatalf("%d reports held (%v), want %d", got, err, keys)
	}

	// A report from another id: written, and no member added.
	fk := layout.FleetKeys(prefix)
	members := func() []string {
		m, err := c.ZRange(ctx, fk[0], 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	before := members()
	keep := fmt.Sprint(reportKeep.Milliseconds())
	if err := heartbeatScript.Run(ctx, c, fk, "stranger", "report", "", "", "60000", "", keep, "", "", "x1", fmt.Sprint(time.Now().UnixMilli())+" r 1/s b 1").Err(); err != nil {
		t.Fatal(err)
	}
	if after := members(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a report call changed the fleet: %v, was %v", after, before)
	}
	if v, _ := c.HGet(ctx, layout.Policies(prefix), "x1").Result(); !strings.HasSuffix(v, " r 1/s b 1") {
		t.Fatalf("the report was not written: %q", v)
	}
	// Bad arguments: an error, and nothing written.
	for _, args := range [][]any{
		{"stranger", "report", "", "", "60000", "", "", "", "", "x2", "1 r 1/s b 1"},         // no keep_ms
		{"stranger", "report", "", "", "60000", "", "-5", "", "", "x2", "1 r 1/s b 1"},       // keep_ms < 0
		{"stranger", "report", "", "", "60000", "", keep, "", "", "x2", "1 r 1/s b 1", "x3"}, // a key without its report
	} {
		err := heartbeatScript.Run(ctx, c, fk, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "PACER_ARG") {
			t.Fatalf("%v: %v, want PACER_ARG", args, err)
		}
	}
	if n, _ := c.HExists(ctx, layout.Policies(prefix), "x2").Result(); n {
		t.Fatal("a refused report call wrote a report")
	}
}
