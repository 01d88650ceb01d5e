"""The local store held to redis-server: the same script calls on both,
replies and states compared (as internal/luastore's TestDifferential does
for Go's). First the conformance cases' calls of the scripts the fallback
runs, then random sequences of reservations, adjustments, pauses, peeks,
resumes and rewrites on the client's clock, at every kind of share."""

from __future__ import annotations

import json
import random
import unittest
from typing import Any

import support

from pacer import localstore, protocol

FALLBACK_SCRIPTS = {"$RESERVE": "Reserve", "$ADJUST": "Adjust", "$PAUSE": "Pause", "$RESUME": "Resume",
                    "$PEEK": "Peek", "$REWRITE": "Rewrite"}


def outcome(scripts: protocol.Scripts, client: Any, name: str, keys: list[str], args: list[str]) -> Any:
    try:
        return scripts.run(client, name, keys, args)
    except Exception as e:  # noqa: BLE001 - an error reply is an outcome; its code is compared
        return ("error", str(e).split(" ", 1)[0])


@unittest.skipUnless(localstore.AVAILABLE, "lupa is not installed")
class DifferentialTest(unittest.TestCase):
    def setUp(self) -> None:
        self.scripts = protocol.Scripts()
        self.c = support.client()
        self.store = localstore.LocalStore(self.scripts)

    def both(self, name: str, keys: list[str], args: list[str], where: str) -> Any:
        got_redis = outcome(self.scripts, self.c, name, keys, args)
        got_local = outcome(self.scripts, self.store, name, keys, args)
        self.assertEqual(got_local, got_redis, f"{where}: {name} {args}")
        for k in keys:
            r = protocol.normalize(self.c.execute_command("GET", k)) if self.c.type(k) == b"string" else None
            loc = protocol.normalize(self.store.execute_command("GET", k))
            self.assertEqual(loc, r, f"{where}: {k} after {name} {args}")
        return got_redis

    def test_conformance_calls(self) -> None:
        with open(support.CASES) as f:
            cases = json.load(f)
        n = 0
        for test, entry in sorted(cases.items()):
            self.pre = support.prefix()
            for i, call in enumerate(entry["calls"]):
                cmd = call["cmd"]
                if cmd[0] != "EVALSHA" or cmd[1] not in FALLBACK_SCRIPTS:
                    continue
                k = int(cmd[2])
                args = cmd[3 + k:]
                if any("{ms" in a for a in args) or args[0] == "":
                    continue  # the server's clock: the two clocks differ by design
                keys = [self.pre + a[len("pacer:"):] for a in cmd[3:3 + k]]
                self.both(FALLBACK_SCRIPTS[cmd[1]], keys, args, f"{test} call {i}")
                n += 1
        self.assertGreater(n, 150)

    def test_random(self) -> None:
        rng = random.Random(44)
        policies = [
            ["permits", "1", "permits", "1", "b", "10", "1"],
            ["permits", "1", "permits", "1", "b", "7", "3"],
            ["requests tokens", "2", "rps", "1", "b", "5", "2", "tps", "2", "b", "1000", "3000"],
            ["requests tokens", "3", "rps", "1", "b", "2", "2", "tps", "2", "b", "1000", "6000", "daily", "1", "w", "3",
             "86400000000:0"],
            ["permits", "2", "a", "1", "b", "0.5", "2", "m", "1", "w", "4.5", "2000000:500000"],
        ]
        shares = ["1", "f1 1", "m 3 1 0", "m 4 2 3", "3 0", "4 1 3", "m 2 0 0"]
        for seq in range(12):
            self.pre = support.prefix()
            now = 1_700_000_000_000_000 + rng.randrange(10**9)
            grants: dict[str, list[tuple[list[str], int, int, list[str]]]] = {}
            for step in range(60):
                key = rng.choice(["a", "b"])
                ks = [f"{self.pre}{{{key}}}", f"{self.pre}{{{key}}}:limit"]
                pol = rng.choice(policies)
                units = pol[0].split(" ")
                now += rng.choice([0, 1, 999, 50_000, 300_000, 2_000_000])
                ns = rng.randrange(1000)
                common = [str(now), str(ns), rng.choice(shares)] + pol
                op = rng.random()
                where = f"sequence {seq} step {step}"
                costs = lambda: [rng.choice(["0", "1", "2", "0.5", "1.25", "100", "2500"]) if u != "permits" and u != "requests"  # noqa: E731
                                 else rng.choice(["1", "1", "2", "0.5"]) for u in units]
                if op < 0.55:
                    m = rng.randrange(1, 4)
                    reqs: list[str] = []
                    cs = []
                    for _ in range(m):
                        c = costs()
                        cs.append(c)
                        reqs += [rng.choice(["-1", "-1", "0", "150000", "5000000"])] + c
                    floor = rng.choice(["", "", "", "250000", "!400000:3", "100000 daily:19675:1"])
                    got = self.both("Reserve", ks + [ks[0] + ":shadow"], common + [floor, str(m)] + reqs, where)
                    if isinstance(got, list):
                        rep = protocol.decode_reserve(got)
                        for g, c in zip(rep.grants, cs):
                            if g.seq > 0:
                                grants.setdefault(key, []).append((pol, g.slot_ns, g.seq, c))
                elif op < 0.75 and grants.get(key):
                    gpol, slot, gseq, c = rng.choice(grants[key])
                    gcommon = [str(now), str(ns), rng.choice(shares)] + gpol
                    if rng.random() < 0.5:
                        extra = ["cancel", str(slot // 1000), str(slot % 1000), str(gseq)] + c
                    else:
                        extra = ["settle", str(slot // 1000), str(slot % 1000), str(gseq)] + c + \
                                [rng.choice(["0", "1", "3", "0.25"]) for _ in c]
                    self.both("Adjust", ks + [ks[0] + ":done"], gcommon + extra, where)
                elif op < 0.83:
                    self.both("Pause", ks, common + [str(rng.choice([1, 150_000, 1_000_000]))], where)
                elif op < 0.9:
                    self.both("Peek", ks, common + costs(), where)
                elif op < 0.95:
                    self.both("Resume", ks, [str(now), str(ns), "1", "permits", "0"], where)
                else:
                    self.both("Rewrite", ks, [str(now), str(ns), rng.choice(["f1 1", "1"]), "permits", "0"], where)


if __name__ == "__main__":
    unittest.main()
