"""The conformance cases of lua/conformance_test.go (and
conformance_cases_test.go, and docs/protocol.md's redis blocks), as the Go
tests recorded them in lua/testdata/conformance.json, run through this
client's code: its script loading (EVALSHA, NOSCRIPT), its encoding of
every Reserve and Adjust call (byte for byte), its decoding of the
replies, and its reading of every state. Two deliberately wrong clients
(mutants switched on here, in the test) fail them: one that computes a
slot on its own clock, one that ignores a pause."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import time
import unittest
from typing import Any, Callable
from unittest import mock

import support  # noqa: F401 - sets sys.path

from pacer import protocol

ANY = {"any": True}


def load_cases() -> dict[str, Any]:
    with open(support.CASES) as f:
        return json.load(f)


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
                    self.check_decoding(where, script_name(call["cmd"][1]), got)
        for text, want_state in entry["states"].items():
            self.check_state(f"{name} state {text!r}", text, want_state)

    def send(self, cmd: list[str]) -> tuple[Any, str | None]:
        try:
            if cmd[0] == "EVALSHA":
                n = int(cmd[2])
                return self.scripts.run(self.client, script_name_from_sha(self.scripts, cmd[1]),
                                        cmd[3:3 + n], cmd[3 + n:]), None
            v = protocol.normalize(self.client.execute_command(*cmd))
            return ("OK" if v is True else v), None  # redis-py reads SET's OK as True
        except protocol.PacerError as e:
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - Redis's own errors are replies here
            return None, str(e)

    # -- encoding: the client builds the same arguments from typed values

    def check_encoding(self, where: str, name: str, cmd: list[str], want_err: str | None) -> None:
        n = int(cmd[2])
        args = cmd[3 + n:]
        if name not in ("Reserve", "Adjust") or len(args) < 5:
            return
        typed = parse_common(args)
        if typed is None:
            return  # a deadline, "f2 ", a malformed head: not the client's to send
        now_us, now_ns, fmt, share, units, bands, rest = typed
        try:
            policy = protocol.Policy(tuple(build_band(*b) for b in bands), tuple(units))
        except (ValueError, TypeError) as e:
            # The client refuses only what the scripts refuse.
            self.counts["refused"] += 1
            if want_err is None or not want_err.startswith("PACER_ARG"):
                self.fail(where, f"the client refuses a policy the scripts take: {e}")
            return
        # The case's own ARGV[3] carries its calendar tables: none learned
        # (a PACER_CALENDAR reply of an earlier call) is added here.
        protocol.forget_calendars()
        common = protocol.common_args(share, policy, now_us, now_ns, fmt)
        try:
            if name == "Reserve":
                floor, m, reqs = rest[0], int(rest[1]), []
                p = 2
                for _ in range(m):
                    mw = int(rest[p])
                    raw = rest[p + 1:p + 1 + len(units)]
                    if len(raw) != len(units):
                        return
                    try:
                        costs = policy.costs(dict(zip(units, (float(c) for c in raw))))
                    except ValueError as e:
                        self.counts["refused"] += 1
                        if want_err is None or not want_err.startswith("PACER_ARG"):
                            self.fail(where, f"the client refuses costs the scripts take: {e}")
                        return
                    reqs.append((mw, costs))
                    p += 1 + len(units)
                if p != len(rest):
                    return
                built = protocol.reserve_args(common, floor, reqs)
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
        if built != args:
            self.fail(where, f"the client encodes {built!r}, the case sends {args!r}")

    # -- decoding

    def check_decoding(self, where: str, name: str, got: Any) -> None:
        if name in ("Reserve", "Fair") and isinstance(got, list):
            rep = protocol.decode_reserve(got)
            self.counts["decoded"] += 1
            now_us, now_ns = got[0], got[1]
            pairs = got[2:-3]
            bands = got[-1].split()
            if len(rep.grants) != len(pairs) // 2:
                self.fail(where, f"decoded {len(rep.grants)} grants of {got!r}")
                return
            for j, g in enumerate(rep.grants):
                slot = now_us * 1000 + now_ns + pairs[2 * j]  # docs/protocol.md, Reserve
                if (g.wait_ns, g.seq, g.slot_ns, g.band) != (pairs[2 * j], pairs[2 * j + 1], slot, bands[j]):
                    self.fail(where, f"request {j}: decoded {g}, want wait {pairs[2 * j]} seq {pairs[2 * j + 1]} "
                                     f"slot {slot} band {bands[j]}")
            if (rep.state, rep.stored) != (got[-3], got[-2]):
                self.fail(where, "decoded state or stored limit differ")
        if name == "Heartbeat" and isinstance(got, list):
            hb = protocol.decode_heartbeat(got)
            if (hb is None) != (len(got) == 1):
                self.fail(where, f"decoded {got!r} as {hb!r}")
            elif hb is not None:
                # The reply gives the holes; the client keeps the ranks
                # taken (every rank below n but the holes), and writes
                # format 2 when told "3".
                ranks = [k for k in range(got[4]) if k not in got[9]]
                fmt = {"3": "2"}.get(got[10], got[10])
                want = (got[1], got[2], got[3], got[4], got[5], got[7], got[8], ranks, fmt)
                if (hb.live, hb.held, hb.rank, hb.n, hb.held_ranks, hb.held_n, hb.before, hb.ranks, str(hb.format)) != want:
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


def parse_common(args: list[str]) -> tuple[int | None, int, int, str, list[str], list[tuple[str, ...]], list[str]] | None:
    """The test's own reading of "Common arguments" (not the client's): the
    bands as (kind, name, a, b, unit) strings."""
    try:
        now_us = None if args[0] == "" else int(args[0])
        now_ns = int(args[1])
        head = args[2]
        if head.startswith("d") or head.startswith("f2 "):
            return None
        fmt, share = (1, head[3:]) if head.startswith("f1 ") else (2, head)
        if head.startswith("f") and fmt != 1:
            return None
        units = args[3].split(" ")
        k = int(args[4])
        bands: list[tuple[str, ...]] = []
        for i in range(k):
            name, unit, kind, a, b = args[5 + 5 * i:10 + 5 * i]
            if not 1 <= int(unit) <= len(units) or kind not in ("b", "w"):
                return None
            bands.append((kind, name, a, b, units[int(unit) - 1]))
        return now_us, now_ns, fmt, share, units, bands, args[5 + 5 * k:]
    except (ValueError, IndexError):
        return None


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
        self.assertGreaterEqual(r.counts["encoded"], 120)
        self.assertGreaterEqual(r.counts["refused"], 15)
        self.assertGreaterEqual(r.counts["decoded"], 100)
        self.assertGreaterEqual(r.counts["states"], 40)

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
                    "1 1700000000000000 7000000000 5 0 0 permits 2000000000.000 2000000000.000"]:
            with self.subTest(state=bad), self.assertRaises(ValueError):
                protocol.parse_state(bad)




if __name__ == "__main__":
    unittest.main()
