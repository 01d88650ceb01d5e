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
// What depends on the server's clock is recorded as a wildcard ({"any":
// true}): the reply of a call on the server's clock (ARGV[1] "" for the
// scripts built on core.lua; Heartbeat's now_ms; Admin's entry, which holds
// at_ms), TIME, PTTL and ZSCORE (a fleet member's last heartbeat). A number
// a test derives from the server's clock is written as a placeholder
// (conn.volatile: "{ms}", "{ms-1000}", ...), for the replay to fill in
// from TIME when it starts the test.

import (
	"bytes"
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

	"github.com/redis/go-redis/v9"
)

var updateCases = flag.Bool("update-cases", false, "rewrite lua/testdata/conformance.json's entries of the tests run")

const casesFile = "testdata/conformance.json"

// casesMu serialises the rewrites of casesFile.
var casesMu sync.Mutex

// A caseCall is one command and its reply.
type caseCall struct {
	Cmd   []string `json:"cmd"`             // keys under the prefix "pacer:"; $NAME for a script's SHA1
	Reply any      `json:"reply,omitempty"` // the reply; {"any": true} where it depends on the server's clock
	Err   string   `json:"err,omitempty"`   // an error reply, in full (a client matches its first word, the code)
}

// A caseState is a state as the grammar's parser reads it.
type caseState struct {
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
	Calls  []caseCall           `json:"calls"`
	States map[string]caseState `json:"states"`
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

// add records a command and its reply (nil for redis.Nil).
func (r *recorder) add(args []any, v any, err error) {
	cmd := make([]string, len(args))
	for i, a := range args {
		s := fmt.Sprint(a)
		if i == 1 && strings.EqualFold(cmd[0], "EVALSHA") {
			for name, sha := range r.c.sha {
				if sha == s {
					s = "$" + name
				}
			}
		}
		if rest, ok := strings.CutPrefix(s, r.c.prefix); ok {
			s = "pacer:" + rest
		}
		cmd[i] = r.subst(s)
	}
	call := caseCall{Cmd: cmd}
	var re redis.Error
	switch {
	case err != nil && errors.As(err, &re):
		call.Err = err.Error()
	case err != nil:
		r.c.t.Fatalf("%v: %v (not a Redis error: the cases' file cannot record it)", cmd, err)
	default:
		call.Reply = r.reply(cmd, v)
	}
	r.calls = append(r.calls, call)
}

// reply returns v as the file records it.
func (r *recorder) reply(cmd []string, v any) any {
	name := strings.ToUpper(cmd[0])
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
	case name == "EVALSHA" && cmd[1] != "$ADAPTIVE" && cmd[1] != "$QUOTA" && len(cmd) > 3:
		n, _ := strconv.Atoi(cmd[2])
		if 3+n < len(cmd) && cmd[3+n] == "" {
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
		return r.subst(x)
	case nil:
		return nil
	}
	return v
}

// entry returns the test's entry: its calls, and the states it parsed that
// its recorded replies show.
func (r *recorder) entry() caseTest {
	shown := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case []any:
			for _, e := range x {
				walk(e)
			}
		case string:
			shown[x] = true
		}
	}
	for _, c := range r.calls {
		walk(c.Reply)
	}
	e := caseTest{Calls: r.calls, States: map[string]caseState{}}
	if e.Calls == nil {
		e.Calls = []caseCall{}
	}
	for text, st := range r.states {
		if !shown[text] {
			continue
		}
		cs := caseState{Format: st.format, T: st.t, X: st.x, Seq: st.seq, Pause: st.pause, Stored: st.stored, Recs: []caseRecord{}}
		for _, rec := range st.recs {
			cs.Recs = append(cs.Recs, caseRecord{Name: rec.name, Window: rec.window, Z: rec.z, E: rec.e, W: rec.w, U: rec.u})
		}
		e.States[text] = cs
	}
	return e
}

// check compares the test's entry with the file's, or rewrites it with
// -update-cases.
func (r *recorder) check() {
	t := r.c.t
	if t.Failed() {
		return
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
		b.WriteString("], \"states\": {\n")
		texts := slices.Sorted(maps.Keys(e.States))
		for j, text := range texts {
			k, _ := json.Marshal(text)
			v, err := json.Marshal(e.States[text])
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "%s: %s", k, v)
			if j < len(texts)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString("}}")
		if i < len(all)-1 {
			b.WriteByte(',')
		}
		b.WriteByte('\n')
	}
	b.WriteString("}\n")
	var check map[string]caseTest
	return b.Bytes(), json.Unmarshal(b.Bytes(), &check)
}
