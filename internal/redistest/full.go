package redistest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
)

// A FullCheck checks that a Redis at its maxmemory refuses each of pacer's
// scripts whole when the script would add memory there.
//
// Such a Redis (noeviction) refuses a script's first write that may add
// memory with OOM, but lets a script that has written anything already go
// on, removals included: a script that removes before it adds runs whole
// on a full Redis. Every client counts OOM as Redis unavailable and paces
// locally; a script that went through meanwhile tells it otherwise, and
// changes the key (the combination runner's seed 16: fair bookings went
// through when fair.lua first dropped a lapsed tenant, while the settles
// that would have moved their tenant's turns were refused).
//
// The check makes every script call of its server's clients twice, from
// the same keys: on a full Redis (maxmemory 1), then, the keys put back,
// with room, which is the call the client sees. If with room the script
// runs a command a full Redis refuses (INFO commandstats; COMMAND INFO's
// denyoom flag), then on the full Redis it must have failed with OOM and
// changed none of its keys. Two calls are meant to run whole on a full
// Redis, and are not held to it: a member's leave (Heartbeat "leave", at
// Close) and an operator's unset (Admin "unset") remove first and add a
// record only (a hole in the ranks, an entry in the key's history).
//
// Calls are made one at a time (the server's maxmemory and its command
// counts are global), so a test runs slower under the check; its own
// server is changed, and no other test shares it.
type FullCheck struct {
	t       testing.TB
	server  *Server
	admin   *redis.Client // the check's own commands, outside the hook
	mu      sync.Mutex    // one command at a time
	denyOOM map[string]bool
	calls   int // script calls checked
	adding  int // of which add with room
	whole   int // of which leaves and unsets
}

// newFullCheck starts a redis-server of t's own, under noeviction, whose
// clients (Client, NewClient) run under the check; run runs a test under
// it: the test's New returns this server. The clients are set up as
// reserve.New wants them (no retries, the context's deadline on reads, one
// dial), so that a Limiter uses them as they are rather than a client of
// its own.
func newFullCheck(t testing.TB) *FullCheck {
	t.Helper()
	p := NewProcess(t)
	f := &FullCheck{t: t, admin: p.NewClient(t), denyOOM: map[string]bool{}}
	if err := f.admin.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatalf("redistest: CONFIG SET maxmemory-policy noeviction: %v", err)
	}
	opts := *p.opts
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	s := *p
	s.opts, s.check = &opts, f
	s.Client = s.NewClient(t)
	f.server = &s
	return f
}

// run runs test as a subtest of t named name, under the check: its calls
// of New (and NewProcess) return the check's server.
func (f *FullCheck) run(t *testing.T, name string, test func(*testing.T)) bool {
	full := t.Name() + "/" + name
	checks.Store(full, f)
	defer checks.Delete(full)
	return t.Run(name, test)
}

// A NamedTest is one of RunFullCheck's tests.
type NamedTest struct {
	Name string
	Test func(*testing.T)
}

// RunFullCheck runs tests in order, each as a subtest of t, under one
// FullCheck on a server of its own, and reports it.
func RunFullCheck(t *testing.T, tests ...NamedTest) {
	t.Helper()
	f := newFullCheck(t)
	for _, nt := range tests {
		f.run(t, nt.Name, nt.Test)
	}
	f.report(t)
}

// report logs what the check saw, and fails t if no call it held to the
// rule was made: a check that checked nothing.
func (f *FullCheck) report(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	calls, adding, whole := f.calls, f.adding, f.whole
	f.mu.Unlock()
	t.Logf("%d script calls checked; %d of them add with room: %d were refused whole when full, %d are leaves and unsets",
		calls, adding, adding-whole, whole)
	if adding-whole == 0 {
		t.Error("no script call added anything: the check checked nothing")
	}
}

// UnderFullCheck reports whether t runs under a FullCheck (RunFullCheck).
func UnderFullCheck(t testing.TB) bool { return checked(t) != nil }

// checks are the FullChecks running tests, by the name of the test.
var checks sync.Map

// checked returns the server of the FullCheck t runs under, if any.
func checked(t testing.TB) *Server {
	var found *Server
	checks.Range(func(k, v any) bool {
		if name := k.(string); t.Name() == name || strings.HasPrefix(t.Name(), name+"/") {
			found = v.(*FullCheck).server
		}
		return found == nil
	})
	return found
}

func (f *FullCheck) DialHook(next redis.DialHook) redis.DialHook { return next }

// connInit reports whether cmd is one go-redis sends to set up a new
// connection, inside the command that needed it: it runs without the lock
// that command holds.
func connInit(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "auth", "select", "client", "readonly":
		return true
	}
	return false
}

func (f *FullCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return !connInit(c) }) {
			return next(ctx, cmds)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return next(ctx, cmds)
	}
}

func (f *FullCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if connInit(cmd) {
			return next(ctx, cmd)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		name := strings.ToLower(cmd.Name())
		if name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		return f.check(ctx, cmd, next)
	}
}

// wholeWhenFull reports whether the script call of keys and argv is a
// member's leave (Heartbeat: the fleet's keys, "<id> leave") or an
// operator's unset (Admin: "unset" and the key's history), which are
// meant to run whole on a full Redis (docs/protocol.md, "A full Redis").
func wholeWhenFull(keys []string, argv []any) bool {
	leave := len(keys) > 0 && strings.HasSuffix(keys[0], "{limiters}") && len(argv) > 1 && argv[1] == "leave"
	unset := len(keys) > 3 && strings.HasSuffix(keys[3], ":history") && len(argv) > 0 && argv[0] == "unset"
	return leave || unset
}

// check makes the script call cmd on a full Redis, puts its keys back,
// and makes it with room through next (see FullCheck).
func (f *FullCheck) check(ctx context.Context, cmd redis.Cmder, next redis.ProcessHook) error {
	args := cmd.Args()
	n, err := strconv.Atoi(fmt.Sprint(args[2]))
	if err != nil || n < 0 || len(args) < 3+n {
		return next(ctx, cmd) // a malformed call: Redis says so
	}
	keys := make([]string, n)
	for i := range n {
		keys[i] = fmt.Sprint(args[3+i])
	}
	bg := context.WithoutCancel(ctx)
	before, ok := f.dump(bg, keys)
	if !ok || !f.maxmemory(bg, "1") {
		return next(ctx, cmd)
	}
	_, errFull := f.admin.Do(bg, args...).Result()
	afterFull, ok := f.dump(bg, keys)
	if !f.maxmemory(bg, "0") || !ok || !f.restore(bg, keys, before) {
		return next(ctx, cmd)
	}
	if err := f.admin.ConfigResetStat(bg).Err(); err != nil {
		f.t.Errorf("redistest: CONFIG RESETSTAT: %v", err)
		return next(ctx, cmd)
	}
	runErr := next(ctx, cmd)
	if errFull != nil && strings.HasPrefix(errFull.Error(), "NOSCRIPT") {
		return runErr // go-redis sends the script next
	}
	adds := f.adds(bg)
	f.calls++
	if len(adds) == 0 {
		return runErr
	}
	f.adding++
	if wholeWhenFull(keys, args[3+n:]) {
		f.whole++
		return runErr
	}
	var changed []string
	for i, k := range keys {
		if before[i] != afterFull[i] {
			changed = append(changed, k)
		}
	}
	if errFull == nil || !strings.HasPrefix(errFull.Error(), "OOM") || len(changed) > 0 {
		f.t.Errorf("redistest: %.240v: on a full Redis it returned %v and changed %q; with room it runs %v, which a full Redis refuses: want OOM, and no key changed",
			args, errFull, changed, adds)
	}
	return runErr
}

// dump is each of keys' DUMP ("" if absent).
func (f *FullCheck) dump(ctx context.Context, keys []string) ([]string, bool) {
	out := make([]string, len(keys))
	for i, k := range keys {
		d, err := f.admin.Dump(ctx, k).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			f.t.Errorf("redistest: DUMP %s: %v", k, err)
			return nil, false
		}
		out[i] = d
	}
	return out, true
}

// restore puts keys back to their dumps, with the expiry they have now.
func (f *FullCheck) restore(ctx context.Context, keys, dumps []string) bool {
	for i, k := range keys {
		pttl, err := f.admin.PTTL(ctx, k).Result()
		if err == nil {
			err = f.admin.Del(ctx, k).Err()
		}
		if pttl < 0 {
			pttl = 0
		}
		if err == nil && dumps[i] != "" {
			err = f.admin.RestoreReplace(ctx, k, pttl, dumps[i]).Err()
		}
		if err != nil {
			f.t.Errorf("redistest: putting %s back: %v", k, err)
			return false
		}
	}
	return true
}

// maxmemory sets the server's maxmemory (its policy is noeviction): "1"
// refuses every write that may add memory, "0" gives room.
func (f *FullCheck) maxmemory(ctx context.Context, v string) bool {
	if err := f.admin.ConfigSet(ctx, "maxmemory", v).Err(); err != nil {
		f.t.Errorf("redistest: CONFIG SET maxmemory %s: %v", v, err)
		return false
	}
	return true
}

// adds is the commands run since the last CONFIG RESETSTAT that a full
// Redis refuses (COMMAND INFO's denyoom flag).
func (f *FullCheck) adds(ctx context.Context) []string {
	info, err := f.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		f.t.Errorf("redistest: INFO commandstats: %v", err)
		return nil
	}
	var out []string
	for line := range strings.SplitSeq(info, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":")
		if !ok || strings.HasPrefix(line, "#") || strings.Contains(name, "|") || !strings.HasPrefix(rest, "calls=") || strings.HasPrefix(rest, "calls=0,") {
			continue
		}
		deny, known := f.denyOOM[name]
		if !known {
			v, err := f.admin.Do(ctx, "COMMAND", "INFO", name).Slice()
			if err != nil {
				f.t.Errorf("redistest: COMMAND INFO %s: %v", name, err)
				return nil
			}
			if len(v) == 1 {
				if info, ok := v[0].([]any); ok && len(info) > 2 {
					flags, _ := info[2].([]any)
					deny = slices.Contains(flags, any("denyoom"))
				}
			}
			f.denyOOM[name] = deny
		}
		if deny {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}
