package main

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/reserve"
)

// TestBadInput: every bad command line, unknown key, key of another type
// and unreachable Redis gives one line on stderr, nothing on stdout, exit
// 2 (the command line) or 1 (what Redis holds, or Redis itself), and
// changes nothing in Redis. (With a shared REDIS_URL server holding more
// than ten prefixes, the fixture's may be among the "and N more" of a
// no-match error.)
func TestBadInput(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	l := f.limiter()
	f.reserve(l, "api", reserve.Limit{Rate: 0.0001, Burst: 2}, 3)
	f.reserve(l, "quiet", reserve.Limit{Rate: 0.0001, Burst: 1}, 1)
	f.reserve(l, "hist", reserve.Limit{Rate: 0.0001, Burst: 1}, 1)
	f.waitSource("api", "code")
	f.waitSource("quiet", "code")
	if err := l.Close(); err != nil { // no heartbeat changes Redis from now on
		t.Fatal(err)
	}
	// quiet: a state, but no policy known (nothing stored, none reported).
	if err := f.srv.Client.HDel(ctx, f.prefix+"{limiters}:policies", "quiet").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.admin.SetLimit(ctx, "api", reserve.Limit{Rate: 0.0002, Burst: 1}.Policy(), false, "ops", "setup"); err != nil {
		t.Fatal(err)
	}
	// h: a Redis key pacer would use for key h, holding a hash.
	if err := f.srv.Client.HSet(ctx, f.prefix+"{h}", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	// hist: a key whose history holds a hash.
	if err := f.srv.Client.HSet(ctx, f.prefix+"{hist}:history", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	// multi: a stored limit of two bands, enforced.
	two := reserve.Policy{{Name: "a", Limit: reserve.Limit{Rate: 1, Burst: 1}}, {Name: "b", Limit: reserve.Limit{Rate: 1, Burst: 1}}}
	if _, err := f.admin.SetLimit(ctx, "multi", two, false, "ops", "setup"); err != nil {
		t.Fatal(err)
	}
	// Policy files.
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	badFile := file("bad.txt", "# tier 3\ntokens: 500/s, burst 2000\nrequests 500 per 1m\n")
	emptyFile := file("empty.txt", "# nothing\n")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nobody listens there once closed
	_ = ln.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0") // pacer web cannot serve there
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()

	const (
		usage   = exitUsage
		runtime = exitRuntime
	)
	set := func(key, rate, burst string) []string {
		return []string{"set", key, "--rate", rate, "--burst", burst, "--reason", "x"}
	}
	window := func(key, n, length string) []string {
		return []string{"set", key, "--n", n, "--window", length, "--reason", "x"}
	}
	tests := []struct {
		name   string
		args   []string
		raw    bool // args without the fixture's global flags
		code   int
		stderr string // a regexp
		stdout bool   // may print something (the keys it could read)
	}{
		{name: "no command", args: nil, code: usage, stderr: `no command given`},
		{name: "unknown command", args: []string{"frobnicate"}, code: usage, stderr: `unknown command "frobnicate"`},
		{name: "unknown flag", args: []string{"status", "-nope"}, code: usage, stderr: `status: flag provided but not defined: -nope`},
		{name: "unknown global flag", args: []string{"-nope", "status"}, code: usage, stderr: `flag provided but not defined: -nope`},
		{name: "extra argument", args: []string{"status", "a", "b"}, code: usage, stderr: `status: unexpected argument "b"`},
		{name: "negative sample", args: []string{"status", "-sample", "-1s"}, code: usage, stderr: `status: -sample -1s: want 0 or more`},
		{name: "bad sample", args: []string{"status", "-sample", "soon"}, code: usage, stderr: `status: invalid value "soon" for flag -sample`},
		{name: "zero interval", args: []string{"watch", "-interval", "0s"}, code: usage, stderr: `watch: -interval 0s: want at least 10ms`},
		{name: "negative count", args: []string{"watch", "-count", "-1"}, code: usage, stderr: `watch: -count -1: want 0 or more`},
		{name: "help of nothing", args: []string{"help", "nope"}, code: usage, stderr: `help: unknown command "nope"`},

		{name: "set without key", args: []string{"set", "--rate", "1", "--burst", "1", "--reason", "x"}, code: usage, stderr: `set: missing KEY`},
		{name: "set empty key", args: set("", "1", "1"), code: usage, stderr: `set: empty KEY`},
		{name: "set without rate", args: []string{"set", "api", "--burst", "1", "--reason", "x"}, code: usage, stderr: `set: --rate is required`},
		{name: "set without burst", args: []string{"set", "api", "--rate", "1", "--reason", "x"}, code: usage, stderr: `set: --burst is required`},
		{name: "rate 0", args: set("api", "0", "1"), code: usage, stderr: `set: --rate "0": want a positive, finite number`},
		{name: "rate negative", args: set("api", "-1", "1"), code: usage, stderr: `set: --rate "-1": want a positive`},
		{name: "rate NaN", args: set("api", "NaN", "1"), code: usage, stderr: `set: --rate "NaN": want a positive`},
		{name: "rate Inf", args: set("api", "Inf", "1"), code: usage, stderr: `set: --rate "Inf": want a positive`},
		{name: "rate -Inf", args: set("api", "-Inf", "1"), code: usage, stderr: `set: --rate "-Inf": want a positive`},
		{name: "rate overflows", args: set("api", "1e999", "1"), code: usage, stderr: `set: --rate "1e999": want a positive`},
		{name: "rate not a number", args: set("api", "fast", "1"), code: usage, stderr: `set: --rate "fast": want a positive`},
		{name: "rate empty", args: set("api", "", "1"), code: usage, stderr: `set: --rate "": want a positive`},
		{name: "burst 0", args: set("api", "1", "0"), code: usage, stderr: `set: --burst "0": want a whole number of permits, at least 1`},
		{name: "burst negative", args: set("api", "1", "-3"), code: usage, stderr: `set: --burst "-3": want a whole number`},
		{name: "burst fraction", args: set("api", "1", "1.5"), code: usage, stderr: `set: --burst "1.5": want a whole number`},
		{name: "burst not a number", args: set("api", "1", "many"), code: usage, stderr: `set: --burst "many": want a whole number`},
		{name: "burst overflows", args: set("api", "1", "99999999999999999999"), code: usage, stderr: `set: --burst "99999999999999999999": want a whole number`},
		{name: "limit too slow to fill", args: set("api", "1e-9", "1000000"), code: usage, stderr: `set: --rate 1e-9 --burst 1000000: reserve: burst/rate is too long`},
		{name: "rate too high", args: set("api", "1e300", "1"), code: usage, stderr: `set: --rate 1e300 --burst 1: reserve: rate must be positive, finite and at most 1e9/s \(got 1e\+300; at most 1e\+09\)`},
		{name: "burst too large", args: set("api", "1e9", "3000000000"), code: usage, stderr: `set: --rate 1e9 --burst 3000000000: reserve: burst must be from 1 to 2\^30`},
		{name: "set no limit", args: []string{"set", "api", "--reason", "x"}, code: usage, stderr: `set: give --rate and --burst \(a bucket\), --n and --window \(a window\), --n and --per \(a calendar window\), or --file`},
		{name: "set bucket and window", args: append(set("api", "1", "1"), "--n", "5", "--window", "1m"), code: usage, stderr: `set: --rate and --burst make a bucket, --n and --window \(or --per\) a window: give one of the two`},
		{name: "set n without window", args: []string{"set", "api", "--n", "5", "--reason", "x"}, code: usage, stderr: `set: --window is required with --n`},
		{name: "set window without n", args: []string{"set", "api", "--window", "1m", "--reason", "x"}, code: usage, stderr: `set: --n is required with --window \(permits per window, at least 1\)`},
		{name: "set origin alone", args: []string{"set", "api", "--origin", "2026-01-01T00:00:00Z", "--reason", "x"}, code: usage, stderr: `set: --n is required with --window`},
		{name: "set n 0", args: window("api", "0", "1m"), code: usage, stderr: `set: --n "0": want a finite number of permits per window, at least 1`},
		{name: "set n NaN", args: window("api", "NaN", "1m"), code: usage, stderr: `set: --n "NaN": want a finite number`},
		{name: "set n Inf", args: window("api", "Inf", "1m"), code: usage, stderr: `set: --n "Inf": want a finite number`},
		{name: "set n too large", args: window("api", "1e16", "1m"), code: usage, stderr: `set: --n 1e16 --window 1m: reserve: a window needs N >= 1`},
		{name: "set window 0", args: window("api", "5", "0s"), code: usage, stderr: `set: --window "0s": want a positive duration`},
		{name: "set window negative", args: window("api", "5", "-1m"), code: usage, stderr: `set: --window "-1m": want a positive duration`},
		{name: "set window not a duration", args: window("api", "5", "daily"), code: usage, stderr: `set: --window "daily": want a positive duration`},
		{name: "set window too long", args: window("api", "5", "100000h"), code: usage, stderr: `set: --n 5 --window 100000h: reserve: a window needs`},
		{name: "set bad origin", args: append(window("api", "5", "1h"), "--origin", "yesterday"), code: usage, stderr: `set: --origin "yesterday": want a time`},
		{name: "set per unknown", args: []string{"set", "api", "--n", "5", "--per", "fortnight", "--reason", "x"}, code: usage, stderr: `set: --per "fortnight": want day, week or month`},
		{name: "set tz unknown", args: []string{"set", "api", "--n", "5", "--per", "day", "--tz", "Mars/Olympus", "--reason", "x"}, code: usage, stderr: `set: --tz "Mars/Olympus": unknown time zone`},
		{name: "set tz Local", args: []string{"set", "api", "--n", "5", "--per", "day", "--tz", "Local", "--reason", "x"}, code: usage, stderr: `set: --tz "Local": unknown time zone`},
		{name: "set tz without per", args: []string{"set", "api", "--n", "5", "--tz", "UTC", "--reason", "x"}, code: usage, stderr: `set: --tz "UTC" is the zone of a calendar window: give --per day, week or month with it`},
		{name: "set per with window", args: append(window("api", "5", "1h"), "--per", "day"), code: usage, stderr: `set: --per makes calendar windows \(the zone's days, weeks or months\): drop --window and --origin`},
		{name: "set per without n", args: []string{"set", "api", "--per", "day", "--reason", "x"}, code: usage, stderr: `set: --n is required with --per \(permits per day, at least 1\)`},
		{name: "set per n 0", args: []string{"set", "api", "--n", "0", "--per", "week", "--reason", "x"}, code: usage, stderr: `set: --n "0": want a finite number of permits per week, at least 1`},
		{name: "set unit without add", args: append(set("api", "1", "1"), "--unit", "tokens"), code: usage, stderr: `set: --unit is the unit of a new band, with --add`},
		{name: "set bad band name", args: append(set("api", "1", "1"), "--band", "a b"), code: usage, stderr: `set: --band "a b": reserve: invalid policy: band name "a b"`},
		{name: "set reserved band name", args: append(set("api", "1", "1"), "--band", "~p"), code: usage, stderr: `set: --band "~p": reserve: invalid policy`},
		{name: "set empty band name", args: append(set("api", "1", "1"), "--band", ""), code: usage, stderr: `set: --band "": reserve: invalid policy`},
		{name: "set rate in the band's units", args: append(set("api", "0", "1"), "--band", "tokens"), code: usage, stderr: `set: --rate "0": want a positive, finite number of tokens per second`},
		{name: "set file and rate", args: []string{"set", "api", "--file", badFile, "--rate", "1", "--reason", "x"}, code: usage, stderr: `set: --file gives the bands: drop --rate`},
		{name: "set file and band", args: []string{"set", "api", "--file", badFile, "--band", "a", "--reason", "x"}, code: usage, stderr: `set: --file gives the bands: drop --band`},
		{name: "set file missing", args: []string{"set", "api", "--file", filepath.Join(dir, "none.txt"), "--reason", "x"}, code: usage, stderr: `set: --file .*none.txt: no such file or directory`},
		{name: "set file bad line", args: []string{"set", "api", "--file", badFile, "--reason", "x"}, code: usage, stderr: `set: --file .*bad.txt: line 3: "requests 500 per 1m": want "NAME: RATE/s, burst BURST", "NAME: N per DURATION \[from TIME\]" or "NAME: N/day\|week\|month ZONE"`},
		{name: "set file empty", args: []string{"set", "api", "--file", emptyFile, "--reason", "x"}, code: usage, stderr: `set: --file .*empty.txt: no band`},
		{name: "set file empty path", args: []string{"set", "api", "--file", "", "--reason", "x"}, code: usage, stderr: `set: --file: empty path`},
		{name: "set without reason", args: []string{"set", "api", "--rate", "1", "--burst", "1"}, code: usage, stderr: `set: --reason is required`},
		{name: "set blank reason", args: []string{"set", "api", "--rate", "1", "--burst", "1", "--reason", "  "}, code: usage, stderr: `set: --reason is required`},
		{name: "set blank who", args: []string{"set", "api", "--rate", "1", "--burst", "1", "--reason", "x", "--who", ""}, code: usage, stderr: `set: --who is empty`},
		{name: "in-flight 0", args: []string{"set", "api", "--in-flight", "0", "--reason", "x"}, code: usage, stderr: `set: --in-flight "0": want a whole number of calls open at once, from 1 to 1000000`},
		{name: "in-flight negative", args: []string{"set", "api", "--in-flight", "-4", "--reason", "x"}, code: usage, stderr: `set: --in-flight "-4": want a whole number`},
		{name: "in-flight too large", args: []string{"set", "api", "--in-flight", "1000001", "--reason", "x"}, code: usage, stderr: `set: --in-flight "1000001": want a whole number of calls open at once, from 1 to 1000000`},
		{name: "in-flight fraction", args: []string{"set", "api", "--in-flight", "2.5", "--reason", "x"}, code: usage, stderr: `set: --in-flight "2.5": want a whole number`},
		{name: "in-flight not a number", args: []string{"set", "api", "--in-flight", "many", "--reason", "x"}, code: usage, stderr: `set: --in-flight "many": want a whole number`},
		{name: "in-flight empty", args: []string{"set", "api", "--in-flight", "", "--reason", "x"}, code: usage, stderr: `set: --in-flight "": want a whole number`},
		{name: "in-flight with rate", args: append(set("api", "1", "1"), "--in-flight", "4"), code: usage, stderr: `set: --in-flight sets the N of the key's in-flight band, alone: drop --rate`},
		{name: "in-flight with shadow", args: []string{"set", "api", "--in-flight", "4", "--shadow", "--reason", "x"}, code: usage, stderr: `set: --in-flight sets the N of the key's in-flight band, alone: drop --shadow`},
		{name: "in-flight without reason", args: []string{"set", "api", "--in-flight", "4"}, code: usage, stderr: `set: --reason is required`},
		{name: "in-flight the fleet's name", args: []string{"set", "limiters", "--in-flight", "4", "--reason", "x"}, code: usage, stderr: `set: key "limiters": admin: reserve: the key "limiters" is reserved`},
		{name: "unset in-flight nothing stored", args: []string{"unset", "api", "--in-flight", "--reason", "x"}, code: runtime, stderr: `unset: key "api" has no stored in-flight N under prefix .*: nothing changed`},
		{name: "unset in-flight without reason", args: []string{"unset", "api", "--in-flight"}, code: usage, stderr: `unset: --reason is required`},
		{name: "negative heartbeat", args: []string{"-heartbeat", "-1s", "status"}, code: usage, stderr: `-heartbeat -1s: want the fleet's reserve.Options.HeartbeatInterval, at least 1ms`},
		{name: "bad heartbeat", args: []string{"status", "-heartbeat", "often"}, code: usage, stderr: `status: invalid value "often" for flag -heartbeat`},
		{name: "unset without key", args: []string{"unset", "--reason", "x"}, code: usage, stderr: `unset: missing KEY`},
		{name: "unset without reason", args: []string{"unset", "api"}, code: usage, stderr: `unset: --reason is required`},
		{name: "pause without duration", args: []string{"pause", "api", "--reason", "x"}, code: usage, stderr: `pause: missing DURATION`},
		{name: "pause bad duration", args: []string{"pause", "api", "soon", "--reason", "x"}, code: usage, stderr: `pause: DURATION "soon": want a positive duration`},
		{name: "pause no unit", args: []string{"pause", "api", "5", "--reason", "x"}, code: usage, stderr: `pause: DURATION "5": want a positive duration`},
		{name: "pause zero", args: []string{"pause", "api", "0s", "--reason", "x"}, code: usage, stderr: `pause: DURATION "0s": want a positive duration`},
		{name: "pause negative", args: []string{"pause", "api", "-5s", "--reason", "x"}, code: usage, stderr: `pause: DURATION "-5s": want a positive duration`},
		{name: "pause overflows", args: []string{"pause", "api", "10000000h", "--reason", "x"}, code: usage, stderr: `pause: DURATION "10000000h": too long \(at most 87600h0m0s, 10 years\)`},
		{name: "pause over 10 years", args: []string{"pause", "api", "87601h", "--reason", "x"}, code: usage, stderr: `pause: DURATION "87601h": too long`},
		{name: "pause without reason", args: []string{"pause", "api", "10s"}, code: usage, stderr: `pause: --reason is required`},
		{name: "resume without reason", args: []string{"resume", "api"}, code: usage, stderr: `resume: --reason is required`},
		{name: "weight without weight", args: []string{"weight", "api", "acme", "--reason", "x"}, code: usage, stderr: `weight: missing WEIGHT`},
		{name: "weight without tenant", args: []string{"weight", "api", "--reason", "x"}, code: usage, stderr: `weight: missing TENANT`},
		{name: "weight empty tenant", args: []string{"weight", "api", "", "2", "--reason", "x"}, code: usage, stderr: `weight: empty TENANT`},
		{name: "weight 0", args: []string{"weight", "api", "acme", "0", "--reason", "x"}, code: usage, stderr: `weight: WEIGHT "0": want a number from 1e-6 to 1e6`},
		{name: "weight NaN", args: []string{"weight", "api", "acme", "NaN", "--reason", "x"}, code: usage, stderr: `weight: WEIGHT "NaN": want a number`},
		{name: "weight Inf", args: []string{"weight", "api", "acme", "Inf", "--reason", "x"}, code: usage, stderr: `weight: WEIGHT "Inf": want a number`},
		{name: "weight too large", args: []string{"weight", "api", "acme", "1e7", "--reason", "x"}, code: usage, stderr: `weight: WEIGHT "1e7": want a number`},
		{name: "weight not a number", args: []string{"weight", "api", "acme", "heavy", "--reason", "x"}, code: usage, stderr: `weight: WEIGHT "heavy": want a number`},
		{name: "weight long tenant", args: []string{"weight", "api", strings.Repeat("t", 257), "2", "--reason", "x"}, code: usage, stderr: `weight: TENANT of 257 bytes: at most 256`},
		{name: "weight without reason", args: []string{"weight", "api", "acme", "2"}, code: usage, stderr: `weight: --reason is required`},
		{name: "weight unset extra", args: []string{"weight", "api", "acme", "2", "--unset", "--reason", "x"}, code: usage, stderr: `weight: unexpected argument "2"`},
		{name: "history without key", args: []string{"history"}, code: usage, stderr: `history: missing KEY`},
		{name: "history extra", args: []string{"history", "api", "more"}, code: usage, stderr: `history: unexpected argument "more"`},
		{name: "history of the fleet's name", args: []string{"history", "limiters"}, code: usage, stderr: `history: key "limiters": admin: reserve: the key "limiters" is reserved for the fleet's records`},
		{name: "status of the fleet's name", args: []string{"status", "limiters"}, code: usage, stderr: `status: key "limiters": admin: reserve: the key "limiters" is reserved`},
		{name: "pause the fleet's name", args: []string{"pause", "limiters", "10s", "--reason", "x"}, code: usage, stderr: `pause: key "limiters": admin: reserve: the key "limiters" is reserved`},
		{name: "set the fleet's name", args: set("limiters", "1", "1"), code: usage, stderr: `set: key "limiters": admin: reserve: the key "limiters" is reserved`},
		{name: "weight the fleet's name", args: []string{"weight", "limiters", "acme", "2", "--reason", "x"}, code: usage, stderr: `weight: key "limiters": admin: reserve: the key "limiters" is reserved`},

		{name: "web extra argument", args: []string{"web", "a*", "b"}, code: usage, stderr: `web: unexpected argument "b"`},
		{name: "web unknown flag", args: []string{"web", "-port", "80"}, code: usage, stderr: `web: flag provided but not defined: -port`},
		{name: "web bad addr", args: []string{"web", "-addr", "8080"}, code: usage, stderr: `web: -addr "8080": want host:port, such as 127.0.0.1:8080`},
		{name: "web bad port", args: []string{"web", "-addr", "127.0.0.1:http"}, code: usage, stderr: `web: -addr "127.0.0.1:http": port "http": want a number from 0 \(a free port\) to 65535`},
		{name: "web every interface", args: []string{"web", "-addr", ":8080"}, code: usage,
			stderr: `web: -addr ":8080" is every interface, not a loopback address: other hosts could reach the view over plain HTTP; pass -expose to mean it \(or keep 127.0.0.1 and reach it through an SSH tunnel\)`},
		{name: "web another host", args: []string{"web", "-addr", "10.1.2.3:8080"}, code: usage, stderr: `web: -addr "10.1.2.3:8080" is host "10.1.2.3", not a loopback address`},
		{name: "web write without token", args: []string{"web", "-write"}, code: usage, stderr: `web: -write needs a token: set PACER_WEB_TOKEN \(or pass -token\); the page asks for it before any change`},
		{name: "web short token", args: []string{"web", "-write", "-token", "secret"}, code: usage, stderr: `web: the token has 6 characters: want at least 16 \(openssl rand -hex 16 makes one\)`},
		{name: "web short interval", args: []string{"web", "-interval", "10ms"}, code: usage, stderr: `web: -interval 10ms: want 100ms to 1m`},
		{name: "web port in use", args: []string{"web", "-addr", busy.Addr().String()}, code: runtime, stderr: `web: cannot serve on ` + regexp.QuoteMeta(busy.Addr().String()) + `: .*address already in use`},

		{name: "no redis", args: []string{"status"}, raw: true, code: usage, stderr: `no Redis given: pass -redis URL .* or set REDIS_URL`},
		{name: "bad redis URL", args: []string{"-redis", "http://127.0.0.1:6379", "status"}, raw: true, code: usage, stderr: `-redis: .*scheme`},
		{name: "bad prefix", args: []string{"-redis", f.srv.URL, "-prefix", "a{b", "status"}, raw: true, code: usage, stderr: `-prefix "a\{b": `},
		{name: "redis unreachable", args: []string{"-redis", closed, "-prefix", f.prefix, "status"}, raw: true, code: runtime,
			stderr: `cannot reach Redis at ` + regexp.QuoteMeta(closed) + `: .*refused`},
		{name: "redis unreachable web", args: []string{"-redis", closed, "-prefix", f.prefix, "web", "-addr", "127.0.0.1:0"}, raw: true, code: runtime,
			stderr: `cannot reach Redis at ` + regexp.QuoteMeta(closed)},
		{name: "redis unreachable set", args: append([]string{"-redis", "redis://" + closed + "/0", "-prefix", f.prefix}, set("api", "1", "1")...), raw: true, code: runtime,
			stderr: `cannot reach Redis at ` + regexp.QuoteMeta(closed)},

		{name: "status unknown key", args: []string{"status", "nobody"}, code: runtime, stderr: `status: unknown key "nobody": no state, no stored limit and no live Limiter reports it under prefix .*; this Redis holds pacer-like keys under -prefix .*(?:"` + regexp.QuoteMeta(f.prefix) + `" \(\d+ keys\)|and \d+ more)`},
		{name: "status no match", args: []string{"status", "zz*"}, code: runtime, stderr: `status: no key matches "zz\*" under prefix "` + regexp.QuoteMeta(f.prefix) + `"; this Redis holds pacer-like keys under -prefix .*(?:"` + regexp.QuoteMeta(f.prefix) + `" \(\d+ keys\)|and \d+ more)`},
		{name: "status no match json", args: []string{"status", "zz*", "--json"}, code: runtime, stderr: `status: no key matches "zz\*"`},
		{name: "status wrong prefix", args: []string{"-redis", f.srv.URL, "-prefix", "elsewhere:", "status"}, raw: true, code: runtime,
			stderr: `status: no key matches "\*" under prefix "elsewhere:"; this Redis holds pacer-like keys under -prefix .*(?:"` + regexp.QuoteMeta(f.prefix) + `"|and \d+ more)`},
		{name: "pause unknown key", args: []string{"pause", "nobody", "10s", "--reason", "x"}, code: runtime, stderr: `pause: unknown key "nobody"`},
		{name: "resume unknown key", args: []string{"resume", "nobody", "--reason", "x"}, code: runtime, stderr: `resume: unknown key "nobody"`},
		{name: "history unknown key", args: []string{"history", "nobody"}, code: runtime, stderr: `history: unknown key "nobody"`},
		{name: "history unknown key json", args: []string{"history", "nobody", "--json"}, code: runtime, stderr: `history: unknown key "nobody"`},
		{name: "set unknown band", args: append(set("api", "1", "1"), "--band", "tokenz"), code: runtime,
			stderr: `set: unknown band "tokenz" on key "api" \(its bands: permits\): check the name, or add the band with --add; nothing changed`},
		{name: "set band on a unit not charged", args: append(set("api", "1", "1"), "--band", "extra", "--add"), code: runtime,
			stderr: `set: reserve: invalid policy: band "extra" charges extra, which the fleet's code does not charge on "api" \(it charges permits\): it would limit nothing; nothing changed`},
		{name: "set shadow over other stored bands", args: append(set("multi", "2", "1"), "--band", "a", "--shadow"), code: runtime,
			stderr: `set: the stored limit is in the other mode: key "multi"'s stored limit is enforced and holds b, which this change does not name: storing it in shadow mode would switch them too: set them all \(--file\), or store only the bands given \(--replace\); nothing changed`},
		{name: "pause history of another type", args: []string{"pause", "hist", "10s", "--reason", "x"}, code: runtime, stderr: `pause: key "hist" is not pacer's`},
		{name: "unset nothing stored", args: []string{"unset", "quiet", "--reason", "x"}, code: runtime, stderr: `unset: key "quiet" has no stored limit under prefix .*: nothing changed`},
		{name: "resume not paused", args: []string{"resume", "api", "--reason", "x"}, code: runtime, stderr: `resume: key "api" is not paused: nothing changed`},
		{name: "weight unset nothing stored", args: []string{"weight", "api", "acme", "--unset", "--reason", "x"}, code: runtime, stderr: `weight: tenant "acme" has no stored weight on key "api" under prefix .*: nothing changed`},
		{name: "weight wrong type", args: []string{"weight", "h", "acme", "2", "--reason", "x"}, code: runtime, stderr: `weight: key "h" is not pacer's`},
		{name: "status wrong type", args: []string{"status", "h"}, code: runtime, stderr: `status: key "h" is not pacer's: Redis key ".*\{h\}" \(or one beside it\) holds a value of another type`},
		{name: "set wrong type", args: set("h", "1", "1"), code: runtime, stderr: `set: key "h" is not pacer's`},
		{name: "unset wrong type", args: []string{"unset", "h", "--reason", "x"}, code: runtime, stderr: `unset: key "h" is not pacer's`},
		{name: "pause wrong type", args: []string{"pause", "h", "10s", "--reason", "x"}, code: runtime, stderr: `pause: key "h" is not pacer's`},
		{name: "resume wrong type", args: []string{"resume", "h", "--reason", "x"}, code: runtime, stderr: `resume: key "h" is not pacer's`},
		{name: "history wrong type", args: []string{"history", "h"}, code: runtime, stderr: `history: key "h" is not pacer's`},
		{name: "status all with a wrong type", args: []string{"status", "-sample", "0"}, code: runtime, stdout: true,
			stderr: `status: key "h" is not pacer's.*\npacer: status: 1 of 5 keys could not be read`},
	}
	before := f.snapshot()
	if len(before) == 0 {
		t.Fatal("no keys to guard")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r result
			if tt.raw {
				r = f.run(tt.args...)
			} else {
				r = f.pacer(tt.args...)
			}
			if r.code != tt.code {
				t.Errorf("pacer %q: exit %d, want %d (stderr %q)", tt.args, r.code, tt.code, r.stderr)
			}
			if !regexp.MustCompile(`^pacer: ` + tt.stderr + `.*\n$`).MatchString(r.stderr) {
				t.Errorf("pacer %q: stderr %q, want one line matching %q", tt.args, r.stderr, tt.stderr)
			}
			if !tt.stdout && r.stdout != "" {
				t.Errorf("pacer %q: stdout %q, want nothing", tt.args, r.stdout)
			}
			if tt.stdout && (!strings.Contains(r.stdout, "api\n") || !strings.Contains(r.stdout, "quiet\n")) {
				t.Errorf("pacer %q: stdout %q, want the keys it could read", tt.args, r.stdout)
			}
			if after := f.snapshot(); !maps.Equal(before, after) {
				t.Errorf("pacer %q changed Redis:\nbefore %v\nafter  %v", tt.args, before, after)
			}
		})
	}
}

// TestUnsetNothingOfTheKey: an unset of a key Redis holds nothing of (a
// mistyped key, or one a Redis restarted empty lost while Limiters still
// remember its stored limit) exits 1 saying nothing was stored, and is
// recorded in the key's history, so that no Limiter puts back the limit
// it last saw (reserve's TestUnsetOnLostKeyStands; combination runner,
// seed 86).
func TestUnsetNothingOfTheKey(t *testing.T) {
	f := newFixture(t)
	r := f.pacer("unset", "lost", "--reason", "the provider is back to normal", "--who", "ops")
	if r.code != exitRuntime || r.stdout != "" {
		t.Fatalf("pacer unset lost: exit %d, stdout %q, want %d and nothing", r.code, r.stdout, exitRuntime)
	}
	want := `^pacer: unset: key "lost" has no stored limit under prefix "` + regexp.QuoteMeta(f.prefix) +
		`", and Redis holds nothing of it \(a mistyped key, or a Redis restarted empty\): the unset is recorded in its history, so that no Limiter puts back a stored limit Redis lost\n$`
	if !regexp.MustCompile(want).MatchString(r.stderr) {
		t.Fatalf("pacer unset lost: stderr %q, want %q", r.stderr, want)
	}
	h := f.pacer("history", "lost")
	if h.code != 0 || !strings.Contains(h.stdout, "unset") || !strings.Contains(h.stdout, "ops") {
		t.Fatalf("pacer history lost: exit %d, stdout %q, stderr %q: want the unset", h.code, h.stdout, h.stderr)
	}
	// Once recorded, the key has a history: a second unset changes nothing.
	r = f.pacer("unset", "lost", "--reason", "again")
	if r.code != exitRuntime || !strings.Contains(r.stderr, `has no stored limit under prefix "`+f.prefix+`": nothing changed`) {
		t.Fatalf("pacer unset lost again: exit %d, stderr %q", r.code, r.stderr)
	}
}
