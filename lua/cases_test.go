package lua_test

// The conformance cases as data: every command a conformance test sends
// (conn.do), with its reply, and every state it parsed, with what the
// parser written from docs/protocol.md's grammar read in it, are in
// lua/testdata/conformance.json, so that a client in another language
// runs the same cases through its own code (clients/python does). Each
// test checks its entry against what it just did, and fails when the file
// is out of date; -update-cases rewrites the entries of the tests run:
//
//	go test ./lua -run 'Conformance|ProtocolDoc' -update-cases
//
// The file is JSON: an object of the tests by name, each {"calls": [...],
// "states": [...]}. A call is {"cmd": [...], "reply": ..., "err": "..."},
// and for Reserve and Fair "reserve": its reply decoded as docs/
// protocol.md's "Reserve" gives it ([now_us, now_ns, wait_ns, seq, ...,
// state, stored limit, binding bands]). A state is {"text": ..., "format",
// "t", "x", "seq", "pause", "stored", "recs": [...]}.
//
// Strings are binary-safe: the scripts' arguments and replies hold bytes
// that are not text (a Limit's policy and Reserve's requests, little-endian
// doubles; Reserve's reply; format 3 states). A string all of whose bytes
// are printable ASCII (0x20 to 0x7e) is a JSON string; any other (a byte
// >= 0x80, a control byte, so any string that is not valid UTF-8 too) is
// {"hex": "<its bytes in lowercase hex>"}.
//
// What depends on the server's clock is recorded as a wildcard ({"any":
// true}): the reply of a call on the server's clock (an ARGV[2] without a
// client clock "t<now_us>:<now_ns> " for the scripts built on core.lua;
// Heartbeat's now_ms; Admin's entry, which holds at_ms), TIME, PTTL and
// ZSCORE (a fleet member's last heartbeat). A number a test derives from
// the server's clock is written as a placeholder (conn.volatile: "{ms}",
// "{ms-1000}", ...), for the replay to fill in from TIME when it starts
// the test.

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/redis/go-redis/v9"
)

var updateCases = flag.Bool("update-cases", false, "rewrite lua/testdata/conformance.json's entries of the tests run")

const casesFile = "testdata/conformance.json"

// casesMu serialises the rewrites of casesFile.
var casesMu sync.Mutex

// A caseStr is a string as the cases' file writes it: a JSON string when
// every byte is printable ASCII, else {"hex": "..."}.
type caseStr string

// text reports whether s is written as a JSON string.
func text(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func (s caseStr) MarshalJSON() ([]byte, error) {
	if text(string(s)) {
		return json.Marshal(string(s))
	}
	return json.Marshal(map[string]string{"hex": hex.EncodeToString([]byte(s))})
}

func (s *caseStr) UnmarshalJSON(b []byte) error {
	var x string
	if err := json.Unmarshal(b, &x); err == nil {
		*s = caseStr(x)
		return nil
	}
	var h struct {
		Hex *string `json:"hex"`
	}
	if err := json.Unmarshal(b, &h); err != nil || h.Hex == nil {
		return fmt.Errorf("a string of the cases' file: %s is neither a string nor {\"hex\": ...}", b)
	}
	v, err := hex.DecodeString(*h.Hex)
	*s = caseStr(v)
	return err
}

// A caseCall is one command and its reply.
type caseCall struct {
	Cmd     []caseStr `json:"cmd"`               // keys under the prefix "pacer:"; $NAME for a script's SHA1
	Reply   any       `json:"reply,omitempty"`   // the reply; {"any": true} where it depends on the server's clock
	Err     caseStr   `json:"err,omitempty"`     // an error reply, in full (a client matches its first word, the code)
	Reserve []any     `json:"reserve,omitempty"` // Reserve's and Fair's reply decoded ("Reserve"), unless a wildcard
}

// A caseState is a state as the grammar's parser reads it.
type caseState struct {
	Text   caseStr      `json:"text"`
	Format int          `json:"format"`
	T      int64        `json:"t"`
	X      int64        `json:"x"`
	Seq    int64        `json:"seq"`
	Pause  float64      `json:"pause"` // ns after t
	Stored bool         `json:"stored"`
	Recs   []caseRecord `json:"recs"`
}

type caseRecord struct {
	Name   string  `json:"name"`
	Window bool    `json:"window,omitempty"`
	Z      float64 `json:"z,omitempty"`
	E      float64 `json:"e,omitempty"`
	W      int64   `json:"w,omitempty"`
	U      float64 `json:"u,omitempty"`
}

// A caseTest is one test's entry.
type caseTest struct {
	Calls  []caseCall  `json:"calls"`
	States []caseState `json:"states"`
}

// recorder keeps one test's calls.
type recorder struct {
	c      *conn
	calls  []caseCall
	states map[string]state
	vol    [][2]string // literal, placeholder
}

func newRecorder(c *conn) *recorder {
	r := &recorder{c: c, states: map[string]state{}}
	c.t.Cleanup(r.check)
	return r
}

// volatile records that n, derived from the server's clock, is written as
// placeholder in the cases' file.
func (c *conn) volatile(n int64, placeholder string) {
	c.rec.vol = append(c.rec.vol, [2]string{strconv.FormatInt(n, 10), placeholder})
}

func (r *recorder) subst(s string) string {
	for _, v := range r.vol {
		s = strings.ReplaceAll(s, v[0], v[1])
	}
	return s
}

var anyReply = map[string]bool{"any": true}

// coreScripts are the scripts built on core.lua, whose ARGV[2] carries
// the client clock, if any.
var coreScripts = map[string]bool{
	"$RESERVE": true, "$FAIR": true, "$ADJUST": true, "$PAUSE": true, "$RESUME": true,
	"$PEEK": true, "$CLAIM": true, "$HOLD": true, "$LEASE": true, "$REWRITE": true,
}

// add records a command and its reply (nil for redis.Nil).
func (r *recorder) add(args []any, v any, err error) {
	cmd := make([]caseStr, len(args))
	for i, a := range args {
		s := fmt.Sprint(a)
		if i == 1 && strings.EqualFold(string(cmd[0]), "EVALSHA") {
			for name, sha := range r.c.sha {
				if sha == s {
					s = "$" + name
				}
			}
		}
		if rest, ok := strings.CutPrefix(s, r.c.prefix); ok {
			s = "pacer:" + rest
		}
		cmd[i] = caseStr(r.subst(s))
	}
	call := caseCall{Cmd: cmd}
	var re redis.Error
	switch {
	case err != nil && errors.As(err, &re):
		call.Err = caseStr(err.Error())
	case err != nil:
		r.c.t.Fatalf("%v: %v (not a Redis error: the cases' file cannot record it)", cmd, err)
	default:
		call.Reply = r.reply(cmd, v)
		if isReserveCmd(cmd) && call.Reply != nil {
			if _, wild := call.Reply.(map[string]bool); !wild {
				if d, err := decodeReserveBytes(fmt.Sprint(v)); err == nil {
					call.Reserve = r.value(d.list()).([]any)
				}
			}
		}
	}
	r.calls = append(r.calls, call)
}

// isReserveCmd reports whether a recorded command runs Reserve or Fair.
func isReserveCmd(cmd []caseStr) bool {
	return len(cmd) > 1 && strings.EqualFold(string(cmd[0]), "EVALSHA") && (cmd[1] == "$RESERVE" || cmd[1] == "$FAIR")
}

// reply returns v as the file records it.
func (r *recorder) reply(cmd []caseStr, v any) any {
	name := strings.ToUpper(string(cmd[0]))
	switch {
	case name == "TIME" || name == "PTTL" || name == "ZSCORE":
		return anyReply
	case name == "EVALSHA" && cmd[1] == "$ADMIN":
		return anyReply
	case name == "EVALSHA" && cmd[1] == "$HEARTBEAT":
		if a, ok := v.([]any); ok && len(a) > 0 {
			out := []any{anyReply}
			for _, x := range a[1:] {
				out = append(out, r.value(x))
			}
			return out
		}
	case name == "EVALSHA" && coreScripts[string(cmd[1])] && len(cmd) > 3:
		n, _ := strconv.Atoi(string(cmd[2]))
		if 4+n < len(cmd) && !strings.HasPrefix(string(cmd[4+n]), "t") {
			return anyReply // on the server's clock
		}
	}
	return r.value(v)
}

func (r *recorder) value(v any) any {
	switch x := v.(type) {
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = r.value(e)
		}
		return out
	case string:
		return caseStr(r.subst(x))
	case nil:
		return nil
	}
	return v
}

// entry returns the test's entry: its calls, and the states it parsed that
// its recorded replies show (Reserve's and Fair's among the bytes of
// theirs).
func (r *recorder) entry() caseTest {
	shown := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case caseStr:
			shown[string(x)] = true
		}
	}
	for _, c := range r.calls {
		walk(c.Reply)
		walk(c.Reserve)
	}
	e := caseTest{Calls: r.calls, States: []caseState{}}
	if e.Calls == nil {
		e.Calls = []caseCall{}
	}
	for _, text := range slices.Sorted(maps.Keys(r.states)) {
		st := r.states[text]
		if !shown[text] {
			continue
		}
		cs := caseState{Text: caseStr(text), Format: st.format, T: st.t, X: st.x, Seq: st.seq, Pause: st.pause, Stored: st.stored, Recs: []caseRecord{}}
		for _, rec := range st.recs {
			cs.Recs = append(cs.Recs, caseRecord{Name: rec.name, Window: rec.window, Z: rec.z, E: rec.e, W: rec.w, U: rec.u})
		}
		e.States = append(e.States, cs)
	}
	return e
}

// check compares the test's entry with the file's, or rewrites it with
// -update-cases.
func (r *recorder) check() {
	t := r.c.t
	if t.Failed() || redistest.UnderFullCheck(t) {
		return // TestScriptsRefusedWholeWhenFull runs the tests under other names
	}
	casesMu.Lock()
	defer casesMu.Unlock()
	all := map[string]caseTest{}
	if b, err := os.ReadFile(casesFile); err == nil {
		if err := json.Unmarshal(b, &all); err != nil {
			t.Fatalf("%s: %v", casesFile, err)
		}
	} else if !*updateCases {
		t.Fatalf("%s: %v (go test ./lua -run 'Conformance|ProtocolDoc' -update-cases writes it)", casesFile, err)
	}
	got, err := json.Marshal(r.entry())
	if err != nil {
		t.Fatal(err)
	}
	if *updateCases {
		var e caseTest
		_ = json.Unmarshal(got, &e)
		all[t.Name()] = e
		b, err := casesJSON(all)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(casesFile, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, ok := all[t.Name()]
	if !ok {
		t.Fatalf("%s has no entry %s: run go test ./lua -run 'Conformance|ProtocolDoc' -update-cases", casesFile, t.Name())
	}
	w, _ := json.Marshal(want)
	if !bytes.Equal(got, w) {
		t.Errorf("%s's entry %s is out of date (clients in other languages replay it): run go test ./lua -run 'Conformance|ProtocolDoc' -update-cases", casesFile, t.Name())
	}
}

// casesJSON writes the file: one call and one state a line, so that a
// change shows as the lines it changes.
func casesJSON(all map[string]caseTest) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("{\n")
	for i, name := range slices.Sorted(maps.Keys(all)) {
		e := all[name]
		n, _ := json.Marshal(name)
		fmt.Fprintf(&b, "%s: {\"calls\": [\n", n)
		for j, c := range e.Calls {
			line, err := json.Marshal(c)
			if err != nil {
				return nil, err
			}
			b.Write(line)
			if j < len(e.Calls)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString("], \"states\": [\n")
		for j, st := range e.States {
			line, err := json.Marshal(st)
			if err != nil {
				return nil, err
			}
			b.Write(line)
			if j < len(e.States)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString("]}")
		if i < len(all)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	var check map[string]caseTest
	return b.Bytes(), json.Unmarshal(b.Bytes(), &check)
}
