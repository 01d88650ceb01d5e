"""The conformance cases of lua/conformance_test.go (and
conformance_cases_test.go, and docs/protocol.md's redis blocks), as the Go
tests recorded them in lua/testdata/conformance.json, run through this
client's code: its script loading (EVALSHA, NOSCRIPT), its encoding of
every Reserve and Adjust call (byte for byte), its decoding of the
replies (Reserve's bytes, against the Go tests' own decoding), and its
reading of every state, in its three formats. Two deliberately wrong
clients (mutants switched on here, in the test) fail them: one that
computes a slot on its own clock, one that ignores a pause.

The file's strings are binary-safe (lua/cases_test.go): {"hex": "..."} is
a string of bytes, read here as protocol.normalize reads a reply's."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import struct as pystruct
import time
import unittest
from typing import Any, Callable
from unittest import mock

import support  # noqa: F401 - sets sys.path

from pacer import protocol

ANY = {"any": True}


def unhex(v: Any) -> Any:
    """The cases' file's values with each {"hex": "..."} as the string of
    its bytes (protocol.normalize's: bytes that are not UTF-8 as lone
    surrogates)."""
    if isinstance(v, dict) and set(v) == {"hex"}:
        return protocol.normalize(bytes.fromhex(v["hex"]))
    if isinstance(v, list):
        return [unhex(x) for x in v]
    if isinstance(v, dict):
        return {k: unhex(x) for k, x in v.items()}
    return v


def load_cases() -> dict[str, Any]:
    with open(support.CASES) as f:
        return unhex(json.load(f))


def matches(got: Any, want: Any) -> bool:
    if want == ANY:
        return True
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(matches(g, w) for g, w in zip(got, want))
    return got == want


def script_name(sha_ref: str) -> str:
    upper = sha_ref.lstrip("$")
    for name in protocol.SCRIPT_FILES:
        if name.upper() == upper:
            return name
    raise KeyError(sha_ref)


class Runner:
    """Runs one recorded test's calls on a prefix of its own."""

    def __init__(self, scripts: protocol.Scripts, client: Any) -> None:
        self.scripts, self.client = scripts, client
        self.failures: list[str] = []
        self.counts = {"encoded": 0, "refused": 0, "decoded": 0, "states": 0}

    def fail(self, where: str, msg: str) -> None:
        self.failures.append(f"{where}: {msg}")

    def run_test(self, name: str, entry: dict[str, Any]) -> None:
        pre = support.prefix()
        sec, _ = self.client.execute_command("TIME")
        ms = int(sec) * 1000
        fill = {"{ms}": str(ms), "{ms-1000}": str(ms - 1000), "{ms+60000}": str(ms + 60000)}

        def sub(s: str) -> str:
            for k, v in fill.items():
                s = s.replace(k, v)
            return "pre:" + s[len("pacer:"):] if s.startswith("pacer:") else s

        for i, call in enumerate(entry["calls"]):
            cmd = [sub(a) for a in call["cmd"]]
            cmd = [pre + a[4:] if a.startswith("pre:") else a for a in cmd]
            want_err = call.get("err")
            want = fill_in(call.get("reply"), fill)
            where = f"{name} call {i} {call['cmd'][:2]}"
            got, err = self.send(cmd)
            if want_err is not None:
                if err is None or err.split(" ", 1)[0] != want_err.split(" ", 1)[0]:
                    self.fail(where, f"got {got!r} / {err!r}, want the error {want_err!r}")
            elif err is not None:
                self.fail(where, f"error {err!r}, want {want!r}")
            elif not matches(got, want):
                self.fail(where, f"got {got!r}, want {want!r}")
            if cmd[0] == "EVALSHA":
                self.check_encoding(where, script_name(call["cmd"][1]), cmd, want_err)
                if err is None:
                    self.check_decoding(where, script_name(call["cmd"][1]), got, fill_in(call.get("reserve"), fill))
        for want_state in entry["states"]:
            self.check_state(f"{name} state {want_state['text']!r}", want_state["text"], want_state)

    def send(self, cmd: list[str]) -> tuple[Any, str | None]:
        try:
            if cmd[0] == "EVALSHA":
                n = int(cmd[2])
                return self.scripts.run(self.client, script_name_from_sha(self.scripts, cmd[1]),
                                        cmd[3:3 + n], cmd[3 + n:]), None
            v = protocol.normalize(self.client.execute_command(*(protocol.to_bytes(a) for a in cmd)))
            return ("OK" if v is True else v), None  # redis-py reads SET's OK as True
        except protocol.PacerError as e:
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - Redis's own errors are replies here
            return None, str(e)

    # -- encoding: the client builds the same arguments from typed values

    def check_encoding(self, where: str, name: str, cmd: list[str], want_err: str | None) -> None:
        n = int(cmd[2])
        args = cmd[3 + n:]
        if name not in ("Reserve", "Adjust") or len(args) < 3:
            return
        typed = parse_common(args)
        if typed is None:
            return  # a deadline, "f3 ", a malformed head...: not the client's to send
        now_us, now_ns, fmt, lost, share, units, policy_args = typed
        try:
            policy = build_policy(policy_args, units)
        except (ValueError, TypeError) as e:
            # The client refuses only what the scripts refuse.
            self.counts["refused"] += 1
            if want_err is None or not want_err.startswith("PACER_ARG"):
                self.fail(where, f"the client refuses a policy the scripts take: {e}")
            return
        if policy is None:
            return
        # The case's own ARGV[2] carries its calendar tables (in share): none
        # learned (a PACER_CALENDAR reply of an earlier call) is added here.
        protocol.forget_calendars()
        common = protocol.common_args(share, policy, now_us, now_ns, fmt, lost)
        if protocol.to_bytes(common[2]) != protocol.to_bytes(args[2]):
            return  # a Limit written as text: the client sends "L" and two doubles
        rest = args[3:]
        try:
            if name == "Reserve":
                if len(rest) > 2:
                    return
                floor = rest[0] if rest else ""
                raw = protocol.to_bytes(rest[1]) if len(rest) > 1 else b""
                if raw in (b"", b"0"):
                    reqs: list[tuple[int, list[float]]] = [] if raw == b"0" else [(-1, [1.0] * len(units))]
                else:
                    width = 8 * (1 + len(units))
                    if len(raw) % width:
                        return  # not whole requests: no client sends it
                    reqs = []
                    for i in range(0, len(raw), width):
                        mw, *cs = pystruct.unpack_from(f"<{1 + len(units)}d", raw, i)
                        try:
                            if mw != -1 and not (math.isfinite(mw) and mw >= 0 and mw == int(mw)):
                                raise ValueError(f"pacer: a maximum wait of {mw!r} µs")
                            costs = policy.costs(dict(zip(units, cs)))
                        except ValueError as e:
                            self.counts["refused"] += 1
                            if want_err is None or not want_err.startswith("PACER_ARG"):
                                self.fail(where, f"the client refuses a request the scripts take: {e}")
                            return
                        reqs.append((int(mw), costs))
                built = protocol.reserve_args(common, floor, reqs, short=raw in (b"", b"0"))
            else:
                op, slot_us, slot_ns, seq = rest[0], int(rest[1]), int(rest[2]), int(rest[3])
                costs = [float(c) for c in rest[4:4 + len(units)]]
                actual = [float(c) for c in rest[4 + len(units):]] if op == "settle" else None
                if op not in ("cancel", "settle") or (op == "settle" and len(actual or []) != len(units)):
                    return
                if op == "cancel" and len(rest) != 4 + len(units):
                    return
                built = protocol.adjust_args(common, op, slot_us * 1000 + slot_ns, seq, costs, actual)
        except (ValueError, IndexError):
            return
        self.counts["encoded"] += 1
        if [protocol.to_bytes(a) for a in built] != [protocol.to_bytes(a) for a in args]:
            self.fail(where, f"the client encodes {built!r}, the case sends {args!r}")

    # -- decoding

    def check_decoding(self, where: str, name: str, got: Any, want: list[Any] | None) -> None:
        if name in ("Reserve", "Fair") and isinstance(got, str):
            try:
                rep = protocol.decode_reserve(got)
            except protocol.PacerError as e:
                self.fail(where, f"not decoded: {e}")
                return
            self.counts["decoded"] += 1
            if want is None:
                return  # on the server's clock: the file holds no decoding
            now_us, now_ns = want[0], want[1]
            pairs = want[2:-3]
            bands = want[-1].split()
            if len(rep.grants) != len(pairs) // 2:
                self.fail(where, f"decoded {len(rep.grants)} grants of {want!r}")
                return
            if rep.now_ns != now_us * 1000 + now_ns:
                self.fail(where, f"decoded now {rep.now_ns}, want {now_us} µs {now_ns} ns")
            for j, g in enumerate(rep.grants):
                slot = now_us * 1000 + now_ns + pairs[2 * j]  # docs/protocol.md, Reserve
                if (g.wait_ns, g.seq, g.slot_ns, g.band) != (pairs[2 * j], pairs[2 * j + 1], slot, bands[j]):
                    self.fail(where, f"request {j}: decoded {g}, want wait {pairs[2 * j]} seq {pairs[2 * j + 1]} "
                                     f"slot {slot} band {bands[j]}")
            if (rep.state, rep.stored) != (want[-3], want[-2]):
                self.fail(where, "decoded state or stored limit differ")
        if name == "Heartbeat" and isinstance(got, list):
            hb = protocol.decode_heartbeat(got)
            if (hb is None) != (len(got) == 1):
                self.fail(where, f"decoded {got!r} as {hb!r}")
            elif hb is not None:
                # The reply gives the holes; the client keeps the ranks
                # taken (every rank below n but the holes).
                ranks = [k for k in range(got[4]) if k not in got[9]]
                want_hb = (got[1], got[2], got[3], got[4], got[5], got[7], got[8], ranks, got[10], got[11])
                if (hb.live, hb.held, hb.rank, hb.n, hb.held_ranks, hb.held_n, hb.before, hb.ranks, str(hb.format),
                        hb.held_sizes) != want_hb:
                    self.fail(where, f"decoded {hb!r} of {got!r}")

    # -- the state's grammar

    def check_state(self, where: str, text: str, want: dict[str, Any]) -> None:
        try:
            st = protocol.parse_state(text)
            self.counts["states"] += 1
        except ValueError as e:
            self.fail(where, f"not read: {e}")
            return
        got = {"format": st.format, "t": st.t, "x": st.x, "seq": st.seq, "pause": st.pause, "stored": st.stored}
        exp = {k: want[k] for k in got}
        if got != exp:
            self.fail(where, f"read {got}, want {exp}")
        if st.pause_end_ns != want["t"] * 1000 + math.ceil(want["pause"]):
            self.fail(where, f"pause ends at {st.pause_end_ns}, want t + p")
        recs = [(r.name, r.window, r.z, r.e, r.w, r.u) for r in st.recs]
        wrecs = [(r["name"], r.get("window", False), r.get("z", 0.0), r.get("e", 0.0), r.get("w", 0), r.get("u", 0.0))
                 for r in want["recs"]]
        if recs != wrecs:
            self.fail(where, f"records {recs}, want {wrecs}")


def fill_in(v: Any, fill: dict[str, str]) -> Any:
    """A recorded reply with the placeholders of the server's clock filled in."""
    if isinstance(v, list):
        return [fill_in(x, fill) for x in v]
    if isinstance(v, str):
        for k, x in fill.items():
            v = v.replace(k, x)
    return v


def script_name_from_sha(scripts: protocol.Scripts, sha: str) -> str:
    for name, s in scripts.sha.items():
        if s == sha:
            return name
    return script_name(sha) if sha.startswith("$") else sha


def parse_common(args: list[str]) -> tuple[int | None, int, int, str, str, list[str], str] | None:
    """The test's own reading of "Common arguments" (not the client's):
    ARGV[1] no deadline; ARGV[2] the client clock, the format, the lost
    horizon, then the share (calendar tables, which the case carries,
    left in it); ARGV[3] the policy, and its units. None for what the
    client never sends (a deadline, "f3 ", a malformed head)."""
    if args[0] != "":
        return None
    m = re.fullmatch(r"(?:t([0-9]+):([0-9]+) )?(f[12] )?(![0-9]+:[0-9]+ )?(.+)", args[1], re.S)
    if m is None or m.group(5).startswith("f"):
        return None
    now_us = None if m.group(1) is None else int(m.group(1))
    now_ns = 0 if m.group(2) is None else int(m.group(2))
    fmt = int(m.group(3)[1]) if m.group(3) else 3
    lost = m.group(4)[:-1] if m.group(4) else ""
    share = m.group(5)
    pol = protocol.to_bytes(args[2])
    if pol.startswith(b"L"):
        if len(pol) != 17:
            return None
        return now_us, now_ns, fmt, lost, share, ["permits"], args[2]
    f = args[2].split(" ")
    try:
        units = f[1:1 + int(f[0])]
    except (ValueError, IndexError):
        return None
    return now_us, now_ns, fmt, lost, share, units, args[2]


def build_policy(arg: str, units: list[str]) -> protocol.Policy | None:
    """The client's policy of ARGV[3] (ValueError: it refuses it; None: it
    cannot be built from typed values at all)."""
    pol = protocol.to_bytes(arg)
    if pol.startswith(b"L"):
        rate, burst = pystruct.unpack("<dd", pol[1:])
        return protocol.Limit(rate, burst)  # type: ignore[arg-type]
    f = arg.split(" ")
    try:
        k = int(f[1 + len(units)])
        recs = f[2 + len(units):]
    except (ValueError, IndexError):
        return None
    if k < 1 or len(recs) != 5 * k:
        return None
    bands = []
    for i in range(k):
        name, unit, kind, a, b = recs[5 * i:5 * i + 5]
        if not unit.isdigit() or not 1 <= int(unit) <= len(units) or kind not in ("b", "w"):
            return None
        bands.append(build_band(kind, name, a, b, units[int(unit) - 1]))
    return protocol.Policy(tuple(bands), tuple(units))


def build_band(kind: str, name: str, a: str, b: str, unit: str) -> protocol.Band:
    """The client's band of the arguments' strings (ValueError: it refuses them)."""
    if kind == "b":
        return protocol.Bucket(name, float(a), float(b), unit)  # type: ignore[arg-type]
    length, origin = b.split(":")
    return protocol.Window(name, float(a), int(length), int(origin), unit)


def run_cases(client: Any = None) -> Runner:
    """Runs every recorded test's calls; the Runner holds the failures."""
    scripts = protocol.Scripts()
    r = Runner(scripts, client or support.client())
    for name, entry in sorted(load_cases().items()):
        r.run_test(name, entry)
    return r


# The mutants: deliberately wrong clients.

def _client_clock_slot(now_us: int, now_ns: int, wait_ns: int) -> int:
    return time.time_ns() + wait_ns  # the slot on the client's clock, not the reply's


_real_parse = protocol.parse_state


def _pause_ignored(text: str) -> protocol.State:
    return dataclasses.replace(_real_parse(text), pause=0.0)


MUTANTS: dict[str, Callable[[], Any]] = {
    "a slot computed on the client's clock": lambda: mock.patch.object(protocol, "slot_ns", _client_clock_slot),
    "a pause ignored": lambda: mock.patch.object(protocol, "parse_state", _pause_ignored),
}


class TestConformance(unittest.TestCase):
    def test_cases(self) -> None:
        cases = load_cases()
        self.assertGreaterEqual(len(cases), 13, "the recorded tests")
        self.assertGreaterEqual(sum(len(e["calls"]) for e in cases.values()), 400)
        r = run_cases()
        self.assertEqual(r.failures[:20], [], f"{len(r.failures)} failures")
        print(f"conformance: {r.counts}")
        # Every case the client could send was encoded by it, and checked.
        self.assertGreaterEqual(r.counts["encoded"], 200)
        self.assertGreaterEqual(r.counts["refused"], 40)
        self.assertGreaterEqual(r.counts["decoded"], 150)
        self.assertGreaterEqual(r.counts["states"], 150)

    def test_mutants_fail(self) -> None:
        for what, patch in MUTANTS.items():
            with self.subTest(mutant=what), patch():
                failures = run_cases().failures
                self.assertTrue(failures, f"the mutant ({what}) passes the conformance cases")

    def test_scripts_table(self) -> None:
        """SCRIPT_FILES is docs/protocol.md's Scripts table."""
        text = support.PROTOCOL_DOC.read_text()
        rows = re.findall(r"(?m)^\| `([A-Za-z]+)` \| (`[a-z_]+\.lua`(?: \+ `[a-z_]+\.lua`)*) \|$", text)
        table = {name: tuple(f.strip("`") for f in files.split(" + ")) for name, files in rows}
        self.assertEqual(table, protocol.SCRIPT_FILES)

    def test_state_grammar_refuses(self) -> None:
        for bad in ["", "1", "F3 1700000000000000 7000 5 0 2000000000 2000000000",
                    "1700000000000000 2000 1 0 nan nan", "1700000000000000 2000 1 0 2000000000.5 2000000000",
                    "1700000000000000  2000 1 0 0 0", "1700000000000000 2000 1 0 ~q 1 2",
                    "1 1700000000000000 7000000000 5 0 0 permits 2000000000.000 2000000000.000",
                    b"\x9f" + bytes(10), b"\xa0" + bytes(9), b"\xb0" + bytes(28), b"\xc0" + bytes(32),
                    b"\xd0" + bytes(26), b"\xd0" + bytes(27) + b"permits 1 2", b"\xd0" + bytes(27) + b" ~q 1 2",
                    b"\xe0" + bytes(27), b"\xc0" + bytes(17) + pystruct.pack("<dd", math.nan, 1.0),
                    b"\xd0" + bytes(19) + pystruct.pack("<d", math.inf)]:
            with self.subTest(state=bad), self.assertRaises(ValueError):
                protocol.parse_state(bad)

    def test_state_forms(self) -> None:
        """docs/protocol.md's format 3 examples, each form: read as the page
        says, and each as bytes or as normalize's str."""
        for hexed, want in [
            ("a000401e18240a06881303", (3, 1700000000000000, 5000, 3, 0.0, False, 0.0, 0.0)),
            ("a100401e18240a06881303", (3, 1700000000000000, 5000, 3, 0.0, True, 0.0, 0.0)),
            ("b000401e18240a06b80b000001000000006cca88ffff000000000000",
             (3, 1700000000000000, 3000, 1, 0.0, False, -2e9, 0.0)),
            ("b000401e18240a06881300000400000000ca9a3b000000ca9a3b0000",
             (3, 1700000000000000, 5000, 4, 0.0, False, 1e9, 1e9)),
            ("c000401e18240a06d107000002000000000000000000008873400000000000907340",
             (3, 1700000000000000, 2001, 2, 0.0, False, 312.5, 313.0)),
        ]:
            raw = bytes.fromhex(hexed)
            for text in (raw, protocol.normalize(raw)):
                st = protocol.parse_state(text)  # type: ignore[arg-type]
                self.assertEqual((st.format, st.t, st.x, st.seq, st.pause, st.stored, st.recs[0].z, st.recs[0].e), want,
                                 hexed)
                self.assertEqual([r.name for r in st.recs], ["permits"])




if __name__ == "__main__":
    unittest.main()
