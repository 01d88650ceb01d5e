package luastore

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The Lua environment a script runs in, as Redis 7.0 builds it: the base,
// table, string and math libraries (no os, io, package, coroutine or
// debug), KEYS and ARGV, the redis table (call, pcall, error_reply,
// status_reply, sha1hex, log, setresp, set_repl, replicate_commands,
// breakpoint, debug and their constants), cjson (encode, decode, null)
// and struct (pack, unpack, size: luastruct.go), with Lua 5.1's number
// rules (luanum.go, luaformat.go) in place of gopher-lua's. The globals and the libraries are read-only: a script
// can neither create a global ("Script attempted to access nonexistent
// global variable", "Attempt to modify a readonly table", Redis's errors)
// nor change a library, so nothing a script does outlives its call but
// what it writes to the keyspace. Not provided: the bit and cmsgpack
// libraries, redis.acl_check_cmd and RESP3 (redis.setresp(3)).

// vm is a Store's interpreter: one LState, reused by every call under the
// Store's lock.
type vm struct {
	L       *lua.LState
	globals *lua.LTable                 // the globals themselves, behind env
	env     *lua.LTable                 // what scripts see as their globals: read-only
	handler *lua.LFunction              // the error handler of a script's call
	frozen  map[*lua.LTable]*lua.LTable // the read-only tables (proxies), to the tables they show
	store   *Store
	ro      bool // the script runs read-only (EVAL_RO)
}

// redisVersion is what redis.REDIS_VERSION says: the version whose
// behaviour the store copies.
const (
	redisVersion    = "7.0.15"
	redisVersionNum = 0x07000f
)

func newVM(s *Store) *vm {
	L := lua.NewState(lua.Options{
		SkipOpenLibs:     true,
		CallStackSize:    256,
		RegistrySize:     1024 * 4,
		RegistryMaxSize:  1024 * 256,
		RegistryGrowStep: 1024,
	})
	v := &vm{L: L, store: s, frozen: map[*lua.LTable]*lua.LTable{}}
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
	} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	v.globals = g
	for _, name := range []string{"dofile", "loadfile", "load", "require", "module", "_printregs", "newproxy", "_GOPHER_LUA_VERSION", "print", "setfenv", "getfenv"} {
		g.RawSetString(name, lua.LNil)
	}
	g.RawSetString("_VERSION", lua.LString("Lua 5.1"))
	g.RawSetString("tostring", L.NewFunction(luaToString))
	g.RawSetString("tonumber", L.NewFunction(luaToNumber))
	g.RawSetString("pcall", L.NewFunction(redisPCall))
	g.RawSetString("error", L.NewFunction(luaError))
	g.RawSetString("assert", L.NewFunction(luaAssert))
	g.RawSetString("loadstring", L.NewFunction(v.loadString))
	g.RawSetString("rawset", L.NewFunction(v.rawSet))
	g.RawSetString("rawget", L.NewFunction(v.rawGet))
	g.RawSetString(modName, L.NewFunction(modFunc))
	g.RawSetString(catName, L.NewFunction(concatFunc))
	g.RawSetString(numName, L.NewFunction(forNumFunc))

	str := g.RawGetString("string").(*lua.LTable)
	for _, f := range []struct {
		name string
		pos  []int
	}{
		{"byte", []int{1}}, {"len", []int{1}}, {"lower", []int{1}}, {"rep", []int{1}},
		{"reverse", []int{1}}, {"sub", []int{1}}, {"upper", []int{1}},
	} {
		if orig, ok := str.RawGetString(f.name).(*lua.LFunction); ok && orig.IsG {
			str.RawSetString(f.name, L.NewFunction(stringArgs(orig.GFunction, f.pos...)))
		}
	}
	str.RawSetString("format", L.NewFunction(luaFormat))
	str.RawSetString("find", L.NewFunction(strFind))
	str.RawSetString("match", L.NewFunction(strMatch))
	str.RawSetString("gmatch", L.NewFunction(strGmatch))
	str.RawSetString("gfind", L.NewFunction(strGmatch))
	str.RawSetString("gsub", L.NewFunction(strGsub))
	strMeta := L.GetMetatable(lua.LString("")).(*lua.LTable)
	for _, op := range []string{"__add", "__sub", "__mul", "__div", "__mod", "__pow", "__unm"} {
		strMeta.RawSetString(op, L.NewFunction(arithMeta(op)))
	}

	mathLib := g.RawGetString("math").(*lua.LTable)
	mathLib.ForEach(func(k, f lua.LValue) {
		if fn, ok := f.(*lua.LFunction); ok && fn.IsG {
			mathLib.RawSetString(string(k.(lua.LString)), L.NewFunction(numberArgs(fn.GFunction)))
		}
	})
	mathLib.RawSetString("exp", L.NewFunction(numberArgs(mathExp)))
	mathLib.RawSetString("mod", mathLib.RawGetString("fmod"))
	mathLib.RawSetString("huge", lua.LNumber(math.Inf(1))) // gopher-lua's is the largest float

	tab := g.RawGetString("table").(*lua.LTable)
	tab.RawSetString("concat", L.NewFunction(tableConcat))

	g.RawSetString("redis", v.redisLib())
	cjson := L.CreateTable(0, 3)
	cjson.RawSetString("encode", L.NewFunction(cjsonEncode))
	cjson.RawSetString("decode", L.NewFunction(cjsonDecode))
	cjson.RawSetString("null", jsonNull)
	g.RawSetString("cjson", cjson)
	g.RawSetString("struct", structLib(L))

	// Read-only libraries and globals: each behind an empty table that
	// reads through to it and refuses writes.
	for _, name := range []string{"string", "math", "table", "redis", "cjson", "struct"} {
		g.RawSetString(name, v.readOnly(g.RawGetString(name).(*lua.LTable)))
	}
	strMeta.RawSetString("__index", str) // s:sub() reads the library itself
	strMeta.RawSetString("__metatable", lua.LFalse)
	missing := L.CreateTable(0, 1)
	missing.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", luaString(L.Get(2)))
		return 0
	}))
	L.SetMetatable(g, missing)
	v.env = v.readOnly(g)
	g.RawSetString("_G", v.env)
	v.handler = L.NewFunction(errorHandler)
	return v
}

// readOnly returns an empty table that reads through to t and refuses to
// be written (Redis 7's read-only tables).
func (v *vm) readOnly(t *lua.LTable) *lua.LTable {
	L := v.L
	proxy := L.CreateTable(0, 0)
	mt := L.CreateTable(0, 3)
	mt.RawSetString("__index", t)
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	mt.RawSetString("__metatable", lua.LFalse)
	L.SetMetatable(proxy, mt)
	v.frozen[proxy] = t
	return proxy
}

// rawSet is rawset, refusing the read-only tables.
func (v *vm) rawSet(L *lua.LState) int {
	t := L.CheckTable(1)
	if v.frozen[t] != nil {
		L.Error(lua.LString("Attempt to modify a readonly table"), 0) // without a position, as Redis
	}
	k := L.CheckAny(2)
	if k == lua.LNil {
		L.RaiseError("table index is nil")
	}
	t.RawSet(k, L.CheckAny(3))
	L.SetTop(1)
	return 1
}

// rawGet is rawget, reading a read-only table's own fields: Redis makes a
// table read-only in place, so rawget(_G, 'struct') finds the library
// there (head.lua looks for it so: miniredis has none), where the proxy
// itself holds nothing.
func (v *vm) rawGet(L *lua.LState) int {
	t := L.CheckTable(1)
	if u := v.frozen[t]; u != nil {
		t = u
	}
	L.Push(t.RawGet(L.CheckAny(2)))
	return 1
}

// loadString is loadstring: the chunk compiled as a script is, so that
// Lua 5.1's number rules hold in it too.
func (v *vm) loadString(L *lua.LState) int {
	src := checkLString(L, 1, "loadstring")
	name := L.OptString(2, src)
	proto, err := compile(src, name)
	if err != nil {
		L.Push(lua.LNil)
		L.Push(lua.LString(err.Error()))
		return 2
	}
	fn := L.NewFunctionFromProto(proto)
	fn.Env = v.env
	L.Push(fn)
	return 1
}

// redisLib builds the redis table.
func (v *vm) redisLib() *lua.LTable {
	L := v.L
	t := L.CreateTable(0, 24)
	set := func(name string, f lua.LGFunction) { t.RawSetString(name, L.NewFunction(f)) }
	set("call", func(L *lua.LState) int { return v.call(L, true) })
	set("pcall", func(L *lua.LState) int { return v.call(L, false) })
	set("error_reply", func(L *lua.LState) int {
		s, ok := L.Get(1).(lua.LString)
		if L.GetTop() != 1 || !ok {
			L.Push(errorTable(L, "ERR wrong number or type of arguments"))
			return 1
		}
		L.Push(errorTable(L, Error(errorReplyText(string(s)))))
		return 1
	})
	set("status_reply", func(L *lua.LState) int {
		s, ok := L.Get(1).(lua.LString)
		if L.GetTop() != 1 || !ok {
			L.Push(errorTable(L, "ERR wrong number or type of arguments"))
			return 1
		}
		r := L.CreateTable(0, 1)
		r.RawSetString("ok", s)
		L.Push(r)
		return 1
	})
	set("sha1hex", func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.RaiseError("wrong number of arguments")
		}
		sum := sha1.Sum([]byte(checkLString(L, 1, "sha1hex")))
		L.Push(lua.LString(hex.EncodeToString(sum[:])))
		return 1
	})
	set("log", func(L *lua.LState) int {
		if L.GetTop() < 2 {
			L.RaiseError("redis.log() requires two arguments or more.")
		}
		if _, ok := L.Get(1).(lua.LNumber); !ok {
			L.RaiseError("First argument must be a number (log level).")
		}
		return 0 // no log: a library does not write to Redis's log
	})
	set("setresp", func(L *lua.LState) int {
		if n, ok := L.Get(1).(lua.LNumber); !ok || n != 2 {
			L.RaiseError("luastore supports RESP2 only (redis.setresp(2))")
		}
		return 0
	})
	set("set_repl", func(L *lua.LState) int { return 0 })
	set("replicate_commands", func(L *lua.LState) int { L.Push(lua.LTrue); return 1 })
	set("breakpoint", func(L *lua.LState) int { L.Push(lua.LFalse); return 1 })
	set("debug", func(L *lua.LState) int { return 0 })
	for name, n := range map[string]int{
		"LOG_DEBUG": 0, "LOG_VERBOSE": 1, "LOG_NOTICE": 2, "LOG_WARNING": 3,
		"REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3,
	} {
		t.RawSetString(name, lua.LNumber(n))
	}
	t.RawSetString("REDIS_VERSION", lua.LString(redisVersion))
	t.RawSetString("REDIS_VERSION_NUM", lua.LNumber(redisVersionNum))
	return t
}

// call is redis.call (raise: an error reply is raised) and redis.pcall
// (returned as {err=...}).
func (v *vm) call(L *lua.LState, raise bool) int {
	n := L.GetTop()
	var reply any
	if n == 0 {
		reply = errNoArgs
	} else {
		args := make([]string, n)
		for i := range n {
			switch a := L.Get(i + 1).(type) {
			case lua.LString:
				args[i] = string(a)
			case lua.LNumber:
				// Redis 7.0 writes a number argument with "%.17g".
				args[i] = formatG(float64(a), 17)
			default:
				reply = errBadArgType
			}
			if reply != nil {
				break
			}
		}
		if reply == nil {
			reply = v.store.exec(args, v.ro)
		}
	}
	if e, ok := reply.(Error); ok {
		t := errorTable(L, Error(errorReplyText(string(e))))
		if raise {
			L.Error(t, 0)
			return 0
		}
		L.Push(t)
		return 1
	}
	L.Push(replyToLua(L, reply))
	return 1
}

// luaAssert is Lua 5.1's assert(v [, message]): the message gets the
// position of assert's caller when that is a Lua function.
func luaAssert(L *lua.LState) int {
	L.CheckAny(1)
	if !lua.LVAsBool(L.Get(1)) {
		msg := "assertion failed!"
		if L.GetTop() >= 2 && L.Get(2) != lua.LNil {
			msg = checkLString(L, 2, "assert")
		}
		L.Error(lua.LString(where(L, 1)+msg), 0)
	}
	return L.GetTop()
}

// where is Lua 5.1's luaL_where: "user_script:<line>: " for the function
// level levels up the stack (1: the caller of the running Go function)
// when it is a Lua function, else "".
func where(L *lua.LState, level int) string {
	dbg, ok := L.GetStack(level)
	if !ok {
		return ""
	}
	if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil || dbg.What == "G" || dbg.CurrentLine <= 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d: ", dbg.Source, dbg.CurrentLine)
}

// luaError is Lua 5.1's error(message [, level]): a string (or number)
// message gets the position of the function level levels up, if that is a
// Lua function (gopher-lua's skips Go functions: error called by pcall
// would get pcall's caller's position, which Lua 5.1 does not give).
func luaError(L *lua.LState) int {
	msg := L.Get(1)
	level := 1
	if L.GetTop() >= 2 {
		level = int(checkLNumber(L, 2, "error"))
	}
	switch m := msg.(type) {
	case lua.LString, lua.LNumber:
		if level > 0 {
			if w := where(L, level); w != "" {
				msg = lua.LString(w + luaString(m))
			}
		}
	}
	L.Error(msg, 0)
	return 0
}

// redisPCall is pcall as Redis 7 has it: an error raised as a table with
// a string err (redis.call's) is returned as that string.
func redisPCall(L *lua.LState) int {
	f := L.CheckAny(1)
	if f.Type() != lua.LTFunction && L.GetMetaField(f, "__call").Type() != lua.LTFunction {
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a " + f.Type().String() + " value"))
		return 2
	}
	if err := L.PCall(L.GetTop()-1, lua.MultRet, nil); err != nil {
		var obj lua.LValue = lua.LString(err.Error())
		if aerr, ok := err.(*lua.ApiError); ok {
			obj = aerr.Object
		}
		if t, ok := obj.(*lua.LTable); ok {
			if s, ok := t.RawGetString("err").(lua.LString); ok {
				obj = s
			}
		}
		L.Push(lua.LFalse)
		L.Push(obj)
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// errorHandler is the handler of a script's call (Redis 7's
// __redis__err__handler): an error that is not a table becomes
// {err='ERR ' .. tostring(e)}, and the table gets the source and line of
// the innermost Lua function where the error was raised.
func errorHandler(L *lua.LState) int {
	e := L.Get(1)
	t, ok := e.(*lua.LTable)
	if !ok {
		t = L.CreateTable(0, 3)
		t.RawSetString("err", lua.LString("ERR "+luaString(e)))
	}
	for level := 1; ; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			break
		}
		if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil {
			break
		}
		if dbg.What != "G" && dbg.CurrentLine > 0 {
			t.RawSetString("source", lua.LString("@user_script"))
			t.RawSetString("line", lua.LNumber(dbg.CurrentLine))
			break
		}
	}
	L.Push(t)
	return 1
}

// mathExp is math.exp: glibc's exp (cmath.go), not Go's.
func mathExp(L *lua.LState) int {
	L.Push(lua.LNumber(cExp(checkLNumber(L, 1, "exp"), expFMA)))
	return 1
}

// tableConcat is Lua 5.1's table.concat(t [, sep [, i [, j]]]): numbers
// joined as "%.14g".
func tableConcat(L *lua.LState) int {
	t := L.CheckTable(1)
	sep := ""
	if L.GetTop() >= 2 && L.Get(2) != lua.LNil {
		sep = checkLString(L, 2, "concat")
	}
	i := 1
	if L.GetTop() >= 3 && L.Get(3) != lua.LNil {
		i = int(checkLNumber(L, 3, "concat"))
	}
	j := t.Len()
	if L.GetTop() >= 4 && L.Get(4) != lua.LNil {
		j = int(checkLNumber(L, 4, "concat"))
	}
	var b strings.Builder
	for k := i; k <= j; k++ {
		switch e := t.RawGetInt(k).(type) {
		case lua.LString:
			b.WriteString(string(e))
		case lua.LNumber:
			b.WriteString(numberString(e))
		default:
			L.RaiseError("invalid value (at index %d) in table for 'concat'", k)
		}
		if k < j {
			b.WriteString(sep)
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}
