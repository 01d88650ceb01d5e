// Package luastore runs Redis scripts in-process, on an in-memory keyspace,
// as Redis 7.0 runs them: the local fallback's store. While Redis is
// unavailable, a Limiter paces its keys with the very scripts of package
// lua, run here with github.com/yuin/gopher-lua (the interpreter miniredis
// uses), so that every pacing rule has one implementation.
//
// This file set holds Lua 5.1's rules for numbers and strings as Redis's
// Lua has them, where gopher-lua has its own.
package luastore
