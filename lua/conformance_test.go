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
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

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
	rec    *recorder         // the calls made, for lua/testdata/conformance.json (nil: not recorded)
}

// newConn loads every script with SCRIPT LOAD, and checks that Redis names
// it by the SHA1 of its text ("Scripts"). Its calls are recorded for
// lua/testdata/conformance.json, under the test's name.
func newConn(t *testing.T) *conn {
	t.Helper()
	c := newPlainConn(t)
	c.rec = newRecorder(c)
	return c
}

// newPlainConn is newConn whose calls are not recorded: a test of many
// random calls, which clients in other languages need not replay.
func newPlainConn(t *testing.T) *conn {
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
	if c.rec != nil {
		c.rec.add(args, v, err)
	}
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
	if err == nil && c.rec != nil {
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
// or a reserved record ("~p", "~s", "~l", "~w", "~e") as its two fields.
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
	// A pause's windows ("~w"): "-", or name:W pairs by name, comma-separated.
	reWindows = regexp.MustCompile(`^(-|[A-Za-z0-9._-]+:-?[0-9]+(,[A-Za-z0-9._-]+:-?[0-9]+)*)$`)
)

// parseState reads a state string by "The state"'s grammar and format 3's
// table, strictly: one space between fields, every field in its form.
func parseState(text string) (state, error) {
	bad := func(why string) (state, error) { return state{}, fmt.Errorf("state %q: %s", text, why) }
	if text != "" && text[0] >= 0xA0 {
		return parseState3(text)
	}
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
	return parseRecords(st, rest, timeRe, text)
}

// parseState3 reads a format 3 state by "The state"'s table: the first
// byte's form and flag, then the form's fields, little-endian.
func parseState3(text string) (state, error) {
	bad := func(why string) (state, error) { return state{}, fmt.Errorf("state %q: %s", text, why) }
	le := func(b string) uint64 {
		var v uint64
		for i := len(b) - 1; i >= 0; i-- {
			v = v<<8 | uint64(b[i])
		}
		return v
	}
	sle := func(b string) float64 {
		v := le(b)
		if n := uint(8 * len(b)); n < 64 && v&(1<<(n-1)) != 0 {
			v |= ^uint64(0) << n
		}
		return float64(int64(v))
	}
	dle := func(b string) float64 { return math.Float64frombits(le(b)) }
	st := state{format: 3, stored: text[0]&1 == 1}
	switch form := text[0] &^ 1; {
	case form == 0xA0 && len(text) == 11:
		st.t, st.x, st.seq = int64(le(text[1:8])), int64(le(text[8:10])), int64(text[10])
		st.recs = []record{{name: "permits"}}
	case form == 0xB0 && len(text) == 28:
		st.t, st.x, st.seq = int64(le(text[1:8])), int64(le(text[8:12])), int64(le(text[12:16]))
		st.recs = []record{{name: "permits", z: sle(text[16:22]), e: sle(text[22:28])}}
	case form == 0xC0 && len(text) == 34:
		st.t, st.x, st.seq = int64(le(text[1:8])), int64(le(text[8:12])), int64(le(text[12:18]))
		st.recs = []record{{name: "permits", z: dle(text[18:26]), e: dle(text[26:34])}}
	case form == 0xD0 && len(text) >= 28:
		st.t, st.x, st.seq, st.pause = int64(le(text[1:8])), int64(le(text[8:14])), int64(le(text[14:20])), dle(text[20:28])
		rest := text[28:]
		if rest == "" {
			return st, nil
		}
		if rest[0] != ' ' {
			return bad("the general form's records do not start with a space")
		}
		f := strings.Split(rest[1:], " ")
		if len(f) == 2 {
			if !reTime.MatchString(f[0]) || !reTime.MatchString(f[1]) {
				return bad("a Limit's z e are not times")
			}
			z, _ := strconv.ParseFloat(f[0], 64)
			e, _ := strconv.ParseFloat(f[1], 64)
			st.recs = []record{{name: "permits", z: z, e: e}}
			return st, nil
		}
		st.format = 2 // its records are format 2's
		st, err := parseRecords(st, f, reTime, text)
		st.format = 3
		return st, err
	default:
		return bad("not a form of format 3")
	}
	return st, nil
}

// parseRecords reads a state's records (formats 1 and 2, and format 3's
// general form) into st.
func parseRecords(st state, rest []string, timeRe *regexp.Regexp, text string) (state, error) {
	bad := func(why string) (state, error) { return state{}, fmt.Errorf("state %q: %s", text, why) }
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	integer := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
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
		case r.name == "~w":
			if !reDigits.MatchString(r.f1) || !reWindows.MatchString(r.f2) {
				return bad("bad ~w record")
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
		if isReserve := c.isReserve(args); isReserve {
			got = decodeReserve(c.t, got)
		}
		if want == "?" {
			c.t.Errorf("block ending at line %d: %s\n got %s\nwant ? (write the reply in the page)", end, cmd, show(got))
			c.statesOf(args, got)
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
	case c.isReserve(args):
		if r, ok := reply.(reserveReply); ok && r.state != "" {
			c.parse(r.state)
		}
	case name == "EVALSHA" && args[1] == c.sha["REWRITE"]:
		if s, ok := reply.(string); ok {
			c.parse(s)
		}
	}
}

// command splits a block's command line as redis-cli would (double quotes
// around an argument, \xHH and \" inside them), with $NAME for a script's
// SHA1 and the page's prefix pacer: replaced by this test's own; and the
// page's notation d"<numbers>" for the numbers as little-endian doubles
// (struct "<d" each), Ld"<rate> <burst>" for "L" and those.
func (c *conn) command(line string) ([]any, error) {
	var args []any
	rest := strings.TrimSpace(line)
	for rest != "" {
		var tok string
		switch {
		case strings.HasPrefix(rest, `d"`) || strings.HasPrefix(rest, `Ld"`):
			lead := ""
			if rest[0] == 'L' {
				lead, rest = "L", rest[1:]
			}
			j := strings.IndexByte(rest[2:], '"')
			if j < 0 {
				return nil, errors.New("unterminated d\"...\"")
			}
			var b []byte
			for _, f := range strings.Fields(rest[2 : 2+j]) {
				v, err := strconv.ParseFloat(f, 64)
				if err != nil {
					return nil, err
				}
				b = binary.LittleEndian.AppendUint64(b, math.Float64bits(v))
			}
			tok, rest = lead+string(b), rest[3+j:]
		case rest[0] == '"':
			var b strings.Builder
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				switch {
				case rest[i] == '\\' && i+3 < len(rest) && rest[i+1] == 'x':
					v, err := strconv.ParseUint(rest[i+2:i+4], 16, 8)
					if err != nil {
						return nil, err
					}
					b.WriteByte(byte(v))
					i += 3
				case rest[i] == '\\' && i+1 < len(rest):
					b.WriteByte(rest[i+1])
					i++
				default:
					b.WriteByte(rest[i])
				}
			}
			if i >= len(rest) {
				return nil, errors.New("unterminated quote")
			}
			tok, rest = b.String(), rest[i+1:]
		default:
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

// isReserve reports whether a command runs Reserve or Fair, whose reply
// is one string of bytes ("Reserve").
func (c *conn) isReserve(args []any) bool {
	return len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "EVALSHA") && (args[1] == c.sha["RESERVE"] || args[1] == c.sha["FAIR"])
}

// reserveReply is Reserve's reply decoded as "Reserve" gives it.
type reserveReply struct {
	nowUS, nowNS  int64
	grants        []int64 // wait_ns, seq per request
	state, stored string
	bys           string
}

// decodeReserve decodes Reserve's reply by "Reserve" (decodeReserveBytes);
// a reply it cannot decode fails the test. An error or nil is returned as
// it is.
func decodeReserve(t testing.TB, reply any) any {
	t.Helper()
	b, ok := reply.(string)
	if !ok {
		return reply // an error, or nil
	}
	r, err := decodeReserveBytes(b)
	if err != nil {
		t.Fatalf("Reserve's reply %s: %v", show(b), err)
	}
	return r
}

// decodeReserveBytes decodes Reserve's reply by "Reserve": "<I7HI4", m
// times "<i8i8", the state and the stored limit each after its "<I4"
// length, and the binding bands to the end.
func decodeReserveBytes(b string) (reserveReply, error) {
	le := func(s string) uint64 {
		var v uint64
		for i := len(s) - 1; i >= 0; i-- {
			v = v<<8 | uint64(s[i])
		}
		return v
	}
	if len(b) < 13 {
		return reserveReply{}, errors.New("shorter than its head")
	}
	r := reserveReply{nowUS: int64(le(b[:7])), nowNS: int64(le(b[7:9]))}
	m, pos := int(le(b[9:13])), 13
	if m < 0 || len(b) < pos+16*m {
		return reserveReply{}, fmt.Errorf("%d requests do not fit", m)
	}
	for range m {
		r.grants = append(r.grants, int64(le(b[pos:pos+8])), int64(le(b[pos+8:pos+16])))
		pos += 16
	}
	for _, dst := range []*string{&r.state, &r.stored} {
		if len(b) < pos+4 {
			return reserveReply{}, errors.New("cut short")
		}
		n := int(le(b[pos : pos+4]))
		pos += 4
		if n < 0 || len(b) < pos+n {
			return reserveReply{}, errors.New("cut short")
		}
		*dst = b[pos : pos+n]
		pos += n
	}
	r.bys = b[pos:]
	if len(strings.Fields(r.bys)) != m {
		return reserveReply{}, fmt.Errorf("%d binding bands for %d requests", len(strings.Fields(r.bys)), m)
	}
	return r, nil
}

// list is r as the page writes it, "reserve [...]".
func (r reserveReply) list() []any {
	out := []any{r.nowUS, r.nowNS}
	for _, g := range r.grants {
		out = append(out, g)
	}
	return append(out, r.state, r.stored, r.bys)
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
	case strings.HasPrefix(s, "reserve ["):
		v, rest, err := replyValue(s[len("reserve "):])
		if err != nil {
			return nil, "", err
		}
		return reserveList(v.([]any)), rest, nil
	case strings.HasPrefix(s, `x"`):
		j := strings.IndexByte(s[2:], '"')
		if j < 0 {
			return nil, "", errors.New(`unterminated x"..."`)
		}
		b, err := hex.DecodeString(s[2 : 2+j])
		return string(b), s[3+j:], err
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

// reserveList is a "reserve [...]" reply as the page writes it.
type reserveList []any

// matches reports whether a reply equals want, * matching anything.
func matches(got, want any) bool {
	switch w := want.(type) {
	case wildcard:
		return true
	case reserveList:
		r, ok := got.(reserveReply)
		return ok && matches(r.list(), []any(w))
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
	case reserveReply:
		return "reserve " + show(x.list())
	case nil:
		return "nil"
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = show(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case string:
		if x != "" && (x[0] >= 0xA0 || !utf8.ValidString(x)) {
			return `x"` + hex.EncodeToString([]byte(x)) + `"`
		}
		var b strings.Builder
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(x)
		return strings.TrimSuffix(b.String(), "\n")
	default:
		return fmt.Sprint(x)
	}
}
