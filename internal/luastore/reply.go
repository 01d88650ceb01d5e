package luastore

import (
	"fmt"
	"math/big"
	"strings"

	"github.com/redis/go-redis/v9"
	lua "github.com/yuin/gopher-lua"
)

// Replies, and their conversions between the commands, Lua and go-redis,
// as Redis 7.0 converts them: a command's reply reaches a script in RESP2
// (the default of a script), a script's reply reaches go-redis in RESP3
// (go-redis v9's default protocol, which the project's clients use). A
// reply is one of:
//
//	nil        a nil bulk string
//	int64      an integer
//	string     a bulk string
//	status     a status reply ("OK")
//	[]any      an array of replies
//	Error      an error reply
//
// and, only as what a script returns (RESP3 types):
//
//	double     {double = n}
//	bigNumber  {big_number = s}
//	replyMap   {map = t}, keys and values in turn
//	replySet   {set = t}

// status is a status reply.
type status string

type (
	double    float64
	bigNumber string
	replyMap  []any
	replySet  []any
)

// Error is an error reply, from a command or a script. Its text starts
// with Redis's code ("ERR", "WRONGTYPE", "NOSCRIPT", or a script's own,
// "PACER_ARG"). It satisfies go-redis's redis.Error, so callers read and
// match it as they read a reply of Redis.
type Error string

func (e Error) Error() string { return string(e) }

// RedisError marks Error as a reply of the server (go-redis's redis.Error).
func (Error) RedisError() {}

var _ redis.Error = Error("")

// maxReplyDepth bounds the nesting of a script's reply (a table that holds
// itself would never end).
const maxReplyDepth = 1000

// replyToLua converts a command's reply for the script that called it:
// integer to number, bulk to string, nil to false, array to table (its
// nils false), status to {ok=...}, an error inside an array to {err=...}.
func replyToLua(L *lua.LState, r any) lua.LValue {
	switch r := r.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(r)
	case string:
		return lua.LString(r)
	case status:
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(r))
		return t
	case Error:
		return errorTable(L, r)
	case []any:
		t := L.CreateTable(len(r), 0)
		for i, v := range r {
			t.RawSetInt(i+1, replyToLua(L, v))
		}
		return t
	}
	return lua.LFalse
}

// errorTable is the table Lua sees for an error reply: {err=...}.
func errorTable(L *lua.LState, e Error) *lua.LTable {
	t := L.CreateTable(0, 1)
	t.RawSetString("err", lua.LString(e))
	return t
}

// luaToReply converts what a script returns: a string to bulk, a number to
// an integer (truncated toward zero, as C casts), true to 1, false and nil
// to nil, a table with a string err to an error, with a string ok to a
// status, with a number double to its "%.17g", with a string big_number to
// it, with a table map or set to their flat arrays, any other table to an
// array of its elements up to the first nil.
func luaToReply(v lua.LValue, depth int) any {
	switch v := v.(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return cInt64(float64(v))
	case lua.LBool:
		if v {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if depth >= maxReplyDepth {
			return Error("ERR reached lua stack limit")
		}
		return tableToReply(v, depth+1)
	}
	return nil
}

func tableToReply(t *lua.LTable, depth int) any {
	if e, ok := t.RawGetString("err").(lua.LString); ok {
		return Error(replyLine(string(e)))
	}
	if s, ok := t.RawGetString("ok").(lua.LString); ok {
		return status(replyLine(string(s)))
	}
	if d, ok := t.RawGetString("double").(lua.LNumber); ok {
		return double(d)
	}
	if b, ok := t.RawGetString("big_number").(lua.LString); ok {
		return bigNumber(replyLine(string(b)))
	}
	if m, ok := t.RawGetString("map").(*lua.LTable); ok {
		out := replyMap{}
		for _, k := range nextOrder(m) {
			out = append(out, luaToReply(k, depth), luaToReply(m.RawGet(k), depth))
		}
		return out
	}
	if set, ok := t.RawGetString("set").(*lua.LTable); ok {
		out := replySet{}
		for _, k := range nextOrder(set) {
			out = append(out, luaToReply(k, depth))
		}
		return out
	}
	out := []any{}
	for i := 1; ; i++ {
		e := t.RawGetInt(i)
		if e == lua.LNil {
			break
		}
		out = append(out, luaToReply(e, depth))
	}
	return out
}

// replyLine makes s one line, as Redis writes an error or status reply:
// line breaks at its ends dropped, the others made spaces.
func replyLine(s string) string {
	if strings.ContainsAny(s, "\r\n") {
		s = strings.Trim(s, "\r\n")
		s = strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
	}
	return s
}

// errorReplyText is the err of redis.error_reply(s) and of an error a
// command raises in a script (Redis's luaPushError): a leading "-" is
// dropped and the first word is the code, else the code is ERR; line
// breaks at the ends are dropped.
func errorReplyText(s string) string {
	if !strings.HasPrefix(s, "-") {
		s = "-" + s
	}
	code, msg, ok := strings.Cut(s[1:], " ")
	if !ok {
		code, msg = "ERR", s[1:]
	}
	return code + " " + strings.Trim(msg, "\r\n")
}

// replyToGo converts a script's reply to what go-redis gives for it: the
// value of a *redis.Cmd and its error (redis.Nil for a nil reply, an Error
// for an error reply). Inside an array a nil is nil and an error an Error
// value, as go-redis reads them.
func replyToGo(r any) (any, error) {
	switch r := r.(type) {
	case nil:
		return nil, redis.Nil
	case Error:
		return nil, r
	}
	return replyValue(r), nil
}

func replyValue(r any) any {
	switch r := r.(type) {
	case status:
		return string(r)
	case double:
		return float64(r)
	case bigNumber:
		if n, ok := new(big.Int).SetString(string(r), 10); ok {
			return n
		}
		return string(r)
	case []any:
		return replyValues(r)
	case replySet:
		return replyValues(r)
	case replyMap:
		m := make(map[any]any, len(r)/2)
		for i := 0; i+1 < len(r); i += 2 {
			k := replyValue(r[i])
			switch k.(type) {
			case []any, map[any]any:
				k = fmt.Sprint(k) // not a valid map key
			}
			m[k] = replyValue(r[i+1])
		}
		return m
	}
	return r
}

func replyValues(r []any) []any {
	out := make([]any, len(r))
	for i, v := range r {
		out[i] = replyValue(v)
	}
	return out
}

// luaString is Lua 5.1's tostring of v, for error messages.
func luaString(v lua.LValue) string {
	switch v := v.(type) {
	case lua.LNumber:
		return numberString(v)
	case lua.LString:
		return string(v)
	}
	return v.String()
}
