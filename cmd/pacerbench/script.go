package main

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/binary"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The script phase measures what reserve.lua itself costs Redis: one
// EVALSHA of m requests on a hot key (hotLimit), the ARGV built by
// reserve.Limiter itself (captured from its first call), run back to back
// from one connection, first by this program (go-redis) and then by
// redis-benchmark; each time INFO commandstats gives the µs Redis spent per
// EVALSHA. The µs per further request in a batch is (µs(m) - µs(1)) / (m - 1).
// A naive one-script token bucket (naive.lua) is measured in the same run,
// the cases taking turns, and the table gives pacer's figure over its.
//
// Two floors are measured beside them, with each script's arguments: an
// EVALSHA of a script that does nothing (what Redis spends on any script
// call: its arguments, the Lua call, the reply), and one that makes only
// the Redis commands the script makes (reserve.lua's common call: TIME,
// GET and SET of its state; naive.lua: TIME, HMGET, HSET and PEXPIRE).
// What a script costs above the second is its own Lua work.

// scriptRow is one line of the script table.
type scriptRow struct {
	Case      string
	M         int     // requests per EVALSHA
	Calls     int64   // EVALSHA run by this program
	Usec      float64 // commandstats µs per EVALSHA, this program driving
	CPUUsec   float64 // Redis CPU (INFO cpu) µs per EVALSHA, the same
	Paced     float64 // calls per second the calls were paced at; 0: back to back
	BenchUsec float64 // the same with redis-benchmark driving; -1: not run
	BenchRPS  float64 // redis-benchmark's EVALSHA per second
	// Turns: Usec in each of the scriptRounds turns (go-redis), where the
	// cases take turns; 0 for a turn without a call.
	Turns []float64 `json:",omitempty"`
}

// scriptBatches are the m of the single-Limit cases.
var scriptBatches = []int{1, 16, 256}

// scriptRounds is how many slices each case's measurement is cut into: the
// cases take turns, slice by slice, so that other work on the machine falls
// on all of them alike (an A/B in one run).
const scriptRounds = 5

// naiveScript is the reference row's script: a plain token bucket (HMGET,
// HSET, PEXPIRE, three float formats). See naive.lua.
//
//go:embed naive.lua
var naiveScript string

// naiveCase is the reference row's name.
const naiveCase = "reference: a naive one-script token bucket (naive.lua)"

// The floors' scripts (see the phase's comment). floorCommands makes
// reserve.lua's common call's commands on its KEYS[1], its state rewritten
// as it was read (a 28-byte value, written once before the loop, so that
// the GET reads one); floorNaiveCommands makes naive.lua's on its KEYS[1],
// with values of its shape.
const (
	floorEmpty         = "return 1"
	floorCommands      = "local t = redis.call('TIME') local v = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], v, 'KEEPTTL') return v"
	floorNaiveCommands = "local t = redis.call('TIME') local v = redis.call('HMGET', KEYS[1], 'tokens', 'ts') " +
		"redis.call('HSET', KEYS[1], 'tokens', '999.000000', 'ts', '1700000000000000') redis.call('PEXPIRE', KEYS[1], 2000) return {1, '0.000', '999.000000'}"
)

// The floor rows' names.
const (
	floorEmptyCase         = "floor: a script that does nothing, 1 band (m = 1)'s arguments"
	floorCommandsCase      = "floor: only its commands (TIME, GET, SET ... KEEPTTL), 1 band (m = 1)'s arguments"
	floorNaiveEmptyCase    = "floor: a script that does nothing, naive.lua's arguments"
	floorNaiveCommandsCase = "floor: only its commands (TIME, HMGET, HSET, PEXPIRE), naive.lua's arguments"
)

// scriptCase is one row's call: the arguments of Do.
type scriptCase struct {
	name string
	args []any
	m    int
}

// runScript measures reserve.lua for each of scriptBatches on one Limit, a
// single reservation on threeBands, and naive.lua's single call, in turns.
func (b *bench) runScript(ctx context.Context, d time.Duration, rate float64) ([]scriptRow, string, error) {
	single, err := b.captureArgs(ctx, "script:one", nil, reserve.Permits(1), 3)
	if err != nil {
		return nil, "", err
	}
	// The same call in format 2, a fleet's default before it switches.
	single2, err := b.captureArgs(ctx, "script:two", nil, reserve.Permits(1), 2)
	if err != nil {
		return nil, "", err
	}
	policy, err := b.captureArgs(ctx, "script:three", threeBands(reserve.Limit{Rate: hotLimit.Rate, Burst: hotLimit.Burst}), threeBandsCost, 3)
	if err != nil {
		return nil, "", err
	}
	naive := redis.NewScript(naiveScript)
	if err := naive.Load(ctx, b.admin).Err(); err != nil {
		return nil, "", fmt.Errorf("pacerbench: script: load naive.lua: %w", err)
	}
	note := "redis-benchmark takes its arguments from its command line, where a NUL byte cannot be (a Limit's policy is binary): its column is left empty for those rows."
	bench, lookErr := exec.LookPath("redis-benchmark")
	if lookErr != nil {
		note = "redis-benchmark is not in PATH: its column is left empty."
	}
	var cases []scriptCase
	for _, m := range scriptBatches {
		// Each case on a key of its own: m = 256 builds a queue that the
		// others would otherwise read.
		args := rekey(batchArgs(single, m), "{script:one}", fmt.Sprintf("{script:one:%d}", m))
		cases = append(cases, scriptCase{fmt.Sprintf("1 band (Limit), m = %d", m), args, m})
	}
	cases = append(cases, scriptCase{"1 band (Limit), m = 1, state format 2", single2, 1})
	cases = append(cases, scriptCase{"3 bands (requests, tokens, daily), m = 1", policy, 1})
	naiveArgs := []any{"evalsha", naive.Hash(), 1, "naive:{script:naive}",
		strconv.FormatFloat(hotLimit.Rate, 'f', -1, 64), strconv.Itoa(hotLimit.Burst), "1"}
	cases = append(cases, scriptCase{naiveCase, naiveArgs, 1})
	// The floors, each script with the arguments of the call it stands
	// under, on a key of its own.
	for _, f := range []struct {
		name, src string
		args      []any
		from, to  string
	}{
		{floorEmptyCase, floorEmpty, single, "{script:one}", "{script:floor}"},
		{floorCommandsCase, floorCommands, single, "{script:one}", "{script:floorcmds}"},
		{floorNaiveEmptyCase, floorEmpty, naiveArgs, "{script:naive}", "{script:floornaive}"},
		{floorNaiveCommandsCase, floorNaiveCommands, naiveArgs, "{script:naive}", "{script:floornaivecmds}"},
	} {
		sc := redis.NewScript(f.src)
		if err := sc.Load(ctx, b.admin).Err(); err != nil {
			return nil, "", fmt.Errorf("pacerbench: script: load a floor's script: %w", err)
		}
		args := rekey(f.args, f.from, f.to)
		args[1] = sc.Hash()
		cases = append(cases, scriptCase{f.name, args, 1})
	}
	if err := b.flush(ctx); err != nil {
		return nil, "", err
	}
	// floorCommands reads and rewrites a state: one of format 3's Limit
	// forms' length (docs/protocol.md, The state), kept for the run.
	for _, c := range cases {
		if c.name == floorCommandsCase {
			if err := b.admin.Set(ctx, fmt.Sprint(c.args[3]), strings.Repeat("x", 28), 0).Err(); err != nil {
				return nil, "", fmt.Errorf("pacerbench: script: a floor's state: %w", err)
			}
		}
	}
	type sums struct {
		usec, evals, benchUsec, benchEvals, benchCalls int64
		cpu, benchSec                                  float64
	}
	acc := make([]sums, len(cases))
	rows := make([]scriptRow, len(cases))
	for i, c := range cases {
		rows[i] = scriptRow{Case: c.name, M: c.m, BenchUsec: -1}
	}
	for range scriptRounds {
		for i, c := range cases {
			base, err := startUsage(ctx, b.admin)
			if err != nil {
				return nil, "", err
			}
			var n int64
			end := time.Now().Add(d / scriptRounds)
			for time.Now().Before(end) {
				if err := b.admin.Do(ctx, c.args...).Err(); err != nil {
					return nil, "", fmt.Errorf("pacerbench: script %s: %w", c.name, err)
				}
				n++
			}
			u, err := endUsage(ctx, b.admin, base)
			if err != nil {
				return nil, "", err
			}
			st := u.Stats["evalsha"]
			rows[i].Calls += n
			turn := 0.0 // (no call in the turn)
			if st.Calls > 0 {
				turn = float64(st.Usec) / float64(st.Calls)
			}
			rows[i].Turns = append(rows[i].Turns, turn)
			acc[i].usec, acc[i].evals, acc[i].cpu = acc[i].usec+st.Usec, acc[i].evals+st.Calls, acc[i].cpu+u.CPU
			if lookErr != nil || hasNUL(c.args) {
				continue
			}
			if base, err = startUsage(ctx, b.admin); err != nil {
				return nil, "", err
			}
			rps, err := b.redisBenchmark(ctx, bench, n, c.args)
			if err != nil {
				return nil, "", err
			}
			if u, err = endUsage(ctx, b.admin, base); err != nil {
				return nil, "", err
			}
			st = u.Stats["evalsha"]
			acc[i].benchUsec, acc[i].benchEvals = acc[i].benchUsec+st.Usec, acc[i].benchEvals+st.Calls
			acc[i].benchCalls += max(n, 100)
			acc[i].benchSec += float64(max(n, 100)) / rps
		}
	}
	for i := range rows {
		a := acc[i]
		if a.evals > 0 {
			rows[i].Usec = float64(a.usec) / float64(a.evals)
		}
		if rows[i].Calls > 0 {
			rows[i].CPUUsec = a.cpu * 1e6 / float64(rows[i].Calls)
		}
		if a.benchEvals > 0 {
			rows[i].BenchUsec = float64(a.benchUsec) / float64(a.benchEvals)
			rows[i].BenchRPS = float64(a.benchCalls) / a.benchSec
		}
	}
	if err := b.flush(ctx); err != nil {
		return nil, "", err
	}
	// The fleet's pace: the m = 1 call at rate calls per second, one
	// connection, Redis idle in between (what the fleet phase's Redis
	// figures are made of); then nothing at all for as long, Redis's own
	// CPU per second spread over as many calls.
	paced := scriptRow{Case: fmt.Sprintf("1 band (Limit), m = 1, paced at %s/s", thousands(rate)), M: 1, BenchUsec: -1, Paced: rate}
	base, err := startUsage(ctx, b.admin)
	if err != nil {
		return nil, "", err
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	end := time.Now().Add(d)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		if err := b.admin.Do(ctx, cases[0].args...).Err(); err != nil {
			tick.Stop()
			return nil, "", fmt.Errorf("pacerbench: script paced: %w", err)
		}
		paced.Calls++
	}
	tick.Stop()
	u, err := endUsage(ctx, b.admin, base)
	if err != nil {
		return nil, "", err
	}
	paced.Usec, paced.CPUUsec = perEvalsha(u), u.CPU*1e6/float64(paced.Calls)
	rows = append(rows, paced)
	// The GET a Wait makes before it fires (the pause check), as paced.
	get := scriptRow{Case: fmt.Sprintf("GET of the state (a Wait's pause check), paced at %s/s", thousands(rate)), BenchUsec: -1, Paced: rate}
	stateKey := fmt.Sprint(cases[0].args[3])
	// The key would expire a second or two into the loop (its bucket is
	// full again at once): keep it for the loop's length.
	if err := b.admin.Persist(ctx, stateKey).Err(); err != nil {
		return nil, "", fmt.Errorf("pacerbench: script paced GET: %w", err)
	}
	if base, err = startUsage(ctx, b.admin); err != nil {
		return nil, "", err
	}
	tick = time.NewTicker(time.Duration(float64(time.Second) / rate))
	end = time.Now().Add(d)
	for now := range tick.C {
		if now.After(end) {
			break
		}
		if err := b.admin.Get(ctx, stateKey).Err(); err != nil {
			tick.Stop()
			return nil, "", fmt.Errorf("pacerbench: script paced GET: %w", err)
		}
		get.Calls++
	}
	tick.Stop()
	if u, err = endUsage(ctx, b.admin, base); err != nil {
		return nil, "", err
	}
	if st := u.Stats["get"]; st.Calls > 0 {
		get.Usec = float64(st.Usec) / float64(st.Calls)
	}
	get.CPUUsec = u.CPU * 1e6 / float64(get.Calls)
	rows = append(rows, get)
	base, err = startUsage(ctx, b.admin)
	if err != nil {
		return nil, "", err
	}
	time.Sleep(d)
	u, err = endUsage(ctx, b.admin, base)
	if err != nil {
		return nil, "", err
	}
	rows = append(rows, scriptRow{Case: fmt.Sprintf("no calls: Redis's own CPU per second / %s", thousands(rate)), BenchUsec: -1, Paced: rate,
		Usec: math.NaN(), CPUUsec: u.CPU * 1e6 / d.Seconds() / rate})
	return rows, note, nil
}

// rekey returns args with from replaced by to in every argument (a key's
// hash tag).
func rekey(args []any, from, to string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok {
			a = strings.ReplaceAll(s, from, to)
		}
		out[i] = a
	}
	return out
}

// perEvalsha is commandstats' µs per EVALSHA.
func perEvalsha(u usage) float64 {
	st := u.Stats["evalsha"]
	if st.Calls == 0 {
		return 0
	}
	return float64(st.Usec) / float64(st.Calls)
}

// captureArgs makes one reservation on key with a Limiter of its own
// (coalescing off), the fleet writing state format format, and returns the
// EVALSHA of reserve.lua it sent, as arguments for Do, without its
// deadline (ARGV[1], which would pass): on hotLimit when pol is nil, else
// on pol.
func (b *bench) captureArgs(ctx context.Context, key string, pol reserve.Policy, cost reserve.Cost, format int) ([]any, error) {
	if err := b.setFormat(ctx, format); err != nil {
		return nil, err
	}
	defer b.setFormat(ctx, b.cfg.Format)
	rdb, err := newClient(b.url, 4, nil)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	cap := &argsHook{sha: redis.NewScript(lua.Reserve).Hash()}
	rdb.AddHook(cap)
	l, err := reserve.New(rdb, reserve.Options{DisableCoalescing: true})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if pol == nil {
		pol = reserve.Limit{Rate: hotLimit.Rate, Burst: hotLimit.Burst}.Policy()
	}
	if _, err := l.ReserveN(ctx, reserve.Request{Key: key, Policy: pol, Cost: cost}); err != nil {
		return nil, fmt.Errorf("pacerbench: script: %w", err)
	}
	cap.mu.Lock()
	defer cap.mu.Unlock()
	if cap.args == nil {
		return nil, fmt.Errorf("pacerbench: script: no EVALSHA of reserve.lua seen")
	}
	nkeys, _ := strconv.Atoi(fmt.Sprint(cap.args[2]))
	cap.args[3+nkeys] = "" // no deadline
	return cap.args, nil
}

// hasNUL reports whether an argument holds a NUL byte.
func hasNUL(args []any) bool {
	for _, a := range args {
		if strings.IndexByte(fmt.Sprint(a), 0) >= 0 {
			return true
		}
	}
	return false
}

// batchArgs turns a captured EVALSHA of one plain request on a Limit
// (reserve.lua's ARGV: the common three, and no floor or requests) into
// one of m identical requests: the floor "", and m requests of no maximum
// wait and cost 1, little-endian doubles.
func batchArgs(one []any, m int) []any {
	if m == 1 {
		return one
	}
	out := append([]any{}, one...)
	var req []byte
	for range m {
		req = binary.LittleEndian.AppendUint64(req, math.Float64bits(-1))
		req = binary.LittleEndian.AppendUint64(req, math.Float64bits(1))
	}
	return append(out, "", string(req))
}

// argsHook keeps the arguments of the first EVALSHA (or EVAL) of sha.
type argsHook struct {
	sha  string
	mu   sync.Mutex
	args []any
}

func (h *argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a := cmd.Args()
		if len(a) > 2 && strings.EqualFold(fmt.Sprint(a[0]), "evalsha") && fmt.Sprint(a[1]) == h.sha {
			h.mu.Lock()
			if h.args == nil {
				h.args = append([]any{}, a...)
			}
			h.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}

// redisBenchmark runs args n times with redis-benchmark (one connection)
// and returns its requests per second.
func (b *bench) redisBenchmark(ctx context.Context, path string, n int64, args []any) (float64, error) {
	opts, err := redis.ParseURL(b.url)
	if err != nil {
		return 0, err
	}
	host, port, _ := strings.Cut(opts.Addr, ":")
	cmdArgs := []string{"-h", host, "-p", port, "--dbnum", strconv.Itoa(opts.DB), "-c", "1", "-n", strconv.FormatInt(max(n, 100), 10), "-q"}
	if opts.Password != "" {
		cmdArgs = append(cmdArgs, "-a", opts.Password)
		if opts.Username != "" {
			cmdArgs = append(cmdArgs, "--user", opts.Username)
		}
	}
	for _, a := range args {
		cmdArgs = append(cmdArgs, fmt.Sprint(a))
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, cmdArgs...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("pacerbench: redis-benchmark: %w: %s", err, stderr.String())
	}
	// -q prints "EVALSHA ...: 12345.67 requests per second, p50=..."; the
	// progress lines before it end in '\r'.
	sc := bufio.NewScanner(bytes.NewReader(bytes.ReplaceAll(stdout.Bytes(), []byte("\r"), []byte("\n"))))
	rps := -1.0
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, " requests per second")
		if i < 0 {
			continue
		}
		f := strings.Fields(line[:i])
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			rps = v
		}
	}
	if rps < 0 {
		return 0, fmt.Errorf("pacerbench: redis-benchmark printed no requests per second: %q", stdout.String())
	}
	return rps, nil
}

// scriptTable renders the script phase.
func (r *results) scriptTable() string {
	if len(r.Script) == 0 {
		return ""
	}
	t := table{
		title: "Script: what reserve.lua costs Redis",
		intro: fmt.Sprintf("EVALSHA of reserve.lua on one key (limit %s/s burst %s), back to back on one connection, ARGV as reserve.Limiter builds it; "+
			"Redis µs per call from INFO commandstats, driven by this program (go-redis) for %v and by redis-benchmark for as many calls, "+
			"in %d turns: the cases and the reference (naive.lua, a plain token bucket: HMGET, HSET, PEXPIRE, three float formats, at the same limit) take turns, so that other work on the machine falls on all alike. "+
			"µs per further request: (µs(m) - µs(1)) / (m - 1). Redis CPU: INFO cpu (user + sys) over the calls. "+
			"The floor rows take their turns too: a script that does nothing, and one that makes only the script's Redis commands, each with that script's arguments. "+
			"The paced row makes the same call at the fleet phase's rate; the last row is Redis's CPU with no calls at all, per second, divided by that rate.",
			thousands(hotLimit.Rate), thousands(float64(hotLimit.Burst)), r.Config.Phase, scriptRounds),
		header: []string{"case", "calls", "Redis µs/call (go-redis)", "µs/further request", "Redis CPU µs/call", "Redis µs/call (redis-benchmark)", "µs/further request", "redis-benchmark calls/s"},
	}
	var one, oneBench, two, three, threeBench, naive, naiveBench float64
	var oneTurns, naiveTurns []float64
	floor := map[string]float64{}
	for _, x := range r.Script {
		if strings.HasPrefix(x.Case, "floor: ") {
			floor[x.Case] = x.Usec
		}
		switch {
		case x.Case == "1 band (Limit), m = 1":
			one, oneBench, oneTurns = x.Usec, x.BenchUsec, x.Turns
		case x.Case == "1 band (Limit), m = 1, state format 2":
			two = x.Usec
		case x.M == 1 && x.Paced == 0 && strings.HasPrefix(x.Case, "3 bands"):
			three, threeBench = x.Usec, x.BenchUsec
		case x.Case == naiveCase:
			naive, naiveBench, naiveTurns = x.Usec, x.BenchUsec, x.Turns
		}
	}
	ratio := func(a, b float64) string {
		if a <= 0 || b <= 0 {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	if naive > 0 {
		t.notes = append(t.notes, fmt.Sprintf("One reservation (1 band, m = 1, state format 3) over the naive script's call: %s by go-redis, %s by redis-benchmark (the goal: at most 0.75); "+
			"in format 2, a fleet's default before it switches: %s. "+
			"3 bands over 1 band (m = 1): %s by go-redis, %s by redis-benchmark (the goal: at most 1.5).",
			ratio(one, naive), ratio(oneBench, naiveBench), ratio(two, naive), ratio(three, one), ratio(threeBench, oneBench)))
		// The same ratio turn by turn: how far one turn's figure can
		// be from the run's.
		var turns []float64
		for i := range min(len(oneTurns), len(naiveTurns)) {
			if oneTurns[i] > 0 && naiveTurns[i] > 0 {
				turns = append(turns, oneTurns[i]/naiveTurns[i])
			}
		}
		if len(turns) > 0 {
			t.notes = append(t.notes, fmt.Sprintf("That ratio turn by turn (go-redis): %.2f to %.2f over %d turns.", slices.Min(turns), slices.Max(turns), len(turns)))
		}
	}
	if fe, fc, ne, nc := floor[floorEmptyCase], floor[floorCommandsCase], floor[floorNaiveEmptyCase], floor[floorNaiveCommandsCase]; fe > 0 && fc > 0 && ne > 0 && nc > 0 && one > 0 && naive > 0 {
		t.notes = append(t.notes, fmt.Sprintf("Where each call's time goes (go-redis, µs per call): 1 band (m = 1) %.2f = %.2f for a script call that does nothing, %.2f for its commands, %.2f of its own Lua work; "+
			"naive.lua %.2f = %.2f, %.2f, %.2f. The script's own work over naive.lua's: %s.",
			one, fe, fc-fe, one-fc, naive, ne, nc-ne, naive-nc, ratio(one-fc, naive-nc)))
	}
	for _, x := range r.Script {
		further, furtherBench := "", ""
		if x.M > 1 && x.Paced == 0 {
			further = fmt.Sprintf("%.2f", (x.Usec-one)/float64(x.M-1))
			if x.BenchUsec >= 0 {
				furtherBench = fmt.Sprintf("%.2f", (x.BenchUsec-oneBench)/float64(x.M-1))
			}
		}
		bu, brps := "", ""
		if x.BenchUsec >= 0 {
			bu, brps = fmt.Sprintf("%.2f", x.BenchUsec), thousands(x.BenchRPS)
		}
		us := fmt.Sprintf("%.2f", x.Usec)
		if math.IsNaN(x.Usec) {
			us = "–"
		}
		t.rows = append(t.rows, []string{x.Case, strconv.FormatInt(x.Calls, 10), us, further, fmt.Sprintf("%.1f", x.CPUUsec), bu, furtherBench, brps})
	}
	if r.ScriptNote != "" {
		t.notes = append(t.notes, r.ScriptNote)
	}
	return t.markdown()
}
