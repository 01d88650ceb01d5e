"""A Python process of integration/mixed's fleet: threads that wait for a
slot on the key, call the provider, settle the tokens used; at the end one
JSON line of its calls (slot, local, tokens). The job is in
$PACER_MIXED_JOB (integration/mixed's job)."""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

import pacer  # noqa: E402

TOKEN_RATE, TOKEN_BURST, TOKEN_EST = 20000, 2000, 80  # integration/mixed's


def main() -> None:
    job = json.loads(os.environ["PACER_MIXED_JOB"])
    r = redis.Redis.from_url(job["RedisURL"], socket_timeout=0.5, socket_connect_timeout=0.5)
    bands = [pacer.Bucket("rps", job["Rate"], 1, unit="requests")]
    if job["Bands"]:
        bands.append(pacer.Bucket("tps", TOKEN_RATE, TOKEN_BURST, unit="tokens"))
    policy = pacer.Policy(tuple(bands))
    calls: list[dict[str, object]] = []
    lock = threading.Lock()
    limiter = pacer.Limiter(r)
    time.sleep(max(0.0, job["Start"] - time.time()))

    errors: list[BaseException] = []

    def run(seed: int) -> None:
        try:
            loop(seed)
        except BaseException as e:  # noqa: BLE001 - reported: the child then fails
            errors.append(e)
            raise

    def loop(seed: int) -> None:
        rng = random.Random(seed)
        while time.time() < job["End"]:
            cost = {"requests": 1, "tokens": TOKEN_EST} if job["Bands"] else {"requests": 1}
            try:
                res = limiter.wait(job["Key"], policy, cost, timeout=max(0.0, job["End"] - time.time()))
            except (pacer.WaitTooLong, pacer.Unavailable):
                continue  # the run's end
            fire = time.time_ns()
            used = rng.randint(20, TOKEN_EST) if job["Bands"] else 1
            req = urllib.request.Request(job["Provider"], data=json.dumps({"tokens": used}).encode(),
                                         headers={"Host": job["Key"]}, method="POST")
            try:
                urllib.request.urlopen(req, timeout=5).read()
            except OSError as e:
                print("provider:", e, file=sys.stderr)
            if job["Bands"]:
                res.settle({"requests": 1, "tokens": used})
            with lock:
                calls.append({"proc": job["Name"], "slot": res.slot_ns, "local": res.local, "tokens": used,
                              "fire": fire})

    threads = [threading.Thread(target=run, args=(job["Seed"] * 100 + i,)) for i in range(job["Threads"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limiter.close()
    print(json.dumps(calls))
    if errors:
        sys.exit(f"fleet child: {len(errors)} callers failed: {errors[0]!r}")


if __name__ == "__main__":
    main()
