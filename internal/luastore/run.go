package luastore

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// Compiling and running a script.

// chunkName is the name Redis 7 gives a script's chunk: error messages say
// "user_script:<line>: ...".
const chunkName = "user_script"

// sha1Hex is a script's SHA1, as EVALSHA names it.
func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

// compile parses src, rewrites it to Lua 5.1's number rules (rewrite.go)
// and compiles it.
func compile(src, name string) (*lua.FunctionProto, error) {
	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		return nil, err
	}
	return lua.Compile(rewriteChunk(chunk), name)
}

// compiled holds the scripts compiled by every Store of the process, by
// SHA1: a compiled script (a FunctionProto) is read-only, and each Store
// runs it on its own Lua state, so a process compiles each script once,
// however many Stores run it. Bounded: past compiledMax scripts, the
// cache starts over.
var compiled = struct {
	sync.Mutex
	m map[string]*lua.FunctionProto
}{m: map[string]*lua.FunctionProto{}}

const compiledMax = 256

// load returns the compiled script of sha, compiling src when no Store has
// yet, and marks it loaded in s (SCRIPT EXISTS); without a source
// (EVALSHA) a script s has not loaded gives NOSCRIPT. The caller holds
// s's lock.
func (s *Store) load(sha, src string, hasSrc bool) (*lua.FunctionProto, error) {
	if p := s.scripts[sha]; p != nil {
		return p, nil
	}
	if !hasSrc {
		return nil, Error("NOSCRIPT No matching script. Please use EVAL.")
	}
	compiled.Lock()
	p := compiled.m[sha]
	compiled.Unlock()
	if p == nil {
		var err error
		if p, err = compile(src, chunkName); err != nil {
			return nil, Error("ERR Error compiling script (new function): " + replyLine(compileError(err, src)))
		}
		compiled.Lock()
		if len(compiled.m) >= compiledMax {
			clear(compiled.m)
		}
		compiled.m[sha] = p
		compiled.Unlock()
	}
	s.scripts[sha] = p
	return p, nil
}

// compileError returns gopher-lua's syntax or compile error as Lua words
// one: "user_script:1: ...".
func compileError(err error, src string) string {
	switch e := err.(type) {
	case *parse.Error:
		if e.Pos.Line == parse.EOF {
			return fmt.Sprintf("%s:%d: %s near '<eof>'", chunkName, strings.Count(src, "\n")+1, e.Message)
		}
		return fmt.Sprintf("%s:%d: %s near '%s'", chunkName, e.Pos.Line, e.Message, e.Token)
	case *lua.CompileError:
		return fmt.Sprintf("%s:%d: %s", chunkName, e.Line, e.Message)
	}
	return err.Error()
}

// run runs a compiled script (SHA1 sha) with keys and argv, the lock held,
// and returns its reply.
func (s *Store) run(p *lua.FunctionProto, sha string, keys, argv []string, readOnly bool) any {
	if s.vm == nil {
		s.vm = newVM(s)
	}
	v := s.vm
	L := v.L
	v.ro = readOnly
	v.globals.RawSetString("KEYS", stringTable(L, keys))
	v.globals.RawSetString("ARGV", stringTable(L, argv))
	defer func() {
		v.globals.RawSetString("KEYS", lua.LNil)
		v.globals.RawSetString("ARGV", lua.LNil)
		L.SetTop(0)
	}()
	fn := L.NewFunctionFromProto(p)
	fn.Env = v.env
	L.Push(fn)
	if err := L.PCall(0, 1, v.handler); err != nil {
		return scriptError(err, sha)
	}
	return luaToReply(L.Get(-1), 0)
}

func stringTable(L *lua.LState, list []string) *lua.LTable {
	t := L.CreateTable(len(list), 0)
	for i, s := range list {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
}

// scriptError is the error reply of a script that raised an error: its
// message (a redis.call error as the command gave it, any other error as
// "ERR " and Lua's message), then " script: <sha>, on @user_script:<line>."
// as Redis 7 writes it.
func scriptError(err error, sha string) Error {
	aerr, ok := err.(*lua.ApiError)
	if !ok {
		return Error("ERR " + replyLine(err.Error()))
	}
	t, ok := aerr.Object.(*lua.LTable)
	if !ok {
		return Error("ERR Error running script " + sha + ", " + replyLine(luaString(aerr.Object)))
	}
	msg := "ERR unknown error"
	if e, ok := t.RawGetString("err").(lua.LString); ok {
		msg = string(e)
	}
	if line, ok := t.RawGetString("line").(lua.LNumber); ok {
		if src, ok := t.RawGetString("source").(lua.LString); ok {
			msg += fmt.Sprintf(" script: %s, on %s:%s.", sha, src, numberString(line))
		}
	}
	return Error(replyLine(msg))
}
