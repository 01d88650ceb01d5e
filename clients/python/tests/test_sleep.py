"""Limiter.sleep reads the time once per sleep: a slot that comes nearer
between two readings never makes a negative sleep (found in CI under load:
`time.sleep(r.delay() - _PRECHECK)` raised "sleep length must be
non-negative" to a caller of wait, whose thread died)."""

from __future__ import annotations

import dataclasses
import time
import types
import unittest
from unittest import mock

import support

from pacer import Limit, Limiter, limiter


class SlowClock:
    """time as the limiter module reads it, on a machine so loaded that
    every reading of the clock finds 1 ms gone."""

    def __init__(self) -> None:
        self.now = time.monotonic()
        self.slept: list[float] = []

    def monotonic(self) -> float:
        self.now += 0.001
        return self.now

    def sleep(self, d: float) -> None:
        if d < 0:
            raise ValueError("sleep length must be non-negative")
        self.slept.append(d)
        self.now += d

    def time(self) -> float:
        return time.time()

    def __getattr__(self, name: str) -> object:
        return getattr(time, name)


class SleepTest(unittest.TestCase):
    def test_no_negative_sleep_when_the_clock_moves_between_readings(self) -> None:
        c = support.client()
        lim = Limiter(c, prefix=support.prefix(), heartbeat_interval=3600)
        self.addCleanup(lim.close)
        r = lim.reserve("s", Limit(1, 1))
        clock = SlowClock()
        with mock.patch.object(limiter, "time", clock):
            for left in (0.0045, 0.0041, 0.0049, 0.0025, 0.0005):
                # A slot just beyond the pre-check's margin (2 ms) at one reading
                # of the clock, and within it at the next.
                r = dataclasses.replace(r, deadline=clock.now + left)
                got = lim.sleep(r)
                self.assertEqual(got.slot_ns, r.slot_ns, "on time: the same slot")
        self.assertTrue(all(d >= 0 for d in clock.slept), clock.slept)


if __name__ == "__main__":
    unittest.main()
