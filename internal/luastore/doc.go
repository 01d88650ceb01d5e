// Package luastore runs Redis scripts in-process, on an in-memory keyspace,
// as Redis 7.0 runs them: the local fallback's store. While Redis is
// unavailable, a Limiter paces its keys with the very scripts of package
// lua, run here with github.com/yuin/gopher-lua (the interpreter miniredis
// uses), so that every pacing rule has one implementation.
//
// A [Store] is the keyspace and the interpreter. It implements go-redis's
// redis.Scripter, so the code that runs a script on Redis,
//
//	reserve := redis.NewScript(lua.Reserve)
//	res, err := reserve.Run(ctx, rdb, keys, args...).Slice()
//
// runs it unchanged on a Store (pass the Store for rdb): EVALSHA, then
// EVAL on NOSCRIPT; replies and errors as go-redis gives them (redis.Nil,
// an [Error] that satisfies redis.Error, "PACER_ARG ..." read from
// err.Error()). [Store.Get], [Store.Set], [Store.PTTL], [Store.Del],
// [Store.Keys] and [Store.Sweep] read and write the keyspace from Go.
//
// # What a script can do
//
// Commands (redis.call, redis.pcall), with Redis 7.0's arguments, options,
// replies and errors (WRONGTYPE on a key of another type, arity errors as a
// script sees them, "ERR Unknown Redis command called from script"):
//
//	keys     DEL EXISTS TYPE PTTL TTL PEXPIRE EXPIRE PEXPIREAT (NX XX GT LT) TIME
//	strings  GET SET (NX XX GET EX PX EXAT PXAT KEEPTTL) INCR INCRBY
//	hashes   HSET HGET HMGET HDEL HGETALL
//	zsets    ZADD (NX XX GT LT CH INCR) ZCARD ZSCORE ZREM ZREMRANGEBYSCORE
//	         ZRANGE (WITHSCORES REV BYSCORE LIMIT) ZRANGEBYSCORE (WITHSCORES LIMIT)
//	lists    LPUSH LTRIM LRANGE LLEN
//
// A command Redis has but this store does not fails with "ERR luastore does
// not implement the command ...".
//
// The Lua environment: KEYS, ARGV (go-redis's formatting of the Go
// arguments), the base, string, table and math libraries, redis.call,
// pcall, error_reply, status_reply, sha1hex, log (discarded), setresp (2
// only), cjson.encode and decode, struct.pack, unpack and size (Redis's
// lua_struct.c, its errors included; where C leaves a conversion
// undefined, x86-64's answer); read-only globals and libraries, as in
// Redis 7. Numbers follow Lua 5.1 as Redis builds it, not gopher-lua:
// tostring and .. write "%.14g", string.format is C's printf, tonumber and
// string coercion are strtod's, a % b is a - floor(a/b)*b, math.exp is
// glibc's, a number handed to redis.call is written "%.17g". Replies
// convert as Redis converts them (a number is truncated to an integer,
// false is nil, a table is an array up to its first nil, {err=...} an
// error, {ok=...} a status).
//
// string.find, match, gmatch and gsub are Lua 5.1's matcher (lstrlib.c).
// An assignment of several targets evaluates all its expressions before it
// assigns any, as Lua 5.1 does (gopher-lua's compiler alone assigns a local
// as it goes: "x, y = y, x % y" would not compute a gcd).
// A script's reply reaches go-redis as a RESP3 client (go-redis v9's
// default) reads it: {double=...} a float64, {map=...} a map.
//
// Not there, or not the same: the bit and cmsgpack libraries; the
// argument errors of struct's functions called as methods (struct:pack:
// Lua 5.1 says "calling 'pack' on bad self");
// redis.setresp(3); script timeouts (a script that never ends holds the
// Store's lock); Lua 5.1's wording of runtime errors (gopher-lua has its
// own; the position, the script and the first word, "ERR", are Redis's);
// the order of pairs and next (insertion order, not Lua 5.1's hash order;
// cjson.encode does follow Lua 5.1's for tables built by a constructor);
// math.random's sequence; Lua 5.1's folding of a literal -0 and 0 into
// one constant (so that 1/0 may be -inf in a function that also has a
// -0.0); ^ and math.pow, log and the trigonometric
// functions are Go's, which may differ from glibc's in the last bit (math.exp
// is glibc's).
//
// # Time
//
// The clock given to [New] is read once per script (and per method): TIME
// returns it, and keys expire by it, in milliseconds as Redis keeps them.
// An expired key is absent; [Store.Sweep] drops them.
package luastore
