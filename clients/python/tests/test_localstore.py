"""The local store held to redis-server: the same script calls on both,
replies and states compared (as internal/luastore's TestDifferential does
for Go's). First the conformance cases' calls of the scripts the fallback
runs, then random sequences of reservations, adjustments, pauses, peeks,
resumes and rewrites on the client's clock, at every kind of share."""

from __future__ import annotations

import random
import unittest
from typing import Any

import support
from test_conformance import load_cases

from pacer import localstore, protocol

FALLBACK_SCRIPTS = {"$RESERVE": "Reserve", "$ADJUST": "Adjust", "$PAUSE": "Pause", "$RESUME": "Resume",
                    "$PEEK": "Peek", "$REWRITE": "Rewrite"}


def outcome(scripts: protocol.Scripts, client: Any, name: str, keys: list[str], args: list[str]) -> Any:
    try:
        return scripts.run(client, name, keys, args)
    except Exception as e:  # noqa: BLE001 - an error reply is an outcome; its code is compared
        return ("error", str(e).split(" ", 1)[0])


# expiry_slack_ms: a key's copy that expires within this may be gone on the
# other side already (a state's TTL is its refill time plus 1 to 2 s).
expiry_slack_ms = 3000


@unittest.skipUnless(localstore.AVAILABLE, "lupa is not installed")
class DifferentialTest(unittest.TestCase):
    def setUp(self) -> None:
        self.scripts = protocol.Scripts()
        self.c = support.client()
        self.store = localstore.LocalStore(self.scripts)

    def both(self, name: str, keys: list[str], args: list[str | bytes], where: str) -> Any:
        got_redis = outcome(self.scripts, self.c, name, keys, args)
        got_local = outcome(self.scripts, self.store, name, keys, args)
        self.assertEqual(got_local, got_redis, f"{where}: {name} {args}")
        for k in keys:
            r = protocol.normalize(self.c.execute_command("GET", k)) if self.c.type(k) == b"string" else None
            loc = protocol.normalize(self.store.execute_command("GET", k))
            if (r is None) != (loc is None) and self.expiring(k):
                # A state lives a second or two past its bucket's refill,
                # on each side's own clock: on a loaded machine one side's
                # copy expired between the two calls (CI saw it).
                continue
            self.assertEqual(loc, r, f"{where}: {k} after {name} {args}")
        return got_redis

    def expiring(self, k: str) -> bool:
        """Whether k's copy that is left, on Redis or in the store, expires
        within expiry_slack_ms."""
        for ttl in (self.c.pttl(k), self.store.execute_command("PTTL", k)):
            if 0 <= ttl <= expiry_slack_ms:
                return True
        return False

    def test_conformance_calls(self) -> None:
        cases = load_cases()
        n = 0
        for test, entry in sorted(cases.items()):
            self.pre = support.prefix()
            for i, call in enumerate(entry["calls"]):
                cmd = call["cmd"]
                if cmd[0] != "EVALSHA" or cmd[1] not in FALLBACK_SCRIPTS:
                    continue
                k = int(cmd[2])
                args = cmd[3 + k:]
                if any("{ms" in a for a in args) or len(args) < 2 or not args[1].startswith("t"):
                    continue  # the server's clock: the two clocks differ by design
                keys = [self.pre + a[len("pacer:"):] for a in cmd[3:3 + k]]
                self.both(FALLBACK_SCRIPTS[cmd[1]], keys, args, f"{test} call {i}")
                n += 1
        self.assertGreater(n, 150)

    def test_random(self) -> None:
        rng = random.Random(44)
        # ARGV[3]: a Limit's "L" and two doubles, or text; and their units.
        policies: list[tuple[str | bytes, list[str]]] = [
            (protocol.Limit(10, 1).arg(), ["permits"]),
            (protocol.Limit(7, 3).arg(), ["permits"]),
            ("1 permits 1 permits 1 b 7 3", ["permits"]),
            ("2 requests tokens 2 rps 1 b 5 2 tps 2 b 1000 3000", ["requests", "tokens"]),
            ("2 requests tokens 3 rps 1 b 2 2 tps 2 b 1000 6000 daily 1 w 3 86400000000:0", ["requests", "tokens"]),
            ("1 permits 2 a 1 b 0.5 2 m 1 w 4.5 2000000:500000", ["permits"]),
        ]
        # ARGV[2] after the clock: the format, a lost key's horizon, the share.
        shares = ["1", "f1 1", "f2 1", "f3 1", "m 3 1 0", "m 4 2 3", "3 0", "4 1 3", "m 2 0 0", "!400000:3 1",
                  "f2 !900000 m 3 1 0"]
        for seq in range(12):
            self.pre = support.prefix()
            now = 1_700_000_000_000_000 + rng.randrange(10**9)
            grants: dict[str, list[tuple[list[str], int, int, list[str]]]] = {}
            for step in range(60):
                key = rng.choice(["a", "b"])
                ks = [f"{self.pre}{{{key}}}", f"{self.pre}{{{key}}}:limit"]
                pol, units = rng.choice(policies)
                now += rng.choice([0, 1, 999, 50_000, 300_000, 2_000_000])
                ns = rng.randrange(1000)
                clock = f"t{now}:{ns} "
                common: list[str | bytes] = ["", clock + rng.choice(shares), pol]
                op = rng.random()
                where = f"sequence {seq} step {step}"
                costs = lambda: [rng.choice(["0", "1", "2", "0.5", "1.25", "100", "2500"]) if u != "permits" and u != "requests"  # noqa: E731
                                 else rng.choice(["1", "1", "2", "0.5"]) for u in units]
                if op < 0.55:
                    m = rng.randrange(1, 4)
                    reqs: list[tuple[int, list[float]]] = []
                    cs = []
                    for _ in range(m):
                        c = costs()
                        cs.append(c)
                        reqs.append((rng.choice([-1, -1, 0, 150000, 5000000]), [float(x) for x in c]))
                    floor = rng.choice(["", "", "", "250000", "100000 daily:19675:1"])
                    if rng.random() < 0.1:
                        reqs, cs = [], []  # the floor alone
                    try:
                        args = protocol.reserve_args(common, floor, reqs)
                    except ValueError:
                        continue
                    got = self.both("Reserve", ks + [ks[0] + ":shadow"], args, where)
                    if isinstance(got, str):
                        rep = protocol.decode_reserve(got)
                        for g, c in zip(rep.grants, cs):
                            if g.seq > 0:
                                grants.setdefault(key, []).append((pol, g.slot_ns, g.seq, c))
                elif op < 0.75 and grants.get(key):
                    gpol, slot, gseq, c = rng.choice(grants[key])
                    gcommon: list[str | bytes] = ["", clock + rng.choice(shares), gpol]
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
                    self.both("Resume", ks, ["", clock + "1", ""], where)
                else:
                    self.both("Rewrite", ks, ["", clock + rng.choice(["f1 1", "f2 1", "1"]), ""], where)


if __name__ == "__main__":
    unittest.main()
