"""The local fallback's store: pacer's Lua scripts run in-process, on lupa
(Lua 5.1, the Lua Redis embeds), over a small in-memory emulation of the
Redis commands the core scripts call. It holds no pacing rule: those are
the scripts'. A differential test holds it to redis-server.

Emulated (Redis 7.0's replies as a script sees them): GET SET (PX,
KEEPTTL) DEL EXISTS TYPE PTTL PEXPIRE TIME HMGET (absent hashes) PUBLISH
(0 subscribers), on string keys. Any other command fails with "ERR the
local store does not implement ...". A number handed to redis.call is
written "%.17g", as Redis 7.0 writes it.
"""

from __future__ import annotations

import hashlib
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
            return v.decode()
        if lupa.lua_type(v) == "table":
            if v[b"err"] is not None:
                raise redis.exceptions.ResponseError(_arg(v[b"err"]).decode())
            if v[b"ok"] is not None:
                return _arg(v[b"ok"]).decode()
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
        return a.encode()
    raise _CommandError("ERR Lua redis lib command arguments must be strings or integers")
