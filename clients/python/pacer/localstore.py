"""The local fallback's store: pacer's Lua scripts run in-process, on lupa
(Lua 5.1's language: Debian's python3-lupa runs LuaJIT 2.1), over a small
in-memory emulation of the Redis commands the core scripts call. It holds
no pacing rule: those are the scripts'. A differential test holds it to
redis-server.

Emulated (Redis 7.0's replies as a script sees them): GET SET (PX,
KEEPTTL) DEL EXISTS TYPE PTTL PEXPIRE TIME HMGET (absent hashes) PUBLISH
(0 subscribers), on string keys. Any other command fails with "ERR the
local store does not implement ...". A number handed to redis.call is
written "%.17g", as Redis 7.0 writes it.

Redis's struct library (struct.pack, unpack and size) is there, as Redis
7.0.15's lua_struct.c on x86-64 behaves (values and error messages; see
_Struct), but for the name and position an argument error gives when the
call is a tail call (``return struct.pack(...)``: LuaJIT names the
function the call returns from), and a NaN's payload (unpack returns a
NaN with its sign only: LuaJIT keeps no other NaN from C).
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import struct as pystruct
import threading
import time
from typing import Any, Callable, Sequence

import redis

from . import protocol

try:  # lupa is optional: without it the fallback waits for Redis
    import lupa  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - exercised where lupa is missing
    lupa = None

AVAILABLE = lupa is not None


class LocalStore:
    """A keyspace and a Lua interpreter, with the scripts of ``scripts``.
    ``clock`` returns now, Unix ns (the server's clock as estimated): TIME
    returns it and keys expire by it. It answers ``execute_command`` as a
    redis.Redis does for EVALSHA, SCRIPT LOAD, GET, SET, DEL and PTTL, so
    that :class:`protocol.Scripts` runs its scripts unchanged on it.
    Thread-safe: one script at a time."""

    def __init__(self, scripts: protocol.Scripts, clock: Callable[[], int] = time.time_ns) -> None:
        if lupa is None:
            raise RuntimeError("pacer: the local fallback needs lupa (Debian: python3-lupa)")
        self._scripts = scripts
        self._clock = clock
        self._lock = threading.Lock()
        self._data: dict[bytes, tuple[str, bytes, int | None]] = {}  # key -> (type, value, expiry Unix ms)
        self._lua = lupa.LuaRuntime(encoding=None, unpack_returned_tuples=False)
        self._fns: dict[str, Any] = {}
        self._now_ms = 0
        g = self._lua.globals()
        self._make_table = self._lua.table_from
        setup = self._lua.execute(
            """
            return function(call)
            local redis = {}
            redis.call = function(...)
              local r = call(false, ...)
              if type(r) == 'table' and r.err then error(r, 0) end
              return r
            end
            redis.pcall = function(...) return call(true, ...) end
            redis.error_reply = function(msg) return {err = msg} end
            redis.status_reply = function(msg) return {ok = msg} end
            redis.log = function() end
            redis.LOG_WARNING, redis.LOG_NOTICE, redis.LOG_VERBOSE, redis.LOG_DEBUG = 3, 2, 1, 0
            return redis
            end
            """
        )
        g.redis = setup(self._call)
        g.struct = _Struct(self._lua).library()

    # -------------------------------------------------------- the keyspace

    def _get(self, key: bytes) -> tuple[str, bytes, int | None] | None:
        v = self._data.get(key)
        if v is not None and v[2] is not None and v[2] <= self._now_ms:
            del self._data[key]
            return None
        return v

    def _call(self, protected: bool, *raw: Any) -> Any:
        args = [_arg(a) for a in raw]
        try:
            return self._command(args)
        except _CommandError as e:
            t = self._lua.table_from({b"err": str(e).encode()})
            return t

    def _command(self, args: list[bytes]) -> Any:
        if not args:
            raise _CommandError("ERR Please specify at least one argument for this redis lib call")
        name = args[0].decode().upper()
        a = args[1:]
        table = self._lua.table_from
        if name == "GET" and len(a) == 1:
            v = self._get(a[0])
            if v is None:
                return False
            if v[0] != "string":
                raise _CommandError("WRONGTYPE Operation against a key holding the wrong kind of value")
            return v[1]
        if name == "SET" and len(a) >= 2:
            old = self._get(a[0])
            expiry: int | None = None
            opts = [o.upper() for o in a[2:]]
            if opts == [b"KEEPTTL"]:
                expiry = old[2] if old is not None else None
            elif len(opts) == 2 and opts[0] == b"PX":
                ms = int(a[3])
                if ms <= 0:
                    raise _CommandError("ERR invalid expire time in 'set' command")
                expiry = self._now_ms + ms
            elif opts:
                raise _CommandError("ERR the local store does not implement SET " + b" ".join(a[2:]).decode())
            self._data[a[0]] = ("string", a[1], expiry)
            return table({b"ok": b"OK"})
        if name == "DEL" and a:
            n = 0
            for k in a:
                if self._get(k) is not None:
                    del self._data[k]
                    n += 1
            return n
        if name == "EXISTS" and a:
            return sum(1 for k in a if self._get(k) is not None)
        if name == "TYPE" and len(a) == 1:
            v = self._get(a[0])
            return table({b"ok": (v[0] if v else "none").encode()})
        if name == "PTTL" and len(a) == 1:
            v = self._get(a[0])
            if v is None:
                return -2
            return -1 if v[2] is None else v[2] - self._now_ms
        if name == "PEXPIRE" and len(a) == 2:
            v = self._get(a[0])
            if v is None:
                return 0
            ms = int(a[1])
            if ms <= 0:
                del self._data[a[0]]
            else:
                self._data[a[0]] = (v[0], v[1], self._now_ms + ms)
            return 1
        if name == "TIME" and not a:
            ns = self._now_ns
            return table([str(ns // 1_000_000_000).encode(), str(ns // 1000 % 1_000_000).encode()])
        if name == "HMGET" and len(a) >= 2:
            v = self._get(a[0])
            if v is not None:
                raise _CommandError("WRONGTYPE Operation against a key holding the wrong kind of value")
            return table([False] * (len(a) - 1))
        if name == "PUBLISH" and len(a) == 2:
            return 0
        raise _CommandError(f"ERR the local store does not implement {name} with {len(a)} arguments")

    # -------------------------------------------------------- scripts

    def _run(self, name: str, keys: Sequence[bytes], args: Sequence[bytes]) -> protocol.Reply:
        fn = self._fns.get(name)
        if fn is None:
            fn = self._lua.execute(b"return function()\n" + self._scripts.text[name] + b"\nend")
            self._fns[name] = fn
        g = self._lua.globals()
        g.KEYS = self._lua.table_from(list(keys))
        g.ARGV = self._lua.table_from(list(args))
        try:
            out = fn()
        except lupa.LuaError as e:
            err = e.args[0] if e.args else e
            raise redis.exceptions.ResponseError(f"ERR Error running script: {err}") from None
        return self._reply(out)

    def _reply(self, v: Any) -> protocol.Reply:
        if v is None or v is False:
            return None
        if v is True:
            return 1
        if isinstance(v, (int, float)):
            return int(v)  # truncated, as Redis does
        if isinstance(v, bytes):
            return protocol.normalize(v)
        if lupa.lua_type(v) == "table":
            if v[b"err"] is not None:
                raise redis.exceptions.ResponseError(protocol.normalize(_arg(v[b"err"])))
            if v[b"ok"] is not None:
                return protocol.normalize(_arg(v[b"ok"]))
            out: list[protocol.Reply] = []
            i = 1
            while v[i] is not None:
                out.append(self._reply(v[i]))
                i += 1
            return out
        return None

    def execute_command(self, *args: Any) -> Any:
        """The commands Scripts.run and the Limiter send: EVALSHA, SCRIPT
        LOAD, GET, SET, DEL and PTTL."""
        b = [_arg(a) for a in args]
        cmd = b[0].decode().upper()
        with self._lock:
            self._now_ns = self._clock()
            self._now_ms = self._now_ns // 1_000_000
            if cmd == "EVALSHA":
                sha, n = b[1].decode(), int(b[2])
                names = [k for k, s in self._scripts.sha.items() if s == sha]
                if not names:
                    raise redis.exceptions.NoScriptError("NOSCRIPT No matching script.")
                return self._run(names[0], b[3:3 + n], b[3 + n:])
            if cmd == "SCRIPT":
                return hashlib.sha1(b[2]).hexdigest()
            try:
                v = self._command(b)
            except _CommandError as e:
                raise redis.exceptions.ResponseError(str(e)) from None
            if v is False:
                return None
            if not isinstance(v, (bytes, int)):
                return self._reply(v)
            return v

    def keys(self) -> list[str]:
        """The keys held (not expired)."""
        with self._lock:
            self._now_ms = self._clock() // 1_000_000
            return sorted(k.decode() for k in list(self._data) if self._get(k) is not None)


class _CommandError(Exception):
    pass


def _arg(a: Any) -> bytes:
    if isinstance(a, bytes):
        return a
    if isinstance(a, bool):
        raise _CommandError("ERR Lua redis lib command arguments must be strings or integers")
    if isinstance(a, int):
        return str(a).encode()
    if isinstance(a, float):
        if a.is_integer() and abs(a) < 1e17:
            return str(int(a)).encode()
        return ("%.17g" % a).encode()
    if isinstance(a, str):
        return protocol.to_bytes(a)  # a str as protocol.normalize read it
    raise _CommandError("ERR Lua redis lib command arguments must be strings or integers")


# ------------------------------------------------------------------ struct

_M64 = (1 << 64) - 1
_MAX_INT_SIZE = 32  # MAXINTSIZE
_MAX_ALIGN = 8  # MAXALIGN: a double's padding after a char
_MAX_STACK = 8000  # LUAI_MAXCSTACK, which luaL_checkstack checks
_INT_MAX = (1 << 31) - 1


class _StructError(Exception):
    """An error of the struct library: luaL_argerror's when arg is an
    argument's number, else luaL_error's."""

    def __init__(self, msg: bytes, arg: int | None = None) -> None:
        super().__init__(msg)
        self.msg = msg
        self.arg = arg


class _Struct:
    """Redis's struct library (deps/lua/src/lua_struct.c, Roberto
    Ierusalimschy's struct.c 1.7, in Redis 7.0.15), as internal/luastore's
    luastruct.go has it for Go: the C code's quirks kept (the format ends at
    a NUL; LP64 sizes, little-endian by default; i/I of 1 to 32 bytes, 8 of
    which carry the value; pack's missing arguments are "nil" in its
    errors; "string too short" names the argument after the string;
    unpack's position wraps as a size_t; c0 takes its length from the
    previous value, a number or a string that reads as one; size skips
    letters that are no option; the 8000-slot stack check) and, where C is
    undefined, x86-64's answers (a double out of range or NaN converted to
    an integer gives 1<<63; the sign extension of i0 and i9..i32 shifts by
    size*8-1 mod 64).

    The functions scripts call are Lua wrappers (library()): they read the
    arguments' types and numbers as Lua does (tonumber: the runtime's own
    coercion), call the Python code, and raise its errors as
    luaL_argerror and luaL_error do, naming the function as the call site
    does (debug.getinfo) and with the caller's position."""

    def __init__(self, lua: Any) -> None:
        self._lua = lua
        self._tonumber = lua.globals().tonumber

    def library(self) -> Any:
        make = self._lua.execute(
            """
            local getinfo, select, type, tonumber, error = debug.getinfo, select, type, tonumber, error
            local unpack, ipairs = unpack or table.unpack, ipairs
            local PNAN  -- LuaJIT makes every NaN pushed from C its -nan: PNAN is +nan
            local function wrap(impl)
              return function(...)
                local n, a, types, nums = select('#', ...), {...}, {}, {}
                for i = 1, n do
                  local v = a[i]
                  types[i] = type(v)
                  local x = tonumber(v)
                  if x ~= nil then
                    if x == 0 and 1 / x < 0 then x = false end  -- -0: lupa would pass 0
                    nums[i] = x
                  end
                end
                local r = impl(n, a, types, nums)
                if r.err ~= nil then
                  local msg = r.err
                  if r.arg ~= nil then  -- luaL_argerror
                    local narg, ar = r.arg, getinfo(1, 'n')
                    if ar.namewhat == 'method' then
                      narg = narg - 1
                      if narg == 0 then
                        error("calling '" .. ar.name .. "' on bad self (" .. msg .. ")", 2)
                      end
                    end
                    msg = 'bad argument #' .. narg .. " to '" .. (ar.name or '?') .. "' (" .. msg .. ')'
                  end
                  error(msg, 2)
                end
                local k = r.n
                if r.pnan ~= nil and PNAN ~= nil then
                  for _, i in ipairs(r.pnan) do r[i] = PNAN end
                end
                if k > 7997 then return r[1], unpack(r, 2, k) end  -- unpack's own stack check
                return unpack(r, 1, k)
              end
            end
            return function(pack, unpack_, size, nan)
              if jit then PNAN = -nan end
              return {pack = wrap(pack), unpack = wrap(unpack_), size = wrap(size)}
            end
            """
        )
        return make(self._call(self.pack), self._call(self.unpack), self._call(self.size), math.nan)

    def _call(self, f: Callable[[_Args], list[Any]]) -> Callable[..., Any]:
        table = self._lua.table_from

        def call(n: int, a: Any, types: Any, nums: Any) -> Any:
            try:
                out = f(_Args(int(n), a, types, nums))
            except _StructError as e:
                return table({b"err": e.msg, b"arg": e.arg} if e.arg is not None else {b"err": e.msg})
            t = table(out)
            t[b"n"] = len(out)
            pnan = [i + 1 for i, v in enumerate(out) if isinstance(v, float) and math.isnan(v) and math.copysign(1, v) > 0]
            if pnan:
                t[b"pnan"] = table(pnan)
            return t

        return call

    # ---------------------------------------------------------- the C code

    def pack(self, args: _Args) -> list[Any]:
        fmt = _Format(args.string(1, False))
        little, align = True, 1
        arg = 2
        total = 0
        out = bytearray()
        while fmt.more():
            opt = fmt.next()
            size = fmt.optsize(opt)
            toalign = _gettoalign(total, align, opt, size)
            total += toalign
            out += bytes(toalign)
            if opt in _INTEGERS:
                n = args.number(arg)
                arg += 1
                v = _cvttsd2si(n) & _M64 if n < 0 else _c_to_uint64(n)
                out += _put_uint(v, little, size)
            elif opt == ord("x"):
                out.append(0)
            elif opt == ord("f"):
                n = args.number(arg)
                arg += 1
                b = bytes(ctypes.c_float(n))  # C's (float)n, in the host's order (little)
                out += b if little else b[::-1]
            elif opt == ord("d"):
                n = args.number(arg)
                arg += 1
                out += pystruct.pack("<d" if little else ">d", n)
            elif opt in (ord("c"), ord("s")):
                s = args.string(arg, True)
                arg += 1
                if size == 0:
                    size = len(s)
                if len(s) < size:
                    raise _StructError(b"string too short", arg)  # arg: the next one, as in C
                out += s[:size]
                if opt == ord("s"):
                    out.append(0)
                    size += 1
            else:
                little, align = fmt.control(opt, little, align)
            total += size
        return [bytes(out)]

    def unpack(self, args: _Args) -> list[Any]:
        fmt = _Format(args.string(1, False))
        data = args.string(2, False)
        ld = len(data)
        pos = 1
        if args.n >= 3 and args.type(3) != b"nil":
            n = args.nums[3]
            if n is None:
                raise _StructError(b"number expected, got " + args.type_name(3, False), 3)
            pos = _cvttsd2si(float(n or 0)) & _M64  # lua_tointeger, then a size_t
        if pos == 0:
            raise _StructError(b"offset must be 1 or greater", 3)
        pos -= 1
        little, align = True, 1
        res: list[Any] = []
        while fmt.more():
            opt = fmt.next()
            size = fmt.optsize(opt)
            pos = (pos + _gettoalign(pos, align, opt, size)) & _M64
            if not (size <= ld and pos <= ld - size):
                raise _StructError(b"data string too short", 2)
            if args.n + len(res) + 2 > _MAX_STACK:
                raise _StructError(b"stack overflow (too many results)")
            if opt in _INTEGERS:
                res.append(_get_integer(data[pos:pos + size], little, opt in _SIGNED, size))
            elif opt == ord("x"):
                pass
            elif opt == ord("f"):
                b = data[pos:pos + 4]
                res.append(ctypes.c_float.from_buffer_copy(b if little else b[::-1]).value)
            elif opt == ord("d"):
                res.append(pystruct.unpack("<d" if little else ">d", data[pos:pos + 8])[0])
            elif opt == ord("c"):
                if size == 0:
                    prev = None
                    if res:
                        prev = res[-1] if isinstance(res[-1], float) else self._tonumber(res[-1])
                    if prev is None:
                        raise _StructError(b"format 'c0' needs a previous size")
                    size = _c_to_uint64(float(prev))
                    res.pop()
                    if not (size <= ld and pos <= ld - size):
                        raise _StructError(b"data string too short", 2)
                res.append(data[pos:pos + size])
            elif opt == ord("s"):
                e = data.find(b"\0", pos)
                if e < 0:
                    raise _StructError(b"unfinished string in data")
                size = e - pos + 1
                res.append(data[pos:e])
            else:
                little, align = fmt.control(opt, little, align)
            pos = (pos + size) & _M64
        res.append(float(_int64(pos + 1)))  # lua_pushinteger: a ptrdiff_t
        return res

    def size(self, args: _Args) -> list[Any]:
        fmt = _Format(args.string(1, False))
        little, align = True, 1
        pos = 0
        while fmt.more():
            opt = fmt.next()
            size = fmt.optsize(opt)
            pos += _gettoalign(pos, align, opt, size)
            if opt == ord("s"):
                raise _StructError(b"option 's' has no fixed size", 1)
            if opt == ord("c") and size == 0:
                raise _StructError(b"option 'c0' has no fixed size", 1)
            if not (ord("0") <= opt <= ord("9") or ord("a") <= opt <= ord("z") or ord("A") <= opt <= ord("Z")):
                little, align = fmt.control(opt, little, align)
            pos += size
        return [float(_int64(pos))]


_INTEGERS = frozenset(b"bBhHlLTiI")
_SIGNED = frozenset(b"bhli")


class _Args:
    """A call's arguments as the wrapper passes them: their number, the
    values, their Lua types, and tonumber of each (None: not a number;
    False: -0)."""

    def __init__(self, n: int, a: Any, types: Any, nums: Any) -> None:
        self.n = n
        self.a = a
        self.types = types
        self.nums = nums

    def type(self, i: int) -> bytes:
        t = self.types[i]
        return t if t is not None else b"nil"

    def type_name(self, i: int, pack: bool) -> bytes:
        """luaL_typename: "no value" past the last argument, but "nil" in
        pack (the C code has pushed a nil after its arguments)."""
        if i > self.n and not (pack and i > 1):
            return b"no value"
        return self.type(i)

    def number(self, i: int) -> float:
        """luaL_checknumber (pack's)."""
        n = self.nums[i]
        if n is None:
            raise _StructError(b"number expected, got " + self.type_name(i, True), i)
        return -0.0 if n is False else float(n)

    def string(self, i: int, pack: bool) -> bytes:
        """luaL_checklstring: a string, or a number written "%.14g"."""
        t = self.type(i)
        if t == b"string":
            return bytes(self.a[i])
        if t == b"number":
            return _g14(self.number(i))
        raise _StructError(b"string expected, got " + self.type_name(i, pack), i)


class _Format:
    """A format being read, as the C code's const char **fmt."""

    def __init__(self, s: bytes) -> None:
        self.s = s.split(b"\0", 1)[0]
        self.i = 0

    def more(self) -> bool:
        return self.i < len(self.s)

    def next(self) -> int:
        c = self.s[self.i]
        self.i += 1
        return c

    def getnum(self, df: int) -> int:
        if not self.more() or not 0x30 <= self.s[self.i] <= 0x39:
            return df
        a = 0
        while self.more() and 0x30 <= self.s[self.i] <= 0x39:
            d = self.s[self.i] - 0x30
            if a > _INT_MAX // 10 or a * 10 > _INT_MAX - d:
                raise _StructError(b"integral size overflow")
            a = a * 10 + d
            self.i += 1
        return a

    def optsize(self, opt: int) -> int:
        c = chr(opt)
        if c in "bBx":
            return 1
        if c in "hH":
            return 2
        if c in "lLTd":
            return 8
        if c == "f":
            return 4
        if c == "c":
            return self.getnum(1)
        if c in "iI":
            sz = self.getnum(4)
            if sz > _MAX_INT_SIZE:
                raise _StructError(b"integral size %d is larger than limit of %d" % (sz, _MAX_INT_SIZE))
            return sz
        return 0

    def control(self, opt: int, little: bool, align: int) -> tuple[bool, int]:
        """controloptions: ' ', '>', '<' and '!'; else an invalid option."""
        if opt == ord(" "):
            return little, align
        if opt == ord(">"):
            return False, align
        if opt == ord("<"):
            return True, align
        if opt == ord("!"):
            a = self.getnum(_MAX_ALIGN)
            if a <= 0 or a & (a - 1):
                raise _StructError(b"alignment %d is not a power of 2" % a)
            return little, a
        raise _StructError(b"invalid format option '" + bytes([opt]) + b"'", 1)


def _gettoalign(n: int, align: int, opt: int, size: int) -> int:
    if size == 0 or opt == ord("c"):
        return 0
    size = min(size, align)
    return (size - (n & (size - 1))) & (size - 1)


def _cvttsd2si(x: float) -> int:
    """x86-64's truncating conversion to a 64-bit integer, C's (long)x
    there: NaN and values out of range give -2^63."""
    if -(2.0**63) <= x < 2.0**63:
        return int(x)
    return -(1 << 63)


def _c_to_uint64(x: float) -> int:
    """C's (unsigned long)x as gcc compiles it for x86-64."""
    if x >= 2.0**63:
        return (_cvttsd2si(x - 2.0**63) & _M64) ^ (1 << 63)
    return _cvttsd2si(x) & _M64


def _int64(v: int) -> int:
    v &= _M64
    return v - (1 << 64) if v >> 63 else v


def _put_uint(v: int, little: bool, size: int) -> bytes:
    """The low size bytes of v in the order given (past 8, zeros)."""
    b = (v & ((1 << (8 * min(size, 8))) - 1)).to_bytes(min(size, 8), "little") + bytes(max(size - 8, 0))
    return b if little else b[::-1]


def _get_integer(b: bytes, little: bool, signed: bool, size: int) -> float:
    """The C code's getinteger: the value read into 64 bits (the last 8
    bytes read), sign-extended from bit size*8-1 (mod 64), as a double."""
    v = int.from_bytes(b, "little" if little else "big") & _M64
    if not signed:
        return float(v)
    mask = (_M64 << ((size * 8 - 1) & 63)) & _M64
    if v & mask:
        v |= mask
    return float(_int64(v))


def _g14(x: float) -> bytes:
    """Lua 5.1's number to string, "%.14g" with glibc's "-nan"."""
    if math.isnan(x):
        return b"-nan" if math.copysign(1.0, x) < 0 else b"nan"
    return b"%.14g" % x
