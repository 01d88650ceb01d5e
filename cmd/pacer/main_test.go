package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/buildflags"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/internal/syncbuf"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from this run")

// bin is the pacer binary TestMain builds (with -race when the tests run
// with it), run by every test as a subprocess.
var bin string

func TestMain(m *testing.M) {
	flag.Parse()
	dir, err := os.MkdirTemp("", "pacer-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "pacer")
	args := append([]string{"build", "-o", bin}, buildflags.Same()...) // -race and the test's own build flags
	build := exec.Command(goTool(), append(args, ".")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintf(os.Stderr, "building pacer: %v\n", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 && !leakFree() {
		code = 1
	}
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// leakFree waits a little for the tests' goroutines (Limiters, readers of
// a child's output) to end, and reports those that do not.
func leakFree() bool {
	var left []string
	for range 100 {
		left = left[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if (strings.Contains(g, "pacer/reserve.") || strings.Contains(g, "cmd/pacer.")) &&
				!strings.Contains(g, ".leakFree()") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Fprintf(os.Stderr, "goroutines left running after the tests:\n%s\n", strings.Join(left, "\n\n"))
	return false
}

// A result is one run of the binary.
type result struct {
	stdout, stderr string
	code           int
}

// fixture is a Redis and a key prefix of a test's own, and pacer pointed
// at them.
type fixture struct {
	t      *testing.T
	srv    *redistest.Server
	prefix string
	admin  *admin.Client
	env    []string // the child's environment: no REDIS_URL unless added
	stdin  string   // the child's stdin
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	srv := redistest.New(t)
	prefix := redistest.Prefix(t)
	ac, err := admin.New(srv.Client, admin.Options{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, srv: srv, prefix: prefix, admin: ac, env: childEnv()}
	// The slow limits below keep keys for hours: remove them (a shared
	// REDIS_URL server is never flushed).
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := srv.Client.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			_ = srv.Client.Del(ctx, keys...).Err()
		}
	})
	return f
}

// childEnv is the environment of the binary: this one's without
// REDIS_URL and PACER_WEB_TOKEN; with -race, without the race runtime's
// 1 s sleep at exit.
func childEnv() []string {
	var env []string
	gorace := "atexit_sleep_ms=0"
	for _, e := range os.Environ() {
		switch {
		case strings.HasPrefix(e, "REDIS_URL="), strings.HasPrefix(e, tokenEnv+"="):
		case strings.HasPrefix(e, "GORACE="):
			gorace += " " + strings.TrimPrefix(e, "GORACE=")
		default:
			env = append(env, e)
		}
	}
	return append(env, "GORACE="+gorace)
}

// global are the global flags that point pacer at the fixture.
func (f *fixture) global() []string { return []string{"-redis", f.srv.URL, "-prefix", f.prefix} }

// pacer runs the binary with the global flags first, then args.
func (f *fixture) pacer(args ...string) result {
	f.t.Helper()
	return f.run(append(f.global(), args...)...)
}

// run runs the binary with exactly args.
func (f *fixture) run(args ...string) result {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = f.env
	cmd.Stdin = strings.NewReader(f.stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	case err != nil:
		f.t.Fatalf("pacer %s: %v", strings.Join(args, " "), err)
	}
	return r
}

// limiter returns a Limiter of the fleet under test, heartbeating often so
// that its code's limits and its mode show at once; closed on cleanup.
func (f *fixture) limiter() *reserve.Limiter {
	f.t.Helper()
	l, err := reserve.New(f.srv.Client, reserve.Options{
		KeyPrefix:         f.prefix,
		HeartbeatInterval: 50 * time.Millisecond,
		CallTimeout:       10 * time.Second, // a loaded machine must not send it pacing locally
		Logger:            slog.New(slog.DiscardHandler),
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = l.Close() })
	return l
}

// reserve reserves n permits one by one on key.
func (f *fixture) reserve(l *reserve.Limiter, key string, lim reserve.Limit, n int) {
	f.t.Helper()
	for range n {
		if _, err := l.Reserve(context.Background(), key, lim); err != nil {
			f.t.Fatalf("Reserve(%q, %v) = %v", key, lim, err)
		}
	}
}

// waitSource waits until key's limit in force comes from source.
func (f *fixture) waitSource(key, source string) {
	f.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := f.admin.Status(context.Background(), key)
		if err == nil && st.Source == source {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("Status(%q) = %+v, %v; want source %q", key, st, err, source)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// snapshot is every Redis key under the prefix with its type, value (DUMP)
// and whether it expires: what bad input must leave as it was.
func (f *fixture) snapshot() map[string]string {
	f.t.Helper()
	ctx := context.Background()
	c := f.srv.Client
	keys, err := c.Keys(ctx, f.prefix+"*").Result()
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		typ, err1 := c.Type(ctx, k).Result()
		dump, err2 := c.Dump(ctx, k).Result()
		ttl, err3 := c.PTTL(ctx, k).Result()
		if err := errors.Join(err1, err2, err3); err != nil {
			f.t.Fatalf("snapshot %s: %v", k, err)
		}
		out[k] = fmt.Sprintf("%s %q expires=%v", typ, dump, ttl > 0)
	}
	return out
}

// normalizer replaces what changes from run to run by placeholders.
type normalizer struct {
	exact []string // old, new pairs
}

var (
	timeRe = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	// A duration as time.Duration prints it.
	dur       = `-?(?:\d+h)?(?:\d+m)?\d+(?:\.\d+)?(?:s|ms|µs|ns)`
	durAfter  = regexp.MustCompile(`\b(in|wait|queue) ` + dur)
	durBefore = regexp.MustCompile(dur + ` (ago|left)`)
	nsRe      = regexp.MustCompile(`"(\w+)_ns": (-?\d+)`)
	floatRe   = regexp.MustCompile(`"(queued|spare|balance)": (-?[\d.e+-]+)`)
)

func (n *normalizer) replace(old, new string) { n.exact = append(n.exact, old, new) }

// text normalizes pacer's text output: the prefix, ids, timestamps, and
// the durations that tell how long ago or until something.
func (n *normalizer) text(s string) string {
	s = strings.NewReplacer(n.exact...).Replace(s)
	s = timeRe.ReplaceAllString(s, "<TIME>")
	s = durAfter.ReplaceAllString(s, "$1 <DUR>")
	return durBefore.ReplaceAllString(s, "<DUR> $1")
}

// json normalizes pacer's JSON: as text, and the nonzero durations (ns)
// other than the sample's; queued, spare and balance, which drift as time
// passes, rounded to a tenth (the tests' limits, one permit per 10,000 s,
// keep them within 0.05 of a whole number for over 8 minutes).
func (n *normalizer) json(s string) string {
	s = strings.NewReplacer(n.exact...).Replace(s)
	s = timeRe.ReplaceAllString(s, "<TIME>")
	s = nsRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := nsRe.FindStringSubmatch(m)
		if sub[1] == "sample" || sub[2] == "0" {
			return m
		}
		return fmt.Sprintf(`"%s_ns": <NS>`, sub[1])
	})
	return floatRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := floatRe.FindStringSubmatch(m)
		v, err := strconv.ParseFloat(sub[2], 64)
		if err != nil {
			return m
		}
		return fmt.Sprintf(`"%s": %s`, sub[1], strconv.FormatFloat(math.Round(v*10)/10, 'f', 1, 64))
	})
}

// transcript records commands and what they printed, for a golden file.
type transcript struct {
	bytes.Buffer
}

func (tr *transcript) add(args []string, r result, norm func(string) string) {
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = a
		if a == "" || strings.ContainsAny(a, " *?'\"\\") {
			quoted[i] = strconv.Quote(a)
		}
	}
	fmt.Fprintf(tr, "$ pacer %s\n%s", norm(strings.Join(quoted, " ")), norm(r.stdout))
	if r.stderr != "" {
		fmt.Fprintf(tr, "--- stderr\n%s", norm(r.stderr))
	}
	fmt.Fprintf(tr, "--- exit %d\n\n", r.code)
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if got != string(want) {
		gotPath := filepath.Join(t.TempDir(), name)
		_ = os.WriteFile(gotPath, []byte(got), 0o644)
		t.Errorf("output differs from %s (got in %s; -update rewrites it):\n%s", path, gotPath, lineDiff(string(want), got))
	}
}

// lineDiff lists the lines that differ, by position.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := range max(len(w), len(g)) {
		var a, c string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			c = g[i]
		}
		if a != c {
			fmt.Fprintf(&b, "line %d:\n  want %q\n  got  %q\n", i+1, a, c)
		}
	}
	return b.String()
}

// waitFor waits until cond holds on what r has read, or fails.
func waitFor(t *testing.T, what string, out *syncbuf.Buffer, cond func(string) bool) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		s := out.String()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s; read so far:\n%q", what, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// copyOut copies r to a syncbuf.Buffer from a goroutine; the returned channel
// closes when r ends.
func copyOut(r io.Reader) (*syncbuf.Buffer, chan struct{}) {
	out := &syncbuf.Buffer{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(out, r)
	}()
	return out, done
}

// redisKeys lists the Redis keys under the prefix, sorted.
func redisKeys(t *testing.T, c *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := c.Keys(context.Background(), prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	return keys
}
