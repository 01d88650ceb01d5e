"""Redis's struct library in the local store (localstore._Struct), held to
redis-server as internal/luastore's TestStruct* hold Go's: each case is a
script run by EVAL on Redis and on the store, and the replies must be the
same, errors' messages included (their position, which names each side's
chunk, reduced to "<pos>"). A random round trip (seeded; the seed is
printed, PACER_STRUCT_SEED=n replays it) packs and unpacks on both sides
and checks the values come back."""

from __future__ import annotations

import hashlib
import math
import os
import platform
import random
import re
import struct as pystruct
import time
import unittest
from typing import Any

import support

from pacer import localstore, protocol

# show(...) returns its arguments as strings that keep what a script can
# tell of them: a number as its bits, in hex (struct.pack('>d'), which the
# cases check against Redis themselves: LuaJIT's string.format rounds
# "%.17g" otherwise than glibc on ties, and writes every NaN "nan"), a
# NaN as its sign (LuaJIT keeps no NaN payload from C), a string in hex.
SHOW = (
    "local function hex(s) return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end)) end "
    "local function show(...) local a, o = {...}, {} for i = 1, select('#', ...) do local v, t = a[i], type(a[i]) "
    "if t == 'number' and v ~= v then o[i] = 'nan:' .. (string.byte(struct.pack('>d', v)) >= 128 and '-' or '+') "
    "elseif t == 'number' then o[i] = 'n:' .. hex(struct.pack('>d', v)) "
    "elseif t == 'string' then o[i] = 's:' .. hex(v) else o[i] = t .. ':' .. tostring(v) end end return o end "
    "local NZ, NAN = -tonumber('0'), 0 / 0 "
)

POSITION = re.compile(r'^(user_script|\[string "[^"]*"\]):\d+: ')


def expr_script(expr: str) -> str:
    """A script that returns show(expr), or {'error', message} when expr
    raises (the call is no tail call: see localstore's docstring)."""
    return SHOW + ("local ok, r = pcall(function() return show(" + expr + ") end) "
                   "if ok then return r end return {'error', hex(r)}")


def text(v: Any) -> Any:
    """A reply as str, an error's message (in hex) decoded, its position
    reduced to "<pos>"."""
    if isinstance(v, bytes):
        v = v.decode("latin-1")
    if isinstance(v, list):
        v = [text(x) for x in v]
        if len(v) == 2 and v[0] == "error":
            return ["error", POSITION.sub("<pos>: ", bytes.fromhex(v[1]).decode("latin-1"))]
    return v


def lua_bytes(b: bytes) -> str:
    return "'" + "".join(f"\\{c}" for c in b) + "'"


@unittest.skipUnless(localstore.AVAILABLE, "lupa is not installed")
class StructTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = support.client()
        self.scripts = protocol.Scripts()
        self.store = localstore.LocalStore(self.scripts)

    def store_eval(self, src: str, *args: Any) -> Any:
        b = src.encode()
        sha = hashlib.sha1(b).hexdigest()
        self.scripts.text[sha] = b
        self.scripts.sha[sha] = sha
        return self.store.execute_command("EVALSHA", sha, 0, *args)

    def both(self, src: str, *args: Any) -> Any:
        r = text(self.c.eval(src, 0, *args))
        s = text(self.store_eval(src, *args))
        self.assertEqual(s, r, src.removeprefix(SHOW))
        return r

    def cases(self, exprs: list[str]) -> None:
        for e in exprs:
            self.both(expr_script(e))

    def test_integers(self) -> None:
        exprs = []
        for n in range(1, 9):
            bits = 8 * n
            for e in "<>":
                si, ui = f"'{e}i{n}'", f"'{e}I{n}'"
                top, full = f"2^{bits - 1}", f"2^{bits}" if n < 8 else "(2^64 - 2048)"
                for v in ["0", "1", "-1", "2.7", "-2.7", "0.5", "-0.5", "NZ", top, "-" + top, top + " - 1",
                          "-" + top + " - 1", full, full + " - 1", "-" + full + " + 1", "255", "256", "-256", "2^32 + 3",
                          "2^53", "2^53 + 2", "-2^53", "2^62 + 2^40", "-(2^63)", "2^63 - 1024", "'12'", "' 0x10 '", "'-7'"]:
                    exprs += [f"struct.pack({si}, {v})", f"struct.pack({ui}, {v})"]
                for d in [bytes(n), b"\xff" * n, b"\x80" + bytes(n - 1), bytes(n - 1) + b"\x80",
                          b"\x7f" + b"\xff" * (n - 1), b"\xff" * (n - 1) + b"\x7f",
                          b"\x01\x23\x45\x67\x89\xab\xcd\xef"[:n], b"\x00\x20\x00\x00\x00\x00\x00\x01"[:n]]:
                    exprs += [f"struct.unpack({si}, {lua_bytes(d)})", f"struct.unpack({ui}, {lua_bytes(d)})"]
        for o in "bBhHlLTiI":
            for e in ["", "<", ">"]:
                f = f"'{e}{o}'"
                exprs += [f"struct.pack({f}, -3)", f"struct.pack({f}, 300.9)",
                          f"struct.unpack({f}, '\\255\\254\\253\\252\\251\\250\\249\\248\\247')", f"struct.size({f})"]
        for f in ["'<I9'", "'>I9'", "'<I16'", "'>I32'", "'<I0'", "'<i16'", "'>i16'", "'i0'"]:
            exprs += [f"struct.pack({f}, -2)", f"struct.pack({f}, 2^64 - 2048)", f"struct.size({f})"]
            if "i" not in f:
                exprs.append(f"struct.unpack({f}, string.rep('\\1\\2\\3\\4\\5\\6\\7\\8', 4))")
        self.cases(exprs)

    def test_floats(self) -> None:
        exprs = []
        for f in ["'f'", "'<f'", "'>f'", "'d'", "'<d'", "'>d'"]:
            for v in ["0", "NZ", "1", "-1.5", "0.1", "1/3", "1/0", "-1/0", "NAN", "-NAN", "2^53 + 2", "1e308 * 10",
                      "5e-324", "1e39", "-1e39", "3.4028235677973366e38", "1e-46", "16777217", "'2.5'", "'0x1p-2'"]:
                exprs.append(f"struct.pack({f}, {v})")
            exprs += [f"struct.unpack({f}, struct.pack({f}, 0.1))", f"struct.unpack({f}, struct.pack({f}, NZ))"]
        for d in [b"\x00\x00\xc0\x7f", b"\x01\x00\x80\x7f", b"\x7f\x80\x00\x01", b"\x00\x00\x80\xff", b"\x01\x00\x00\x00",
                  b"\x00\x00\x00\x00\x00\x00\xf8\x7f", b"\x01\x00\x00\x00\x00\x00\xf0\x7f", b"\x80" + bytes(7)]:
            for f in ["'<f'", "'>f'", "'<d'", "'>d'"]:
                exprs.append(f"struct.unpack({f}, {lua_bytes(d)})")
        self.cases(exprs)

    def test_strings(self) -> None:
        self.cases([
            "struct.pack('c0', '')", "struct.pack('c0', string.rep('ab', 6000))", "struct.pack('c3', 'abcdef')",
            "struct.pack('c', 'xyz')", "struct.pack('c0', 12.5)", "struct.pack('c0', 1e15)", "struct.pack('c0', 1/3)",
            "struct.pack('c0', NZ)", "struct.pack('c3', 'ab')", "struct.pack('bc3', 1, 'ab')", "struct.pack('c0', {})",
            "struct.pack('c0')", "struct.pack('s', 'a\\0b')", "struct.pack('ss', 'a', 'b')", "struct.pack('s', 2^53)",
            "struct.pack('s5', 'a')", "struct.pack('xbx', 1)", "struct.pack('c2147483647', 'a')",
            "struct.unpack('c0', 'ab')", "struct.unpack('bc0', '\\3abcd')", "struct.unpack('Bc0', '\\0')",
            "struct.unpack('<i4c0', '\\2\\0\\0\\0abc')", "struct.unpack('bc0', '\\10abc')", "struct.unpack('c1c0', '3abc')",
            "struct.unpack('c1c0', 'xabc')", "struct.unpack('c2c0', ' 2ab')", "struct.unpack('sc0', '0x2\\0ab')",
            "struct.unpack('dc0', struct.pack('<d', 2.9) .. 'abc')", "struct.unpack('bxc0', '\\2xabc')",
            "struct.unpack('I4c0', struct.pack('I4', 9000) .. string.rep('z', 9000))",
            "struct.unpack('c2', 'a')", "struct.unpack('c2147483647', 'a')", "struct.unpack('s', 'abc\\0def')",
            "struct.unpack('s', 'abc')", "struct.unpack('bs', 'a')", "struct.unpack('xbx', 'abc')",
            "struct.unpack('b', 'abc', 2)", "struct.unpack('b', 'abc', 4)", "struct.unpack('', 'abc', 10)",
            "struct.unpack('b', 'abc', 0)", "struct.unpack('b', 'abc', -1)", "struct.unpack('', 'abc', -5)",
            "struct.unpack('!4i4', 'abcd', -1)", "struct.unpack('b', 'abc', 2.9)", "struct.unpack('b', 'abc', -0.5)",
            "struct.unpack('b', 'abc', '2')", "struct.unpack('b', 'abc', 'x')", "struct.unpack('b', 'abc', nil)",
            "struct.unpack('b', 'abc', {})", "struct.unpack('<', '', 2)", "struct.unpack('b', 123)",
            "struct.unpack(string.rep('B', 7997), string.rep('a', 7997))",
            "struct.unpack(string.rep('B', 7998), string.rep('a', 7998))",
            "struct.unpack(string.rep('B', 7997), string.rep('a', 7998), 1)",
        ])

    def test_formats(self) -> None:
        self.cases([
            "struct.pack('!4 b i4', 1, 2)", "struct.pack('!b d', 1, 2)", "struct.pack('!i3i3', 1, 2)",
            "struct.pack('!8 b h b i b l b T b f b d', 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)",
            "struct.pack('!4 b c3 i2 s h', 1, 'abc', 2, 'xy', 3)", "struct.pack('b!4i2i3I4', 1, 2, 3, 4)",
            "struct.pack('<i2>i2', 1, 1)", "struct.pack('i\\0y', 1)", "struct.pack('i0', 5)",
            "struct.unpack('!4 b i4', 'abcdefgh', 2)", "struct.unpack('!8 d', string.rep('\\0', 16), 3)",
            "struct.size('!8bd')", "struct.size('bhlTfdxi3I7')", "struct.size('c')", "struct.size('y')", "struct.size('1')",
            "struct.size('i33')", "struct.size('!3')", "struct.size('%')", "struct.size('s')", "struct.size('c0')",
            "struct.size(12)", "struct.size()", "struct.size('c99999999999')",
            "struct.pack('y')", "struct.pack('i33', 1)", "struct.pack('!')", "struct.pack('!0')", "struct.pack('!6')",
            "struct.pack('!2147483648')", "struct.pack('5')", "struct.pack(5)", "struct.pack('\\200')",
            "struct.pack('i', 'abc')", "struct.pack('i', {})", "struct.pack('i', true)", "struct.pack('i')",
            "struct.pack('ii', 1)", "struct.pack()", "struct.pack({})",
            "struct.unpack('y', 'abc')", "struct.unpack('q', '')", "struct.unpack()", "struct.unpack('b')",
            "struct.unpack('b', nil)", "struct.unpack(1, 'a')", "struct.unpack('i4', 'ab')",
            "pcall(struct.pack, 'y')", "pcall(struct.unpack, 'c0', 'ab')", "pcall(struct.size, 's')",
            "(function() local p = struct.pack local x = p('y') return x end)()",
            "({f = struct.size}).f('s')", "struct:pack('i')", "struct:unpack('i4', 'ab')", "struct['pack']('i', {})",
        ])
        self.both(SHOW + "local s = struct.pack('>!4 b i4 s d c0 h', -5, 123456, 'hi', 1/3, 'tail', -2) "
                  "return show(#s, struct.unpack('>!4 b i4 s d c4 h', s))")

    def test_undefined(self) -> None:
        """Where lua_struct.c's result is undefined in C (doubles out of
        range or NaN converted to integers, the sign extension of i0 and
        i9..i32), the store gives x86-64's answers: compared on x86-64 only
        (not a skip: TestPython counts a skip as a failure)."""
        if platform.machine() not in ("x86_64", "AMD64"):
            print(f"\ntest_struct: undefined conversions not compared on {platform.machine()} (the store copies x86-64)")
            return
        exprs = []
        for f in ["'<i8'", "'>I8'", "'<i4'", "'<I16'"]:
            for v in ["NAN", "-NAN", "1/0", "-1/0", "2^64", "1e30", "-1e30", "-2^63 - 4096", "1e300"]:
                exprs.append(f"struct.pack({f}, {v})")
        for f in ["'<i0'", "'<i9'", "'>i9'", "'<i12'", "'<i16'", "'<i31'", "'>i32'"]:
            for d in ["string.rep('\\0', 32)", "'\\128' .. string.rep('\\0', 31)",
                      "string.rep('\\0', 7) .. '\\128' .. string.rep('\\0', 24)", "string.rep('\\255', 32)",
                      "string.rep('\\0', 15) .. '\\128' .. string.rep('\\0', 16)"]:
                exprs.append(f"struct.unpack({f}, {d})")
        exprs += ["struct.unpack('bc0', '\\255abc')", "struct.unpack('dc0', struct.pack('<d', NAN) .. 'abc')",
                  "struct.unpack('', 'abc', NAN)", "struct.unpack('', 'abc', 1e30)", "struct.unpack('', 'abc', 2^63)"]
        self.cases(exprs)

    def test_round_trip(self) -> None:
        seed = int(os.environ.get("PACER_STRUCT_SEED", time.time_ns()))
        print(f"\ntest_struct round trip: seed {seed} (replay: PACER_STRUCT_SEED={seed})")
        rng = random.Random(seed)
        src = ("local f = ARGV[1] local v = {} local i = 2 while i <= #ARGV do "
               "if ARGV[i] == 'n' then v[#v + 1] = tonumber(ARGV[i + 1]) else v[#v + 1] = ARGV[i + 1] end i = i + 2 end "
               "local s = struct.pack(f, unpack(v)) local out = {string.format('%d', #s)} "
               "for _, x in ipairs({struct.unpack(f, s)}) do if type(x) == 'number' then x = struct.pack('>d', x) end "
               "x = (string.gsub(x, '.', function(c) return string.format('%02x', string.byte(c)) end)) "
               "out[#out + 1] = x end return out")
        for it in range(150):
            fmt, args, want = random_format(rng)
            where = f"seed {seed} iteration {it}: format {fmt!r}, values {args[1:]!r}"
            got = self.both(src, *args)
            self.assertEqual(got[1:], want + [pystruct.pack(">d", int(got[0]) + 1).hex()], where)


def random_format(rng: random.Random) -> tuple[str, list[Any], list[str]]:
    """A format of a few options, the EVAL arguments that pack values for it
    (the format first), and what unpack must give back for each value."""
    f = ""
    args: list[Any] = [""]
    want: list[str] = []

    def num(x: float) -> None:
        args.extend(["n", repr(x)])
        want.append(pystruct.pack(">d", x).hex())

    def below(top: int) -> float:
        return math.floor(math.nextafter(2.0**top, 0.0))  # the largest double below 2^top

    def integer(size: int, signed: bool) -> float:
        bits = min(8 * size, 64)
        if rng.randrange(4) == 0:
            lo, hi = (-(2.0 ** (bits - 1)), below(bits - 1)) if signed else (0.0, below(bits))
            return rng.choice([lo, hi, 0.0, -1.0 if signed else 1.0, 1.0])
        mag = rng.randrange(bits - int(signed))
        x = float(rng.getrandbits(max(mag, 1)) if mag <= 53 else rng.getrandbits(53) << (mag - 53))
        if signed and x != 0 and rng.randrange(2) == 0:
            x = -x
        return x

    if rng.randrange(3) == 0:
        f += "!%d" % (1 << rng.randrange(4))
    for _ in range(1 + rng.randrange(6)):
        if rng.randrange(4) == 0:
            f += rng.choice("<> ")
        k = rng.randrange(12)
        if k < 4:
            size, signed = 1 + rng.randrange(8), rng.randrange(2) == 0
            f += ("i" if signed else "I") + str(size)
            num(integer(size, signed))
        elif k == 4:
            o = rng.choice("bBhHlLTiI")
            f += o
            num(integer({"b": 1, "h": 2, "l": 8, "t": 8, "i": 4}[o.lower()], o.islower()))
        elif k == 5:
            f += "d"
            num(rng.choice([rng.gauss(0, 1) * 10.0 ** rng.randrange(-20, 20), float("inf"), float("-inf"),
                            1.7976931348623157e308, 5e-324, 0.0]))
        elif k == 6:
            f += "f"
            num(pystruct.unpack("<f", pystruct.pack("<f", rng.gauss(0, 1000)))[0])
        elif k == 7:
            f += "x"
        else:
            s = bytes(rng.randrange(1 if k >= 10 else 0, 256) for _ in range(rng.randrange(12)))
            if k >= 10:
                f += "s"
            elif s and rng.randrange(2) == 0:
                f += "c%d" % len(s)
            else:
                f += "I%dc0" % (1 + rng.randrange(4))
                args.extend(["n", str(len(s))])
            args.extend(["s", s])
            want.append(s.hex())
    args[0] = f
    return f, args, want


if __name__ == "__main__":
    unittest.main()
