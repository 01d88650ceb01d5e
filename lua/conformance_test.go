package lua_test

// The conformance test: it drives the scripts through docs/protocol.md's
// contract alone, with raw EVALSHA calls (the scripts' text is the
// protocol's artifact: it loads package lua's exported strings, as a client
// in another language loads the lua/ files) and GETs, and none of reserve's
// or admin's Go code. Each check names the section of docs/protocol.md it
// holds to. This file has the connection, the runner of the page's redis
// blocks and the state parser written from the page's grammar;
// conformance_cases_test.go the checks beyond the page's examples.

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

const protocolDoc = "../docs/protocol.md"

// scripts are the exported scripts by the names docs/protocol.md's
// "Scripts" table gives them.
var scripts = map[string]string{
	"Reserve": lua.Reserve, "Fair": lua.Fair, "Adjust": lua.Adjust, "Pause": lua.Pause,
	"Resume": lua.Resume, "Peek": lua.Peek, "Claim": lua.Claim, "Hold": lua.Hold,
	"Lease": lua.Lease, "Rewrite": lua.Rewrite, "Heartbeat": lua.Heartbeat, "Admin": lua.Admin,
	"Restore": lua.Restore, "Adaptive": lua.Adaptive, "Quota": lua.Quota, "Seats": lua.Seats,
}

// conn is a Redis connection with every script loaded, and a key prefix of
// its own.
type conn struct {
	t      *testing.T
	rdb    *redis.Client
	prefix string
	sha    map[string]string // by script name in upper case: "RESERVE"
	states int               // states parsed
	rec    *recorder         // the calls made, for lua/testdata/conformance.json
}

// newConn loads every script with SCRIPT LOAD, and checks that Redis names
// it by the SHA1 of its text ("Scripts").
func newConn(t *testing.T) *conn {
	t.Helper()
	s := redistest.New(t)
	c := &conn{t: t, rdb: s.Client, prefix: redistest.Prefix(t), sha: map[string]string{}}
	for name, text := range scripts {
		got, err := c.rdb.Do(context.Background(), "SCRIPT", "LOAD", text).Text()
		if err != nil {
			t.Fatalf("SCRIPT LOAD %s: %v", name, err)
		}
		sum := sha1.Sum([]byte(text))
		if want := hex.EncodeToString(sum[:]); got != want {
			t.Fatalf("SCRIPT LOAD %s = %s, want the SHA1 of its text %s", name, got, want)
		}
		c.sha[strings.ToUpper(name)] = got
	}
	c.rec = newRecorder(c)
	return c
}

// key returns key k's Redis key plus suffix ("Keys": P{k}).
func (c *conn) key(k, suffix string) string { return c.prefix + "{" + k + "}" + suffix }

// do runs a raw command.
func (c *conn) do(args ...any) (any, error) {
	v, err := c.rdb.Do(context.Background(), args...).Result()
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	c.rec.add(args, v, err)
	return v, err
}

// eval runs script (by its upper-case name) with EVALSHA.
func (c *conn) eval(script string, keys []string, args ...string) (any, error) {
	cmd := []any{"EVALSHA", c.sha[script], len(keys)}
	for _, k := range keys {
		cmd = append(cmd, k)
	}
	for _, a := range args {
		cmd = append(cmd, a)
	}
	return c.do(cmd...)
}

// mustEval is eval that fails the test on an error.
func (c *conn) mustEval(script string, keys []string, args ...string) any {
	c.t.Helper()
	v, err := c.eval(script, keys, args...)
	if err != nil {
		c.t.Fatalf("%s %v %q: %v", script, keys, args, err)
	}
	return v
}

// get returns the string at key, "" if none, and parses it as a state when
// it is one (a key without a suffix).
func (c *conn) get(key string) string {
	c.t.Helper()
	r, err := c.do("GET", key)
	if r == nil && err == nil {
		return ""
	}
	v, _ := r.(string)
	if err != nil {
		c.t.Fatalf("GET %s: %v", key, err)
	}
	if strings.HasSuffix(key, "}") {
		c.parse(v)
	}
	return v
}

// parse parses a state per "The state", failing the test if it does not.
func (c *conn) parse(text string) state {
	c.t.Helper()
	st, err := parseState(text)
	if err != nil {
		c.t.Errorf("docs/protocol.md, The state: %v", err)
	}
	c.states++
	if err == nil {
		c.rec.states[text] = st
	}
	return st
}

// code returns the code of a script's error reply ("Errors"), "" for nil.
func code(err error) string {
	if err == nil {
		return ""
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return "not a Redis error: " + err.Error()
	}
	msg := re.Error()
	if i := strings.IndexByte(msg, ' '); i > 0 {
		msg = msg[:i]
	}
	return msg
}

// state is a state string read per docs/protocol.md's grammar.
type state struct {
	format int
	t      int64
	x      int64 // ms after t (format 2), ns (format 1)
	seq    int64
	pause  float64 // ns after t
	stored bool    // the flag: a stored limit may exist
	recs   []record
}

// record is one record of a state: a bucket's z and e, a window's w and u,
// or a reserved record ("~p", "~s", "~l") as its two fields.
type record struct {
	name   string
	window bool
	z, e   float64
	w      int64
	u      float64
	f1, f2 string
}

var (
	reTime   = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{3})?$`)
	reDec3   = regexp.MustCompile(`^-?[0-9]+\.[0-9]{3}$`)
	reDigits = regexp.MustCompile(`^[0-9]+$`)
	reInt    = regexp.MustCompile(`^-?[0-9]+$`)
	reUnits  = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?$`)
	reT      = regexp.MustCompile(`^[0-9]{2,}$`)
	reResume = regexp.MustCompile(`^[0-9]+:[0-9]+$`)
)

// parseState reads a state string by "The state"'s grammar, strictly: one
// space between fields, every field in its form.
func parseState(text string) (state, error) {
	bad := func(why string) (state, error) { return state{}, fmt.Errorf("state %q: %s", text, why) }
	f := strings.Split(text, " ")
	var st state
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	integer := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
	var rest []string
	timeRe := reTime
	if f[0] == "1" {
		// format1 = "1" SP t SP x1 SP s SP p1 SP c *(SP record1)
		st.format, timeRe = 1, reDec3
		if len(f) < 6 || !reDigits.MatchString(f[1]) || !reInt.MatchString(f[2]) || !reDigits.MatchString(f[3]) ||
			!reDec3.MatchString(f[4]) || (f[5] != "0" && f[5] != "1") {
			return bad("not format 1's head: 1 t x1 s p1 c")
		}
		st.t, st.x, st.seq, st.pause, st.stored = integer(f[1]), integer(f[2]), integer(f[3]), num(f[4]), f[5] == "1"
		rest = f[6:]
	} else {
		// format2 = t SP x SP s SP p (SP z SP e / *(SP record))
		st.format = 2
		if len(f) < 4 || !reT.MatchString(f[0]) || !reDigits.MatchString(f[1]) || !reDigits.MatchString(f[2]) {
			return bad("not format 2's head: t x s p")
		}
		p, c := strings.CutPrefix(f[3], "c")
		if !reTime.MatchString(p) {
			return bad("p is not [c]time")
		}
		st.t, st.x, st.seq, st.pause, st.stored = integer(f[0]), integer(f[1]), integer(f[2]), num(p), c
		rest = f[4:]
		if len(rest) == 2 {
			if !reTime.MatchString(rest[0]) || !reTime.MatchString(rest[1]) {
				return bad("a Limit's z e are not times")
			}
			st.recs = []record{{name: "permits", z: num(rest[0]), e: num(rest[1])}}
			return st, nil
		}
	}
	if len(rest)%3 != 0 {
		return bad("records are not of three fields")
	}
	for i := 0; i < len(rest); i += 3 {
		r := record{name: rest[i], f1: rest[i+1], f2: rest[i+2]}
		switch {
		case r.name == "~p":
			if !reDigits.MatchString(r.f1) || !timeRe.MatchString(r.f2) {
				return bad("bad ~p record")
			}
		case r.name == "~s":
			if !reResume.MatchString(r.f1) || !reDigits.MatchString(r.f2) {
				return bad("bad ~s record")
			}
		case r.name == "~l":
			if !reDigits.MatchString(r.f1) || !reDigits.MatchString(r.f2) {
				return bad("bad ~l record")
			}
		case r.name == "~e":
			if strings.HasPrefix(r.f1, "~") || !timeRe.MatchString(r.f2) {
				return bad("bad ~e record")
			}
		case strings.HasPrefix(r.name, "~"):
			return bad("unknown reserved record " + r.name)
		case st.format == 2 && strings.HasPrefix(r.f1, "w"):
			if !reInt.MatchString(r.f1[1:]) || !reUnits.MatchString(r.f2) {
				return bad("bad window record " + r.name)
			}
			r.window, r.w, r.u = true, integer(r.f1[1:]), num(r.f2)
		case st.format == 1 && !strings.Contains(r.f1, "."):
			if !reInt.MatchString(r.f1) || !reUnits.MatchString(r.f2) {
				return bad("bad window record " + r.name)
			}
			r.window, r.w, r.u = true, integer(r.f1), num(r.f2)
		default:
			if !timeRe.MatchString(r.f1) || !timeRe.MatchString(r.f2) {
				return bad("bad bucket record " + r.name)
			}
			r.z, r.e = num(r.f1), num(r.f2)
		}
		st.recs = append(st.recs, r)
	}
	return st, nil
}

// band returns the record of band name.
func (st state) band(name string) (record, bool) {
	for _, r := range st.recs {
		if r.name == name {
			return r, true
		}
	}
	return record{}, false
}

// TestScriptsTable: "Scripts" names the files each exported script is the
// concatenation of, byte for byte.
func TestScriptsTable(t *testing.T) {
	text, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `([A-Za-z]+)` \\| (`[a-z_]+\\.lua`(?: \\+ `[a-z_]+\\.lua`)*) \\|$")
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(string(text), -1) {
		name := m[1]
		want, ok := scripts[name]
		if !ok {
			t.Errorf("Scripts names %s, which package lua does not export", name)
			continue
		}
		var got strings.Builder
		for _, f := range strings.Split(m[2], " + ") {
			b, err := os.ReadFile(strings.Trim(f, "`"))
			if err != nil {
				t.Fatal(err)
			}
			got.Write(b)
		}
		if got.String() != want {
			t.Errorf("Scripts: %s is not %s", name, m[2])
		}
		seen[name] = true
	}
	for name := range scripts {
		if !seen[name] {
			t.Errorf("Scripts does not give %s's files", name)
		}
	}
}

// TestProtocolDoc runs every redis block of docs/protocol.md in order, as
// one session, and checks each reply as the page gives it, and every state
// they show against the grammar. Every other block must be text (the
// grammar): a new kind of block is not left unchecked.
func TestProtocolDoc(t *testing.T) {
	c := newConn(t)
	text, err := os.ReadFile(protocolDoc)
	if err != nil {
		t.Fatal(err)
	}
	blocks, commands := 0, 0
	sc := bufio.NewScanner(strings.NewReader(string(text)))
	in, info, lineNo := false, "", 0
	var block []string
	for sc.Scan() {
		line := sc.Text()
		lineNo++
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, info, block = true, strings.TrimPrefix(line, "```"), nil
			if info != "redis" && info != "text" {
				t.Errorf("line %d: a block of %q: want redis (run here) or text", lineNo, info)
			}
		case in && line == "```":
			in = false
			if info == "redis" {
				blocks++
				commands += c.runBlock(lineNo, block)
			}
		case in:
			block = append(block, line)
		}
	}
	t.Logf("ran %d redis blocks, %d commands; parsed %d states", blocks, commands, c.states)
	if blocks < 12 || commands < 30 || c.states < 15 {
		t.Errorf("ran %d redis blocks, %d commands, parsed %d states: the page has more", blocks, commands, c.states)
	}
}

// runBlock runs one redis block; end is the line of its closing fence.
func (c *conn) runBlock(end int, lines []string) int {
	c.t.Helper()
	n := 0
	for i := 0; i < len(lines); i++ {
		cmd := lines[i]
		for strings.HasSuffix(cmd, " \\") && i+1 < len(lines) {
			i++
			cmd = strings.TrimSuffix(cmd, "\\") + strings.TrimSpace(lines[i])
		}
		if i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "-> ") {
			c.t.Fatalf("block ending at line %d: %q has no reply after it", end, cmd)
		}
		i++
		want := strings.TrimPrefix(lines[i], "-> ")
		args, err := c.command(cmd)
		if err != nil {
			c.t.Fatalf("block ending at line %d: %q: %v", end, cmd, err)
		}
		got, err := c.do(args...)
		n++
		if w, ok := strings.CutPrefix(want, "(error) "); ok {
			if err == nil || err.Error() != w {
				c.t.Errorf("block ending at line %d: %s\n got %v, %v\nwant (error) %s", end, cmd, show(got), err, w)
			}
			continue
		}
		if err != nil {
			c.t.Errorf("block ending at line %d: %s\n got (error) %v\nwant %s", end, cmd, err, want)
			continue
		}
		wv, err := parseReply(want)
		if err != nil {
			c.t.Fatalf("block ending at line %d: reply %q: %v", end, want, err)
		}
		if !matches(got, wv) {
			c.t.Errorf("block ending at line %d: %s\n got %s\nwant %s", end, cmd, show(got), want)
		}
		c.statesOf(args, got)
	}
	return n
}

// statesOf parses the states a command's reply shows: a GET of a key's
// state, Reserve's and Fair's state entry, Rewrite's reply.
func (c *conn) statesOf(args []any, reply any) {
	c.t.Helper()
	name := strings.ToUpper(fmt.Sprint(args[0]))
	switch {
	case name == "GET" && strings.HasSuffix(fmt.Sprint(args[1]), "}") && reply != nil:
		c.parse(reply.(string))
	case name == "EVALSHA" && (args[1] == c.sha["RESERVE"] || args[1] == c.sha["FAIR"]):
		if a, ok := reply.([]any); ok && len(a) >= 5 {
			if s, _ := a[len(a)-3].(string); s != "" {
				c.parse(s)
			}
		}
	case name == "EVALSHA" && args[1] == c.sha["REWRITE"]:
		if s, ok := reply.(string); ok {
			c.parse(s)
		}
	}
}

// command splits a block's command line as redis-cli would (double quotes
// around an argument), with $NAME for a script's SHA1 and the page's
// prefix pacer: replaced by this test's own.
func (c *conn) command(line string) ([]any, error) {
	var args []any
	rest := strings.TrimSpace(line)
	for rest != "" {
		var tok string
		if rest[0] == '"' {
			j := strings.IndexByte(rest[1:], '"')
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			tok, rest = rest[1:1+j], rest[2+j:]
		} else {
			tok, rest, _ = strings.Cut(rest, " ")
			if s, ok := strings.CutPrefix(tok, "$"); ok {
				sha, ok := c.sha[s]
				if !ok {
					return nil, fmt.Errorf("no script %s", tok)
				}
				tok = sha
			} else if k, ok := strings.CutPrefix(tok, "pacer:{"); ok {
				tok = c.prefix + "{" + k
			}
		}
		args = append(args, tok)
		rest = strings.TrimLeft(rest, " ")
	}
	return args, nil
}

// wildcard is a reply's "*": any value.
type wildcard struct{}

// parseReply reads a reply as the page writes it: integers, "strings"
// (JSON), [arrays], nil and *.
func parseReply(s string) (any, error) {
	v, rest, err := replyValue(strings.TrimSpace(s))
	if err == nil && strings.TrimSpace(rest) != "" {
		err = fmt.Errorf("left over: %q", rest)
	}
	return v, err
}

func replyValue(s string) (any, string, error) {
	switch {
	case s == "":
		return nil, "", errors.New("missing value")
	case s[0] == '*':
		return wildcard{}, s[1:], nil
	case strings.HasPrefix(s, "nil"):
		return nil, s[3:], nil
	case s[0] == '[':
		out := []any{}
		s = strings.TrimLeft(s[1:], " ")
		for !strings.HasPrefix(s, "]") {
			v, rest, err := replyValue(s)
			if err != nil {
				return nil, "", err
			}
			out = append(out, v)
			s = strings.TrimLeft(rest, " ")
			if r, ok := strings.CutPrefix(s, ","); ok {
				s = strings.TrimLeft(r, " ")
			} else if !strings.HasPrefix(s, "]") {
				return nil, "", fmt.Errorf("want , or ] at %q", s)
			}
		}
		return out, s[1:], nil
	case s[0] == '"':
		dec := json.NewDecoder(strings.NewReader(s))
		var str string
		if err := dec.Decode(&str); err != nil {
			return nil, "", err
		}
		return str, s[dec.InputOffset():], nil
	default:
		end := strings.IndexAny(s, ",] ")
		if end < 0 {
			end = len(s)
		}
		n, err := strconv.ParseInt(s[:end], 10, 64)
		return n, s[end:], err
	}
}

// matches reports whether a reply equals want, * matching anything.
func matches(got, want any) bool {
	switch w := want.(type) {
	case wildcard:
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !matches(g[i], w[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(got, want)
	}
}

// show writes a reply as the page does.
func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = show(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(x)
		return strings.TrimSuffix(b.String(), "\n")
	default:
		return fmt.Sprint(x)
	}
}
