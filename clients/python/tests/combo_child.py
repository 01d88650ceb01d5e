"""A Python process of integration/combo's fleet (the combination runner):
the Go child's counterpart (integration/combo/child.go, calls.go,
commands.go) for the keys this client supports.

The runner re-runs its own binary as a fleet process, which execs this
script (integration/combo/python.go) with the ChildSpec in
$PACER_COMBO_CHILD. It prints the same notes on stdout (one JSON line
each: ready, switch, pause, settle, err, unavailable, too-long, close,
done), waits for "go <start> <end>" (Unix ns) on stdin, then calls the
Sliding key and the policy key (a bucket, a window and a tokens bucket,
costs settled to what the provider reports) from several threads until
the end, and takes the runner's commands meanwhile: "close" (stop
calling, close the Limiter, exit) and "pause KEY NS" (Limiter.pause).

Each call goes to the provider as a Go child's does: POST /call with the
slot its reservation gave (Reservation.slot_ns: Unix ns on Redis's clock,
or the local fallback's estimate of it, the clock the Go children's slots
are on), and after a 429 the key is paused for the Retry-After and the call
tried again with a fresh reservation. What the client lacks (fair turns,
leases, deadlines, pacehttp) it does not call: the hot, http, adaptive
and fair keys are the Go children's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

import pacer  # noqa: E402

# integration/combo/keys.go's keys and limits (the fleet's code passes
# exactly these).
KEY_SLIDING, KEY_POLICY = "sliding.example", "policy.example"
SLIDING = pacer.Limit(30, 1)  # reserve.Sliding(31, time.Second)
POLICY = pacer.Policy((
    pacer.Bucket("rps", 20, 2, unit="requests"),
    pacer.Window("win", 36, 2_000_000, unit="requests"),
    pacer.Bucket("tokens", 2400, 480, unit="tokens"),
    pacer.Window("daily", 1e9, calendar="day", unit="requests"),
))
MIN_TOKENS, MAX_TOKENS = 40, 200
SLIDING_THREADS = POLICY_THREADS = 4  # child.go's slidingGoroutines, policyGoroutines
MAX_ATTEMPTS = 3
MAX_EARLY_NS = 2_000_000  # reserve.MaxEarly
# calls.go's mix, but for Allow (no such call here: a try with no wait).
MIX = {
    KEY_SLIDING: [("wait", 20), ("reserve", 35), ("try", 35), ("cancel", 10)],
    KEY_POLICY: [("waitp", 15), ("reservep", 40), ("tryp", 35), ("cancelp", 10)],
}
CAN_WAIT = {"wait", "reserve", "cancel", "waitp", "reservep", "cancelp"}


def now_ns() -> int:
    return time.time_ns()


class Out:
    """Notes on stdout, one write a line (a SIGKILL loses none printed)."""

    def __init__(self, child: str) -> None:
        self.child = child
        self.lock = threading.Lock()

    def note(self, **n: object) -> None:
        n["c"] = self.child
        line = (json.dumps({k: v for k, v in n.items() if v not in (None, "", 0, {})}, separators=(",", ":")) + "\n").encode()
        with self.lock:
            os.write(1, line)


class SwitchLog(logging.Handler):
    """The client's warnings of a switch to local pacing and back, as the
    Go child's switchLog notes them."""

    def __init__(self, out: Out) -> None:
        super().__init__(logging.WARNING)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        at = int(record.created * 1e9)
        if msg.startswith("pacer: Redis unavailable"):
            self.out.note(t="switch", at=at, to="local", a={"share": msg.rsplit(" at share ", 1)[-1]})
        elif msg.startswith("pacer: back on Redis"):
            self.out.note(t="switch", at=at, to="redis")


class Child:
    def __init__(self, spec: dict) -> None:
        self.spec = spec
        self.id = spec["ID"]
        self.out = Out(self.id)
        self.stop = threading.Event()
        self.closed = False
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.seq = 0
        self.start = self.end = 0
        host, port = spec["Redis"].rsplit(":", 1)
        # As the README's quick start builds its client.
        self.redis = redis.Redis(host=host, port=int(port), socket_timeout=0.5, socket_connect_timeout=0.5)
        self.limiter = pacer.Limiter(self.redis, prefix=spec["Prefix"])

    # ---------------------------------------------------------------- notes

    def count(self, name: str) -> None:
        with self.lock:
            self.counts[name] = self.counts.get(name, 0) + 1

    def err(self, op: str, key: str, e: BaseException | str) -> None:
        self.count("err")
        self.out.note(t="err", k=key, op=op, at=now_ns(), err=str(e).replace("\n", " ") or repr(e))

    def left(self) -> float:
        """Seconds until the run's end (0 once it has passed, or closed)."""
        if self.stop.is_set():
            return 0.0
        return max(0.0, (self.end - now_ns()) / 1e9)

    def ended(self) -> bool:
        return self.left() <= 0

    # -------------------------------------------------------------- commands

    def commands(self) -> None:
        for raw in sys.stdin:
            f = raw.split()
            if f == ["close"]:
                self.closed = True
                self.stop.set()
            elif len(f) == 3 and f[0] == "pause" and f[2].isdigit() and int(f[2]) > 0:
                threading.Thread(target=self.pause, args=(f[1], int(f[2]), "command", None), daemon=True).start()
            else:
                self.err("command", "", f"unknown command {raw.strip()!r}")

    def pause(self, key: str, d_ns: int, op: str, call_id: str | None) -> None:
        """Limiter.pause of key for d_ns, noted as the Go child notes it."""
        start = now_ns()
        err = ""
        try:
            self.limiter.pause(key, d_ns / 1e9)
        except Exception as e:  # noqa: BLE001 - noted: the verdict judges it
            err = f"{type(e).__name__}: {e}"
        n = dict(t="pause", k=key, at=start, end=now_ns(), d=d_ns, op=op, id=call_id, err=err)
        if op == "":
            n.pop("op")
        self.out.note(**n)
        if err and not isinstance_unavailable(err):
            self.err("pause", key, err)

    # ----------------------------------------------------------------- calls

    def caller(self, key: str, g: int) -> None:
        rng = random.Random(int.from_bytes(hashlib.sha256(f"{self.spec['Seed']}/{self.id}/{g}".encode()).digest()[:8], "big"))
        kinds, weights = zip(*MIX[key])
        while not self.ended():
            kind = rng.choices(kinds, weights)[0]
            est = float(rng.randint(MIN_TOKENS, MAX_TOKENS))
            for attempt in range(MAX_ATTEMPTS):
                if self.ended():
                    break
                try:
                    retry = self.attempt(rng, key, kind, attempt, est)
                except Exception as e:  # noqa: BLE001 - an error to a caller: the verdict's
                    self.err(kind, key, f"{type(e).__name__}: {e}")
                    time.sleep(0.01)
                    break
                if retry <= 0:
                    break
                self.count("429")
                if not self.ended():
                    self.pause(key, retry, "", None)

    def attempt(self, rng: random.Random, key: str, kind: str, attempt: int, est: float) -> int:
        """One attempt; the provider's Retry-After (ns) if it answered 429."""
        with self.lock:
            self.seq += 1
            call_id = f"{self.id}-{self.seq}"
        policy = SLIDING if key == KEY_SLIDING else POLICY
        cost: dict[str, float] = {"permits": 1} if key == KEY_SLIDING else {"requests": 1, "tokens": est}
        self.count(kind)
        grant = now_ns()
        if kind in CAN_WAIT:
            # No maximum wait but the run's end (the Go child's context
            # deadline): a slot after it is refused (WaitTooLong), and
            # waiting for Redis ends there too (WaitTooLong, "(outage)").
            max_wait = self.left()
        else:
            max_wait = rng.randrange(600) / 1000
        try:
            if kind in ("wait", "waitp"):
                r = self.limiter.wait(key, policy, cost, timeout=max_wait)
                first = r.slot_ns
            else:
                r = self.limiter.reserve(key, policy, cost, max_wait=max_wait)
                first = r.slot_ns
                self.check_band(kind, key, r.band, False)
                if kind in ("cancel", "cancelp"):
                    time.sleep(rng.random() * 0.8 * r.delay())
                    self.cancel(key, r)
                    return 0
                r = self.limiter.sleep(r, time.monotonic() + self.left())
        except pacer.WaitTooLong as e:
            return self.too_long(rng, key, kind, e)
        except pacer.Unavailable as e:
            self.count("unavailable")
            if kind in CAN_WAIT and self.left() > 1.0:
                # A caller who can wait must not get an outage as an
                # error (outage.go): its maximum wait was the run's end.
                self.out.note(t="unavailable", k=key, op=kind, at=now_ns(), err=str(e))
            time.sleep(0.05)
            return 0
        fire = now_ns()
        placed = fire + int((r.deadline - time.monotonic()) * 1e9)  # the slot on this host's clock
        call = {
            "id": call_id, "k": key, "c": self.id, "kind": kind, "a": attempt,
            "slot": r.slot_ns, "exact": True, "placed": placed, "lo": r.slot_ns, "hi": r.slot_ns,
            "grant": grant, "first": first, "seq": r.seq, "fire": fire, "local": r.local,
            "cost": cost, "settle": key == KEY_POLICY,
        }
        rep = self.send(call)
        if rep is None:
            return 0
        if rep.get("status") == 429:
            return max(int(rep.get("retry", 0)), 1_000_000)
        if key == KEY_POLICY:
            self.settle(key, call_id, r, float(rep.get("actual", 0)))
        return 0

    def too_long(self, rng: random.Random, key: str, kind: str, e: pacer.WaitTooLong) -> int:
        if kind not in CAN_WAIT:
            self.check_band(kind, key, e.band, True)
            self.count(kind + "-refused")
            time.sleep((5 + rng.randrange(40)) / 1000)
            return 0
        if self.left() >= 5.0:
            # Refused for the run's end, seconds away: right only in a
            # long pause, which the verdict knows (waits.go).
            self.count(kind + "-too-long")
            self.out.note(t="too-long", k=key, op=kind, at=now_ns(), d=int(e.wait * 1e9), err=str(e))
            time.sleep(0.01)
        return 0

    def check_band(self, kind: str, key: str, band: str, refused: bool) -> None:
        """The binding band a grant or refusal names: one of the key's, the
        pause ("~p"), for a refusal an outage that left the process no
        share ("(outage)"), or for a grant none ("~") (Go's checkBand)."""
        policy = SLIDING if key == KEY_SLIDING else POLICY
        names = {b.name for b in policy.bands}
        if not (band in names or band == "~p" or (band == "~" and not refused)
                or (band == pacer.limiter.OUTAGE_BAND and refused)):
            self.err(kind, key, f"binding band {band!r} (refused {refused}) is none of the key's bands {sorted(names)}, the pause or none")
            return
        self.count("band:" + {"~": "none", "~p": "pause"}.get(band, band))

    def send(self, call: dict) -> dict | None:
        req = urllib.request.Request(self.spec["Provider"] + "/call", data=json.dumps(call).encode(),
                                     headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 429:
                return json.loads(e.read())
            self.err("provider", call["k"], f"{e.code}: {e.read()[:200]!r}")
        except (OSError, ValueError) as e:
            self.err("provider", call["k"], e)
        return None

    def settle(self, key: str, call_id: str, r: pacer.Reservation, actual: float) -> None:
        """Settles r to the provider's actual tokens; a settle that cannot
        reach Redis is made again until it works or the run is over (the
        client queues one made while it paces locally)."""
        start = now_ns()
        while True:
            try:
                r.settle({"requests": 1, "tokens": actual})
                self.out.note(t="settle", k=key, id=call_id, at=start, end=now_ns())
                return
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
                if now_ns() > self.end + 2_000_000_000:
                    self.count("unsettled")
                    return
                self.count("settle-retry")
                print(f"combo child: settle: {e!r}", file=sys.stderr)
                time.sleep(0.1)

    def cancel(self, key: str, r: pacer.Reservation) -> None:
        try:
            r.cancel()
            self.count("canceled")
        except Exception as e:  # noqa: BLE001
            self.err("cancel", key, f"{type(e).__name__}: {e}")

    def views(self) -> None:
        """Notes the Limiter's view of the fleet when it changes (as the Go
        child notes its Limiter's "fleet view" debug records), for the
        dump: read from its private fields, as the Go child reads a
        reservation's."""
        last = ""
        while not self.stop.wait(0.05):
            lim = self.limiter
            with lim._lock:
                view = (f"mode={'local' if lim._local else 'redis'} n={lim._n} rank={lim._rank} members={lim._members} "
                        f"held={lim._held} held_n={lim._held_n} held_sizes={lim._held_sizes} remembered={lim._remembered}/{lim._remembered_members} "
                        f"rank_before={lim._rank_before} missing={lim._missing()} ranks={lim._ranks} "
                        f"remembered_ranks={lim._remembered_ranks} before={lim._before} doubt={lim._doubt} "
                        f"local={lim._local_share}")
            if view != last:
                self.out.note(t="move", op="fleet", at=now_ns(), a={"view": view})
                last = view

    # ------------------------------------------------------------------- run

    def run(self) -> int:
        self.out.note(t="ready", pid=os.getpid())
        line = sys.stdin.readline().split()
        if len(line) != 3 or line[0] != "go":
            print(f"combo child: reading the start: {line!r}", file=sys.stderr)
            return 1
        self.start, self.end = int(line[1]), int(line[2])
        threading.Thread(target=self.commands, daemon=True).start()
        threading.Thread(target=self.views, daemon=True).start()
        time.sleep(max(0.0, (self.start - now_ns()) / 1e9))
        threads = [threading.Thread(target=self.caller, args=(KEY_SLIDING, g)) for g in range(SLIDING_THREADS)]
        threads += [threading.Thread(target=self.caller, args=(KEY_POLICY, SLIDING_THREADS + g)) for g in range(POLICY_THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self.lock:
            self.out.note(t="done", n=dict(self.counts))
        closing = now_ns()
        self.limiter.close()
        if self.closed:
            self.out.note(t="close", at=closing, end=now_ns())
        return 0


def isinstance_unavailable(err: str) -> bool:
    return err.startswith("Unavailable:")


def main() -> None:
    spec = json.loads(os.environ["PACER_COMBO_CHILD"])
    out = Out(spec["ID"])
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    logging.getLogger("pacer").addHandler(SwitchLog(out))
    sys.exit(Child(spec).run())


if __name__ == "__main__":
    main()
