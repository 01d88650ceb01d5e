"""The Limiter on a real redis-server: reservations and their slots,
cancel and settle, pauses honoured, bad input, the fleet's shares, stored
limits, the state format, and the local fallback through Redis stopped and
restarted empty. Every assertion is an exact invariant (slots as the
scripts give them), never a timing bound."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time
import unittest
from collections.abc import Iterator
from unittest import mock

import redis

import support

from pacer import Bucket, Limit, Limiter, Policy, Unavailable, WaitTooLong, Window, limiter, localstore, protocol
from pacer.protocol import PacerError

MS = 1_000_000  # ns


def server_now_ns(c: redis.Redis) -> int:
    sec, us = c.execute_command("TIME")
    return int(sec) * 1_000_000_000 + int(us) * 1000


class LimiterTest(unittest.TestCase):
    def setUp(self) -> None:
        self.c = support.client()
        self.prefix = support.prefix()
        self.lims: list[Limiter] = []

    def tearDown(self) -> None:
        for lim in self.lims:
            lim.close()

    def limiter(self, c: redis.Redis | None = None, **kw: object) -> Limiter:
        kw.setdefault("heartbeat_interval", 3600)  # beats only when a test calls _beat: deterministic
        lim = Limiter(c or self.c, prefix=self.prefix, **kw)  # type: ignore[arg-type]
        self.lims.append(lim)
        return lim

    def keys(self) -> list[bytes]:
        return sorted(k for k in self.c.keys(self.prefix + "*") if b"{limiters}" not in k)

    def test_slots_spaced_by_the_scripts(self) -> None:
        lim = self.limiter()
        rs = [lim.reserve("api", Limit(1, 2)) for _ in range(5)]  # slow: a stalled test machine keeps them queued
        self.assertEqual([r.seq for r in rs], [1, 2, 3, 4, 5])
        gaps = [b.slot_ns - a.slot_ns for a, b in zip(rs[2:], rs[3:])]
        self.assertEqual(gaps, [1000 * MS] * 2)
        self.assertEqual([r.band for r in rs[:2]], ["~", "~"])
        self.assertEqual(rs[4].band, "permits")
        with self.assertRaises(WaitTooLong) as e:
            lim.reserve("api", Limit(1, 2), max_wait=0.05)
        self.assertGreater(e.exception.wait, 0.05)
        self.assertEqual(lim.reserve("api", Limit(1, 2)).seq, 6, "a refusal changes nothing")

    def test_lapsed_key_numbered_again(self) -> None:
        """A key that lapsed with its slots passed (here deleted) and was
        reserved on again numbers from 1: the Limiter takes the new numbers,
        and sends no lost key's floor with the next calls (Go's noteSeen:
        a state numbered before the one seen but written after the slots
        granted is taken whole). Before, it kept the old number as a running
        maximum, and each call while its queue lay ahead sent a floor."""
        lim = self.limiter()
        rs = [lim.reserve("k", Limit(1000, 1)) for _ in range(5)]
        self.assertEqual(rs[-1].seq, 5)
        while time.time_ns() <= rs[-1].slot_ns + 100 * MS:
            time.sleep(0.02)  # every slot passed (Redis's clock is this machine's)
        self.c.delete(self.prefix + "{k}")  # lapsed
        again = [lim.reserve("k", Limit(1000, 1)) for _ in range(3)]
        self.assertEqual([r.seq for r in again], [1, 2, 3])
        self.assertEqual(lim._keys["k"].seq, 3, "the new state's numbers")

    def test_lost_state_sleepers_move(self) -> None:
        """Sleepers whose slots Redis granted from a state it has lost since
        (here deleted), and from which another Limiter has reserved since,
        take fresh slots: the new state knows nothing of theirs, and the
        other's slots fall among them (Go's TestLostKeySleepersMove).
        Sleepers whose state Redis kept keep their slots, but for lateness."""
        for lost in (False, True):
            with self.subTest(lost=lost):
                key = f"lost{lost}"
                lim, other = self.limiter(), self.limiter()
                rs = [lim.reserve(key, Limit(10, 1)) for _ in range(5)]  # 100 ms apart
                granted = [r.slot_ns for r in rs]
                if lost:
                    self.c.delete(self.prefix + "{" + key + "}")  # Redis lost the key
                slots = [other.reserve(key, Limit(10, 1)).slot_ns for _ in range(3)]
                done: list[limiter.Reservation | None] = [None] * len(rs)

                def sleep(i: int) -> None:
                    done[i] = lim.sleep(rs[i])

                threads = [threading.Thread(target=sleep, args=(i,)) for i in range(len(rs))]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                final = [d.slot_ns for d in done if d is not None]
                self.assertEqual(len(final), len(rs))
                moved = sum(1 for a, b in zip(granted, final) if a != b)
                slots = sorted(slots + final)
                gaps = [b - a for a, b in zip(slots, slots[1:])]
                self.assertGreaterEqual(min(gaps), 100 * MS - 1000, f"slots too close: {gaps}")
                # One loss, counted once; kept, no epoch, so no sleeper
                # moved for it (one late by more than its lateness, as a
                # thread started late, takes a fresh slot either way).
                self.assertEqual(lim._keys[key].epoch, 1 if lost else 0)
                if lost:
                    self.assertEqual(moved, len(rs))

    def test_adjust_after_loss_seen_gives_nothing(self) -> None:
        """A reservation of a state Redis lost (here deleted), cancelled or
        settled lower after its Limiter has seen the loss, gives nothing
        back, also where adjust.lua cannot tell it from one of the new
        state's: numbered at or below the new state's last, its slot just
        before the new state's last event (the new state's own last
        cancelled). Before, its unit came back less the moments between the
        two states' first slots, and the next slot lay that little after
        the new state's last one, on a bucket of burst 1. A raise is still
        charged (Go's TestCancelAfterLossSeenGivesNothing)."""
        for how, later in (("cancel", 0), ("settle lower", 0), ("settle higher", 1000 * MS)):
            with self.subTest(how=how):
                key = "seen " + how
                lim, other = self.limiter(), self.limiter()
                rs = [lim.reserve(key, Limit(1, 1)) for _ in range(5)]  # 1 s apart
                self.c.delete(self.prefix + "{" + key + "}")  # Redis lost the key
                first = other.reserve(key, Limit(1, 1))
                lim._pause_end(rs[0])  # a sleeper's check: reads the new state, numbered 1
                self.assertTrue(lim._lost_since(rs[4]), "the loss seen")
                last = first
                for i in range(5):
                    last = other.reserve(key, Limit(1, 1))
                    self.assertEqual(last.slot_ns - first.slot_ns, (i + 1) * 1000 * MS)
                self.assertTrue(other.cancel(last), "the new state's last event goes back a second")
                if how == "cancel":
                    lim.cancel(rs[4])
                else:
                    lim.settle(rs[4], 0 if how == "settle lower" else 2)
                nxt = other.reserve(key, Limit(1, 1))
                self.assertEqual(nxt.slot_ns - first.slot_ns, last.slot_ns - first.slot_ns + later)

    def test_two_bands_and_settle(self) -> None:
        lim = self.limiter()
        pol = Policy((Bucket("rps", 1, 1, "requests"), Bucket("tps", 1, 5, "tokens")))
        r1 = lim.reserve("llm", pol, {"requests": 1, "tokens": 4})
        r2 = lim.reserve("llm", pol, {"requests": 1, "tokens": 4})
        self.assertEqual(r2.band, "tps")  # 3 tokens short at 1/s: 3 s, more than rps's 1 s
        self.assertEqual(r2.slot_ns - r1.slot_ns, 3000 * MS)
        self.assertTrue(lim.settle(r2, {"requests": 1, "tokens": 1}))  # 3 tokens back
        r3 = lim.reserve("llm", pol, {"requests": 1, "tokens": 1})
        self.assertEqual(r3.band, "rps")
        self.assertEqual(r3.slot_ns - r2.slot_ns, 1000 * MS)
        self.assertFalse(lim.settle(r2, {"requests": 1, "tokens": 1}), "an adjustment applies once")

    def test_cancel(self) -> None:
        lim = self.limiter()
        rs = [lim.reserve("c", Limit(1, 1)) for _ in range(3)]
        self.assertTrue(lim.cancel(rs[2]))
        self.assertFalse(rs[2].cancel(), "sent twice, applied once")
        r4 = lim.reserve("c", Limit(1, 1))
        self.assertEqual(r4.slot_ns, rs[2].slot_ns, "the last slot came back")

    def check_pause_honoured(self) -> tuple[int, int, int]:
        """Sleeps to a slot 200 ms ahead, into a pause of 500 ms made
        meanwhile: returns the time it returned (Redis's clock), the slot it
        returned at and (at least) the pause's end."""
        lim = self.limiter()
        r = [lim.reserve("p", Limit(10, 1)) for _ in range(3)][-1]  # slot 200 ms ahead
        other = self.limiter(limiter_id="operator")
        ns = other.pause("p", 0.5)
        pause_end = server_now_ns(self.c) + ns - 5 * MS  # at least this
        got = lim.sleep(r)
        return server_now_ns(self.c), got.slot_ns, pause_end

    def test_pause_honoured(self) -> None:
        now, slot, pause_end = self.check_pause_honoured()
        self.assertGreaterEqual(slot, pause_end)
        self.assertGreaterEqual(now, pause_end, "sleep returned inside the pause")

    def test_pause_ignored_mutant_fails(self) -> None:
        real = protocol.parse_state
        ignored = lambda t: dataclasses.replace(real(t), pause=0.0)  # noqa: E731
        # (No fresh slot for waking late either: a loaded machine's would
        # come after the pause.)
        with mock.patch.object(protocol, "parse_state", ignored), mock.patch.object(limiter, "_max_lateness", lambda r: math.inf):
            now, slot, pause_end = self.check_pause_honoured()
        self.assertLess(slot, pause_end, "the mutant that ignores pauses would pass test_pause_honoured")

    def test_own_pause_after_the_check_honoured(self) -> None:
        """A pause this Limiter makes after its sleeper's last check (another
        caller's 429), covering the slot, is honoured: the sleeper takes a
        fresh slot after it rather than fire into it (Go's
        TestSleepOwnPauseAfterCheck; the combination runner's seed 21). The
        pause is made inside the check, just after its read."""
        lim = self.limiter()
        lim.reserve("ownafter", Limit(20, 1))
        r = lim.reserve("ownafter", Limit(20, 1))  # 50 ms away: one check, no polls
        read = lim._pause_end
        ends: list[int] = []

        def then_pause(res: limiter.Reservation) -> int | None:
            got = read(res)
            if not ends:
                ends.append(server_now_ns(self.c) + lim.pause("ownafter", 0.5) - 5 * MS)
            return got

        with mock.patch.object(lim, "_pause_end", then_pause):
            got = lim.sleep(r)
        self.assertTrue(ends, "no pause check")
        self.assertNotEqual(got.seq, r.seq, "the sleeper kept its slot inside its own pause")
        self.assertGreaterEqual(got.slot_ns, ends[0])
        self.assertGreaterEqual(server_now_ns(self.c), ends[0], "sleep returned inside its own pause")

    def test_placed_late_moves(self) -> None:
        """A slot whose reply arrived late (placed_late: later than the
        clock estimate says Redis granted it) is late by that much when its
        sleeper wakes, and takes a fresh slot as one that woke that late
        does, rather than fire with the callers on time (Go's
        TestPlacedLateMoves). The lateness allowed is a minute here: a
        loaded machine's own never moves a sleeper."""
        lim = self.limiter()
        with mock.patch.object(limiter, "_max_lateness", lambda r: 60.0):
            for placed, moves in ((0.0, False), (59.0, False), (61.0, True)):
                r = lim.reserve("late", Limit(10, 1))
                r.placed_late = max(r.placed_late, placed)
                got = lim.sleep(r)
                self.assertEqual(got.seq != r.seq, moves, f"placed {placed} s late: seq {r.seq} -> {got.seq}")

    def test_late_again_moves_again(self) -> None:
        """A sleeper late for its fresh slot too takes another, up to
        MAX_LATE_MOVES moves in all, and then uses the last however late
        (Go's TestContractRedis/SleepLateAgain). Before, it moved once and
        fired late on the fresh slot, together with callers on time: the
        combination runner's provider saw this client's calls 760 to 990
        ms after their fresh slots, over the limit on arrival. A lateness
        of 1 ns makes every wake late."""
        lim = self.limiter()
        with mock.patch.object(limiter, "_max_lateness", lambda r: 1e-9):
            r = lim.reserve("lateagain", Limit(1000, 100))
            got = lim.sleep(r)
        self.assertEqual(got.seq - r.seq, limiter.MAX_LATE_MOVES, f"moves: seq {r.seq} -> {got.seq}")

    def test_pause_check_leads_by_a_round_trip(self) -> None:
        """A sleeper reads the key for a pause _PRECHECK plus the shortest
        round trip of its calls lately before its slot, so that on a Redis far away
        the answer is back before the slot (Go's TestFarRedisChecksAhead).
        Before, it read _PRECHECK (2 ms) before the slot whatever the round
        trip, and on a Redis farther than that and the lateness allowed the
        answer came after the slot: every sleeper moved for lateness. A
        round trip of 300 ms is made to seem so here; the read must come
        well before the slot (half of it: a loaded machine wakes late)."""
        lim = self.limiter()
        lim.reserve("far", Limit(1, 1))  # takes the burst: the next slot is 1 s away
        r = lim.reserve("far", Limit(1, 1))
        with lim._lock:
            lim._low = limiter._LowRTT()
            lim._low.note(300_000_000, time.time_ns())
        ahead: list[float] = []
        read = lim._pause_end

        def spy(res: limiter.Reservation) -> int | None:
            ahead.append(res.delay())
            return read(res)

        with mock.patch.object(lim, "_pause_end", spy):
            got = lim.sleep(r)
        self.assertEqual(got.seq, r.seq, "no move")
        self.assertTrue(ahead, "no pause check")
        self.assertGreater(ahead[-1], 0.15, f"the last check {ahead[-1] * 1000:.1f} ms before the slot")

    def test_low_rtt_windows(self) -> None:
        """How far away Redis is (_LowRTT) is the shortest round trip of
        the calls in the current window and the one before it (Go's
        TestClockSyncLowRTT): one slow call (a stall) does not lengthen it,
        a Redis that moved farther is followed within two windows, and
        none is 0."""
        ms, w, t0 = 1_000_000, limiter._LOW_WINDOW_NS, 1_800_000_000 * 10**9
        low = limiter._LowRTT()
        self.assertEqual(low.value_ns(), 0, "no call yet")
        low.note(5 * ms, t0)
        self.assertEqual(low.value_ns(), 5 * ms)
        low.note(3000 * ms, t0 + 100 * ms)  # a call across a stall
        self.assertEqual(low.value_ns(), 5 * ms, "a stall does not lengthen it")
        low.note(4 * ms, t0 + 200 * ms)
        self.assertEqual(low.value_ns(), 4 * ms)
        low.note(9 * ms, t0 + w + 1 * ms)  # a second window
        self.assertEqual(low.value_ns(), 4 * ms, "the window before still counts")
        low.note(8 * ms, t0 + 2 * w + 2 * ms)  # a third: the first is forgotten
        self.assertEqual(low.value_ns(), 8 * ms, "Redis moved farther")
        low.note(20 * ms, t0 + 5 * w)  # after two windows without a call
        self.assertEqual(low.value_ns(), 20 * ms, "the old windows are forgotten")

    def test_pause_check_lead_follows_a_farther_redis(self) -> None:
        """The check's lead follows a Redis that moved farther (a failover
        to a far replica) within two windows of _LowRTT: the replies'
        round trips feed it (_clock_sample). Before, it was the shortest
        round trip the process had ever seen, so after such a move every
        sleeper's check answered after its slot, for the rest of the
        process's life, and each sleeper moved for lateness. Go's
        TestClockSyncLowRTT holds the same rule."""
        lim = self.limiter()
        lim.reserve("farther", Limit(10, 1))  # a reply from the Redis close by
        near = lim._check_lead()
        self.assertLess(near, limiter._PRECHECK + 0.2, "a local Redis")
        far, now = 300_000_000, time.time_ns()

        def reply(recv: int) -> None:  # a reply from a Redis far away
            lim._clock_sample(recv - far // 2 + lim._offset_ns, recv - far, recv)

        reply(now + 1_000)
        self.assertEqual(lim._check_lead(), near, "one slow reply (a stall) changes nothing")
        reply(now + 2 * limiter._LOW_WINDOW_NS)
        reply(now + 2 * limiter._LOW_WINDOW_NS + 1_000)
        self.assertAlmostEqual(lim._check_lead(), limiter._PRECHECK + far / 1e9, places=9)

    def test_late_move_gives_the_window_unit_back(self) -> None:
        """A sleeper that woke too late for its slot gives the slot's window
        units back before it takes a fresh one (Go's
        TestContractRedis/SleepLateWindow): it never fired on it. Before,
        the fresh slot was charged a second unit, on a daily window of 1
        the next day's; here the reply is placed a minute late."""
        lim = self.limiter()
        day = 86_400_000_000
        origin = int(time.time() * 1e6) % day  # today's window begins now
        daily = Policy((Window("daily", 1, day, origin, "requests"), Bucket("rps", 100, 1, "requests")))
        r = lim.reserve("late", daily)
        r.placed_late = 60.0
        got = lim.sleep(r, time.monotonic() + 60)
        self.assertNotEqual(got.seq, r.seq, "a fresh slot")
        self.assertLess(got.delay(), 3600, "today's unit, given back and taken again, not tomorrow's")
        with self.assertRaises(limiter.WaitTooLong, msg="the window holds the moved call once"):
            lim.reserve("late", daily, max_wait=3600)

    def test_clock_estimate_follows_a_clock_that_moved(self) -> None:
        """A reply whose round trip is too long for the estimate is taken
        all the same when the estimate places its server instant outside
        the call's span (Go's clockSync.place): a failover to a host 5 ms
        away whose clock is 50 ms behind. Before, the estimate kept the old
        host's clock for good (its round trip, 2 ms or more over the
        shortest seen, was never let in), 50 ms ahead of the new one; a
        reply of as long a round trip that the estimate fits changes
        nothing."""
        lim = self.limiter()
        lim.reserve("est", Limit(10, 1))  # an estimate from the Redis close by
        old = lim._offset_ns
        rtt, now = 5_000_000, time.time_ns()
        moved = old - 50_000_000  # the new host's clock, 50 ms behind
        server = now - rtt // 2 + moved  # its script ran mid-way
        lim._clock_sample(server, now - rtt, now)
        self.assertEqual(lim._offset_ns, server - now, "the estimate follows the new clock")
        self.assertLessEqual(lim._offset_ns, moved, "never ahead of it")
        later = now + 1_000_000_000
        lim._clock_sample(later - 4_000_000 + moved, later - 9_000_000, later)  # in bounds, 9 ms
        self.assertEqual(lim._offset_ns, server - now, "a slower reply the estimate fits is not taken")

    def test_max_lateness_ends_with_the_window(self) -> None:
        """How late a sleeper may wake and still use its slot is half the
        spacing of the fastest bucket its cost charges, at least 1 ms, and
        never past the end of a window its cost charges (Go's
        TestMaxLatenessEndsWithTheWindow, the same cases). Before, a
        window's end did not bound it: a sleeper woken after that end
        fired in the next window, on top of the units the fleet was
        granted there; and a policy of windows alone moved its sleepers 1
        ms late, where Go's fire within their window."""
        origin = 1_800_000_000 * 10**9
        sec = Window("sec", 10, 1_000_000, 0, "requests")  # Unix seconds: origin is on one
        rps = Bucket("rps", 10, 1, "requests")
        tok = Window("tok", 10, 1_000_000, 0, "tokens")
        ms = 1_000_000
        day_end = 1_796_428_800 * 10**9  # 2026-12-05 00:00 UTC
        for name, policy, costs, at, want in (
            ("a bucket alone: half its spacing", Policy((rps,)), [1.0], origin + 100 * ms, 0.05),
            ("a fast bucket: at least 1 ms", Policy((Bucket("rps", 100_000, 1, "requests"),)), [1.0], origin, 0.001),
            ("a window that ends first", Policy((rps, sec)), [1.0], origin + 999_700_000, 0.0003),
            ("a window that ends later", Policy((rps, sec)), [1.0], origin + 100 * ms, 0.05),
            ("a window alone", Policy((sec,)), [1.0], origin + 250 * ms, 0.75),
            ("a window the cost does not charge", Policy((rps, tok)), [1.0, 0.0], origin + 999_700_000, 0.05),
            ("a calendar day", Policy((Window("daily", 100, unit="requests", calendar="day"),)), [1.0], day_end - 500 * ms, 0.5),
        ):
            r = limiter.Reservation("k", policy, costs, at, 1, "~", False, 0.0, None)  # type: ignore[arg-type]
            self.assertAlmostEqual(limiter._max_lateness(r), want, places=9, msg=name)

    def test_placed_late_measured(self) -> None:
        """placed_late is how much later than the clock estimate a reply
        arrived, less 1 ms: 0 for one on time."""
        lim = self.limiter()
        lim.reserve("est", Limit(10, 1))  # an estimate of Redis's clock
        now = time.time_ns()
        server = now + lim._offset_ns
        self.assertEqual(lim._placed_late(server, now), 0.0)
        self.assertAlmostEqual(lim._placed_late(server, now + 80_000_000), 0.079, places=6)

    def test_clock_estimate_never_ahead(self) -> None:
        """The estimate of Redis's clock is never ahead of it, as Go's
        (clockSync): a sample's server instant is taken for the latest local
        time it can have been, its reply's arrival. Before, it was taken
        for the round trip's midpoint, up to half of it ahead: after a
        sample of a few ms (a CPU hog beside the process), every local slot
        fired 2 to 3 ms before its slot (combination runner, seed 2)."""
        lim = self.limiter()
        lim._best_rtt = 3_000_000
        recv = time.time_ns()
        # Redis read its clock (the host's) as the request arrived, late:
        # 4 ms after it was sent, just before the reply came back.
        lim._clock_sample(recv, recv - 4_000_000, recv)
        self.assertEqual(lim._offset_rtt, 4_000_000, "the sample was taken")
        self.assertLessEqual(lim._offset_ns, 0, "the estimate runs ahead of Redis's clock")
        # One whose reply came back late (Redis read its clock as the
        # request was sent) leaves the estimate behind, by its round trip.
        lim._clock_sample(recv - 4_000_000, recv - 4_000_000, recv)
        self.assertEqual(lim._offset_ns, -4_000_000)

    def test_resume_moves_a_sleeper_earlier(self) -> None:
        """A sleeper granted while the key was paused uses its slot d
        earlier when a resume moved it (the state's "~s q:r d",
        lua/resume.lua): Redis grants the times it left to others, so one
        that kept its old slot would fire together with them (combination
        runner, seed 5: 15 calls in 550 ms on a 20/s burst 2 band after an
        operator's resume, two of them Python sleepers at their old slots).
        No fresh slot for waking late: beside a CPU hog the sleeper woke
        over half a slot late and moved (a CI run, 2026-12-04)."""
        lim = self.limiter()
        k = self.prefix + "{k}"
        lim.pause("k", 1.5)
        r = lim.reserve("k", Limit(10, 1))  # after the pause
        old = r.slot_ns
        v = lim.scripts.run(self.c, "Resume", [k, k + ":limit"], protocol.common_args("1", None))
        d = int(v[3])  # type: ignore[index]
        self.assertGreater(d, 0, "the resume moved nothing")
        with mock.patch.object(limiter, "_max_lateness", lambda r: math.inf):
            got = lim.sleep(r)
        self.assertEqual(got.slot_ns, old - d, "the sleeper kept the slot the resume moved")
        later = lim.reserve("k", Limit(10, 1))
        self.assertGreaterEqual(later.slot_ns - got.slot_ns, 100 * MS - 1000, "two slots closer than the rate")

    def test_bad_input_changes_nothing(self) -> None:
        lim = self.limiter()
        bad_policies = [
            lambda: Limit(0, 1), lambda: Limit(-1, 1), lambda: Limit(math.nan, 1), lambda: Limit(math.inf, 1),
            lambda: Limit(10, 0), lambda: Limit(10, 1.5), lambda: Limit(10, math.inf), lambda: Limit(10, True),
            lambda: Window("w", 0.5, 1_000_000), lambda: Window("w", math.nan, 1_000_000),
            lambda: Window("w", 3, 0), lambda: Bucket("~x", 1, 1), lambda: Bucket("a b", 1, 1), lambda: Policy(()),
            lambda: Policy((Bucket("a", 1, 1), Bucket("a", 2, 1))),
        ]
        for make in bad_policies:
            with self.subTest(policy=make), self.assertRaises(ValueError):
                make()
        ok = Limit(10, 3)
        two = Policy((Bucket("rps", 10, 1, "requests"), Bucket("tps", 1000, 500, "tokens")))
        calls = [
            lambda: lim.reserve("", ok), lambda: lim.reserve("limiters", ok),
            lambda: lim.reserve("k", ok, cost=-1), lambda: lim.reserve("k", ok, cost=math.nan),
            lambda: lim.reserve("k", ok, cost=math.inf), lambda: lim.reserve("k", ok, cost=4),  # above the burst
            lambda: lim.reserve("k", two, cost=1), lambda: lim.reserve("k", two, cost={"bogus": 1}),
            lambda: lim.reserve("k", ok, max_wait=-1), lambda: lim.reserve("k", ok, max_wait=math.nan),
            lambda: lim.pause("k", 0), lambda: lim.pause("k", -1), lambda: lim.pause("k", math.nan),
            lambda: lim.pause("k", math.inf), lambda: lim.wait("", ok),
        ]
        for call in calls:
            with self.subTest(call=call), self.assertRaises(ValueError):
                call()
        with self.assertRaises(TypeError):
            lim.reserve("k", "10/s")  # type: ignore[arg-type]
        self.assertEqual(self.keys(), [], "bad input wrote to Redis")
        # A key of another type: refused by the scripts, left as it is.
        k = protocol.redis_key(self.prefix, "h")
        self.c.hset(k, "a", "b")
        for call in (lambda: lim.reserve("h", ok), lambda: lim.pause("h", 1)):
            with self.assertRaises(PacerError) as e:
                call()
            self.assertEqual(e.exception.code, "PACER_WRONGTYPE")
        self.assertEqual(self.c.type(k), b"hash")
        self.assertEqual(self.c.hgetall(k), {b"a": b"b"})

    def test_fleet_shares(self) -> None:
        a = self.limiter(limiter_id="a")
        b = self.limiter(limiter_id="b")
        a._beat()
        self.assertEqual((a._n, b._n), (2, 2))
        self.assertEqual(a._share(), "1")
        # b paces locally: a leaves it its share, at its next heartbeat.
        b._go_local("test")
        b._beat()
        a._beat()
        self.assertEqual(a._held, [b._rank])
        self.assertEqual(a._share(), f"2 {b._rank}")
        rs = [a.reserve("s", Limit(1, 1)) for _ in range(4)]
        self.assertEqual([y.slot_ns - x.slot_ns for x, y in zip(rs, rs[1:])], [2000 * MS] * 3,
                         "half the rate on Redis while the other half is held")
        # b joined right after a (the heartbeats' "before" is 1): a may
        # pace locally on a fleet without b, so b has no local share yet
        # (docs/protocol.md, Heartbeat). a's local share is tested below.
        self.assertIsNone(b._local_share)

    def test_no_share_on_redis_waits(self) -> None:
        """A call the group on Redis can never take at its share while a
        member is held (a window of 2 a day, 1 of it the held member's, and
        a cost of 2: Reserve's -2) waits for a share within its maximum, as
        Go's (noShareError): a caller who can wait never gets an outage's
        error. Before, it raised Refused at once."""
        a = self.limiter(limiter_id="a")
        b = self.limiter(limiter_id="b")
        a._beat()
        b._go_local("test")
        b._beat()
        a._beat()
        self.assertEqual(a._share(), f"2 {b._rank}")
        daily = Policy((Window("daily", 2, 86_400_000_000, 0, "requests"),))
        with self.assertRaises(limiter.WaitTooLong) as e:
            a.reserve("w", daily, 2, max_wait=0.3)
        self.assertEqual(e.exception.band, limiter.OUTAGE_BAND, "it waited for a share, within its maximum")

    def test_fleet_shares_in_a_fleet_switched_to_3(self) -> None:
        """Switched to format 3, the members keep the heartbeat's indexes
        (docs/protocol.md, Heartbeat) and learn the fleet from them as
        before: a member pacing locally is held; one that leaves frees its
        rank as a hole, the next newcomer's."""
        self.c.set(self.prefix + "{limiters}:format", "3")
        a = self.limiter(limiter_id="a")
        b = self.limiter(limiter_id="b")
        c = self.limiter(limiter_id="c")
        a._beat()
        self.assertEqual((a._n, a._rank, b._rank, c._rank), (3, 0, 1, 2))
        self.assertEqual(self.c.zcard(self.prefix + "{limiters}:x:w"), 3)
        b._go_local("test")
        b._beat()
        a._beat()
        self.assertEqual((a._held, a._share()), ([1], "3 1"))
        b.close()
        a._beat()
        self.assertEqual((a._n, a._ranks, a._held), (3, [0, 2], []))
        d = self.limiter(limiter_id="d")
        self.assertEqual(d._rank, 1, "the newcomer takes the hole")
        a._beat()
        self.assertEqual((a._n, a._ranks), (3, [0, 1, 2]))

    def test_stored_limit(self) -> None:
        lim = self.limiter()
        k = protocol.redis_key(self.prefix, "st")
        lim.scripts.run(self.c, "Admin", [k, k + ":limit", k + ":shadow", k + ":history", k + ":weights"],
                        ["set", "enforce 1 permits permits b 0.5 1", "test", "ops said 1 per 2 s", "50", ""])
        rs = [lim.reserve("st", Limit(1, 1)) for _ in range(3)]
        self.assertEqual([y.slot_ns - x.slot_ns for x, y in zip(rs, rs[1:])], [2000 * MS] * 2)

    def test_policies_reported(self) -> None:
        lim = self.limiter()
        lim.reserve("rep", Limit(10, 2))
        pol = Policy((Bucket("rps", 10, 1, "requests"), Window("daily", 3, 86_400_000_000, 0, "requests")))
        lim.reserve("rep2", pol, {"requests": 1})
        lim._beat()
        got = {k.decode(): v.decode().split(" ", 1)[1] for k, v in self.c.hgetall(self.prefix + "{limiters}:policies").items()}
        self.assertEqual(got, {"rep": "1 permits permits b 10 2",
                               "rep2": "2 rps requests b 10 1 daily requests w 3 86400000000:0"})

    def test_format_follows_the_fleet(self) -> None:
        """The state format written is the fleet's setting (docs/protocol.md,
        Versions): 2 when none is set, then 3, 1 and 2 as the operator sets
        them; each heartbeat records what the member writes, and that it
        reads format 3 (P{limiters}:reads), so that pacer format 3 counts
        it as one that does."""
        lim = self.limiter()
        k = protocol.redis_key(self.prefix, "f")
        lim._beat()
        for setting, want in [(None, 2), ("3", 3), ("1", 1), ("2", 2)]:
            if setting is not None:
                self.c.set(self.prefix + "{limiters}:format", setting)
                lim._beat()
            lim.reserve("f", Limit(10, 1))
            self.assertEqual(protocol.parse_state(self.c.get(k)).format, want, f"the fleet's setting {setting}")
            self.assertEqual(self.c.hget(self.prefix + "{limiters}:writes", lim.id), str(want).encode())
            self.assertEqual(self.c.hget(self.prefix + "{limiters}:reads", lim.id), b"3")
        # Every format is read: a key in format 3, read and written back in 2.
        self.c.set(self.prefix + "{limiters}:format", "3")
        lim._beat()
        r3 = lim.reserve("f", Limit(10, 1))
        self.assertEqual(protocol.parse_state(self.c.get(k)).format, 3)
        self.c.delete(self.prefix + "{limiters}:format")
        lim._beat()
        r2 = lim.reserve("f", Limit(10, 1))
        self.assertEqual(protocol.parse_state(self.c.get(k)).format, 2)
        self.assertEqual(r2.seq, r3.seq + 1)
        self.assertGreaterEqual(r2.slot_ns - r3.slot_ns, 100 * MS - 1000)


@unittest.skipUnless(localstore.AVAILABLE, "lupa is not installed: the local fallback waits for Redis")
class FallbackTest(unittest.TestCase):
    """Redis stopped and restarted empty, on a server of the test's own."""

    def setUp(self) -> None:
        self.srv = support.Server()
        self.addCleanup(self.srv.close)
        self.c = support.client(self.srv.url, socket_timeout=0.5, socket_connect_timeout=0.5)
        self.lims: list[Limiter] = []

    def tearDown(self) -> None:
        for lim in self.lims:
            lim.close()

    def limiter(self, name: str) -> Limiter:
        lim = Limiter(self.c, prefix="pacer:", limiter_id=name, heartbeat_interval=3600)
        self.lims.append(lim)
        return lim

    @contextlib.contextmanager
    def redis_full(self) -> Iterator[None]:
        """Redis at its maxmemory (noeviction) within the block: it refuses
        the scripts' writes with OOM, an outage that closes no connection."""
        self.c.config_set("maxmemory-policy", "noeviction")
        self.c.config_set("maxmemory", "1")
        try:
            yield
        finally:
            self.c.config_set("maxmemory", "0")

    def test_outage_restart_empty(self) -> None:
        a, b = self.limiter("a"), self.limiter("b")
        a._beat()
        lim = Limit(1, 1)
        before = [a.reserve("k", lim) for _ in range(5)]  # slots up to 4 s ahead
        self.srv.stop()
        local = [a.reserve("k", lim) for _ in range(4)]
        self.assertTrue(a.is_local and all(r.local for r in local))
        self.assertTrue(a._local_share and a._local_share.startswith(f"m 2 {a._rank} "), a._local_share)
        self.assertGreater(local[0].slot_ns, before[-1].slot_ns, "a local slot before Redis's last grant")
        self.assertEqual([y.slot_ns - x.slot_ns for x, y in zip(local, local[1:])], [2000 * MS] * 3,
                         "locally at its share: half the rate")
        self.srv.start()  # empty
        a._beat()  # back: hands the local grants back, as Reserve's floor
        self.assertFalse(a.is_local)
        self.assertEqual(a._share(), f"2 {b._rank}", "b, not back yet, keeps its share")
        r = a.reserve("k", lim)
        self.assertFalse(r.local)
        self.assertGreater(r.slot_ns, local[-1].slot_ns, "Redis granted again what the store had granted")

    def test_timed_out_reservation_charged_once(self) -> None:
        """A reservation whose reply comes after the client's socket
        timeout, from a Redis that is slow, not gone, ran there. Sent again
        once the ping answered, it was charged twice: on a daily window of 1
        its caller got tomorrow's slot; and on a Redis steadily slower than
        the timeout it went again for ever. It now waits for its own reply
        while the ping decides, as Go's Limiter (TestTimedOutCallChargedOnce)."""
        proxy = support.Proxy(self.srv.port)
        self.addCleanup(proxy.close)
        c = support.client(proxy.url, socket_timeout=0.2, socket_connect_timeout=0.5)
        self.addCleanup(c.close)
        lim = Limiter(c, prefix="pacer:", limiter_id="a", heartbeat_interval=3600)
        self.lims.append(lim)
        day = 86_400_000_000
        now_us = int(time.time() * 1e6)
        origin = (now_us - 3600_000_000) % day  # today's window began an hour ago
        daily = Policy((Window("daily", 1, day, origin, "requests"),))
        lim.reserve("warm", daily)  # the script loaded, a connection open
        proxy.latency = 0.5
        got: list[limiter.Reservation] = []
        th = threading.Thread(target=lambda: got.append(lim.reserve("q", daily)), daemon=True)
        th.start()
        th.join(10)  # before, every try timed out and went again, for ever
        self.assertEqual(len(got), 1, "the reservation did not return within 10 s")
        r = got[0]
        self.assertFalse(r.local, "slow, not gone")
        self.assertLess(r.delay(), 3600, "today's unit, not tomorrow's (a day away)")
        self.assertEqual(proxy.sent(protocol.redis_key("pacer:", "q").encode()), 1, "the reservation went to Redis once")
        proxy.latency = 0.0
        nxt = lim.reserve("q", daily)
        self.assertEqual(nxt.slot_ns // 1000, now_us - 3600_000_000 + day, "tomorrow's unit is left: one was taken today")

    def test_handback_floor_covers_the_clock_estimate(self) -> None:
        """The handback's floor is the last local slot, sent relative to the
        estimate of Redis's clock: with the estimate ahead of Redis's clock,
        the local callers fired early by that much, and the first slot on
        Redis came less than its spacing after the last of them. The floor
        leaves the estimate's error, half the round trip that set it
        (combination runner, seed 77: the first slot on Redis 32.6 ms
        after the last local one, at 30/s)."""
        a = self.limiter("a")
        a._beat()
        lim = Limit(10, 1)
        a.reserve("k", lim)
        with a._lock:
            # The estimate 4 ms further ahead of Redis's clock than the
            # sample that set it allows, as if its reply had taken 8 ms
            # longer (the midpoint is off by half the round trip at most).
            # Before, the round trip was set to 10 ms: the sample's own
            # error came on top of the 4 ms, and on a loaded machine (a
            # round trip of 2 ms or more) the floor fell short of it (a CI
            # run beside a CPU hog: 99.09 ms, want 100).
            a._offset_ns += 4_000_000
            a._offset_rtt += 8_000_000
        self.srv.stop()
        local = [a.reserve("k", lim) for _ in range(3)]
        self.assertTrue(all(r.local for r in local))
        self.srv.start()
        a._beat()  # back: the handback
        self.assertFalse(a.is_local)
        r = a.reserve("k", lim)
        self.assertFalse(r.local)
        self.assertGreaterEqual(r.slot_ns - local[-1].slot_ns, 100 * MS,
                                "the first slot on Redis within the spacing of the last local one")

    def test_handback_of_a_local_slot_passed(self) -> None:
        """A local grant whose slot has passed still floors Redis at the
        handback (Go's handback.matters: the bucket may not have refilled
        since): its next slot comes a spacing after the last local one.
        Before, the handback sent no floor when the last local slot lay
        before now, and Redis (restarted empty) granted a slot at once
        (combination runner, seed 77: 32.1 ms after the last local slot
        at 30/s)."""
        a = self.limiter("a")
        a._beat()
        lim = Limit(10, 1)
        self.srv.stop()
        local = a.reserve("k", lim)
        self.assertTrue(local.local)
        time.sleep(max(0.0, local.delay()) + 0.01)  # its slot has passed
        self.srv.start()  # empty
        a._beat()  # back: the handback
        self.assertFalse(a.is_local)
        r = a.reserve("k", lim)
        self.assertFalse(r.local)
        self.assertGreaterEqual(r.slot_ns - local.slot_ns, 100 * MS,
                                "the first slot on Redis within the spacing of the last local one")

    def test_stalled_probes_take_no_local_slot(self) -> None:
        """A Limiter pacing locally whose heartbeats (its probes) fell
        behind their schedule (its process was stopped) probes before it
        takes a local slot: the fleet may be back on Redis, and the members
        back keep its share only for a while (Go's probesStalled; the
        combination runner's seed 78, a process stopped 3.5 s while it
        paced locally, took local slots for 0.9 s after it resumed beside
        another member on Redis at the whole rate)."""
        a = self.limiter("a")
        a._beat()
        lim = Limit(10, 1)
        self.srv.stop()
        self.assertTrue(a.reserve("k", lim).local)
        self.srv.start()
        with a._lock:
            a._probe_due = time.monotonic() - 3 * a.interval  # far behind: the process was stopped
        r = a.reserve("k", lim)
        self.assertFalse(r.local, "a local slot while the probes were stalled")
        self.assertFalse(a.is_local)

    def test_confirm_budget_as_go(self) -> None:
        """The ping after a call that timed out waits eight of the client's
        socket timeouts, at least 2 s, before Redis counts as gone: Go's
        outage.ConfirmBudget of CallTimeout. It waited four, so a Redis
        slow by 4 to 8 timeouts was an outage to Python and not to Go. The
        heartbeat's budget holds it after two timeouts of its own."""
        for timeout, want in [(0.0, 2.0), (0.1, 2.0), (0.25, 2.0), (0.5, 4.0), (1.0, 8.0)]:
            self.assertEqual(limiter._confirm_budget(timeout), want, f"socket timeout {timeout}")
        a = self.limiter("a")  # socket_timeout 0.5
        self.assertEqual(a._probe_budget(), 2 * 0.5 + 4.0)

    def test_stall_lasts_until_a_probe_answers(self) -> None:
        """Once a stall is seen, a heartbeat begun since does not end it,
        only its answer: a caller that came while the first probe after the
        stall was under way took a local slot (Go's probesStalled,
        TestStalledProbesTakeNoLocalSlot, which failed so in CI). Without a
        stall seen, a probe just begun is no stall."""
        a = self.limiter("a")
        a._beat()
        self.srv.stop()
        self.assertTrue(a.reserve("k", Limit(10, 1)).local)
        deadline = time.monotonic() + 10
        while a._probing and time.monotonic() < deadline:
            time.sleep(0.01)  # the tell of the switch, under way on the heartbeat thread
        with a._lock:
            self.assertFalse(a._probing, "a heartbeat under way for 10 s")
            a._probe_due = time.monotonic() - 3 * a.interval  # far behind: the process was stopped
        self.assertTrue(a._probes_stalled())
        with a._lock:
            a._probing = time.monotonic()  # the first probe since, under way
        self.assertTrue(a._probes_stalled(), "the stall ended by a probe that has not answered")
        a._beat()  # answers: Redis is down
        self.assertTrue(a.is_local)
        self.assertFalse(a._probes_stalled(), "still stalled after a probe answered")
        with a._lock:
            a._probe_due = time.monotonic()
            a._probing = time.monotonic()  # on time, just begun
        self.assertFalse(a._probes_stalled(), "stalled with a probe just begun on time")

    def test_local_floor_covers_the_last_event(self) -> None:
        """The local store starts no earlier than the latest slot the state
        Redis showed records (a bucket's last event), as Go's horizon: a
        slot granted far ahead out of the queue's order (another member's
        fair turn) lies beyond the queue's end. Before, the floor was the
        queue's end and this Limiter's own grants: its first local slot fell
        10 ms from such a slot (combination runner seed 5: 2 permits where
        1.31 fit, a Go process's fair slot granted 4.6 s ahead)."""
        a = self.limiter("a")
        lim = Limit(1, 1)
        a.reserve("k", lim)
        st = a._keys["k"]
        parsed = protocol.parse_state(st.state)
        rec = next(r for r in parsed.recs if not r.window and not r.name.startswith("~"))
        ahead = rec.e + 10_000 * MS  # another member's slot, 10 s ahead of the queue's end
        self.assertEqual(parsed.format, 2, "the fleet's default: format 2, a Limit's state \"t x s p z e\"")
        f = st.state.split(" ")
        f[-1] = f"{ahead:.3f}"  # the record's last event, e
        st.state = " ".join(f)
        self.assertEqual(protocol.parse_state(st.state).recs[0].e, ahead, st.state)
        self.srv.stop()
        r = a.reserve("k", lim)
        self.assertTrue(r.local)
        self.assertGreaterEqual(r.slot_ns, parsed.t * 1000 + math.ceil(ahead),
                                "a local slot before the latest slot the state records")

    def test_restart_between_calls(self) -> None:
        """Redis restarted empty between two calls: the slots it granted
        are not granted again (Reserve's lost horizon, "!<h2_us>:<seq>")."""
        a = self.limiter("a")
        before = [a.reserve("k", Limit(1, 1)) for _ in range(5)]  # up to 4 s ahead
        self.srv.stop()
        self.srv.start()
        r = a.reserve("k", Limit(1, 1))
        self.assertFalse(r.local)
        self.assertGreaterEqual(r.slot_ns - before[-1].slot_ns, 1000 * MS, "a slot Redis granted before it restarted, again")

    def test_cancel_while_redis_hangs(self) -> None:
        """A cancel of Redis's reservation made while Redis does not answer
        is made on Redis when it answers again."""
        a = self.limiter("a")
        rs = [a.reserve("k", Limit(0.2, 1)) for _ in range(3)]  # 0, 5 s, 10 s: ahead of the ping a timeout makes
        self.srv.freeze()
        try:
            self.assertTrue(a.cancel(rs[2]))  # times out: kept for Redis
            self.assertTrue(a.is_local)
        finally:
            self.srv.thaw()
        a._beat()  # back: the cancel goes to Redis
        self.assertFalse(a.is_local)
        # adjust.lua knows it by its number and slot (docs/protocol.md: Adjust).
        us, ns = divmod(rs[2].slot_ns, 1000)
        self.assertEqual(self.c.get("pacer:{k}:done"), f"{rs[2].seq}@{us}{f'.{ns}' if ns else ''}".encode())
        r = a.reserve("k", Limit(0.2, 1))
        self.assertEqual(r.slot_ns, rs[2].slot_ns, "the cancelled slot came back")

    def test_handback_of_windows_pauses_and_stored_limits(self) -> None:
        """Locally: the stored limit Redis showed, at the share; back on a
        Redis restarted empty, the window units and the pause the store
        granted are handed back."""
        a = self.limiter("a")
        k = "pacer:{w}"
        a.scripts.run(self.c, "Admin", [k, k + ":limit", k + ":shadow", k + ":history", k + ":weights"],
                      ["set", "enforce 1 rps requests b 0.5 1", "test", "", "50", ""])
        pol = Policy((Bucket("rps", 1, 1, "requests"), Window("day", 1000, 86_400_000_000, 0, "requests")))
        a.reserve("w", pol, {"requests": 1})
        self.srv.stop()
        local = [a.reserve("w", pol, {"requests": 1}) for _ in range(3)]
        self.assertTrue(all(r.local for r in local))
        self.assertEqual([y.slot_ns - x.slot_ns for x, y in zip(local, local[1:])], [2000 * MS] * 2,
                         "the stored 0.5/s, alone (n = 1)")
        a.pause("w", 3.0)
        raw = a._store.execute_command("GET", k)
        pause_end = protocol.parse_state(raw).pause_end_ns  # the store's
        self.srv.start()  # empty
        a._beat()
        self.assertFalse(a.is_local)
        st = protocol.parse_state(self.c.get(k))
        day = [r for r in st.recs if r.name == "day"]
        self.assertEqual([(r.w, r.u) for r in day], [(local[0].slot_ns // 86_400_000_000_000, 3.0)],
                         "the 3 units granted locally, handed back")
        self.assertGreaterEqual(st.pause_end_ns, pause_end - 1000, "the local pause, handed back (to the µs)")
        r = a.reserve("w", pol, {"requests": 1})
        self.assertGreaterEqual(r.slot_ns, st.pause_end_ns)

    def test_handback_of_a_pause_on_a_key_never_reserved(self) -> None:
        """A pause made locally on a key this process never reserved on
        (a provider's 429 for a key it only pauses) is handed back to a
        Redis restarted empty, as Go's is (combination runner, seed 26: a
        Python process paused fair.example while Redis restarted empty, and
        a Go process back on Redis did not honour it)."""
        a = self.limiter("a")
        a._beat()
        self.srv.stop()
        a.reserve("other", Limit(10, 1))  # local now
        self.assertTrue(a.is_local)
        a.pause("p", 3.0)
        k = "pacer:{p}"
        raw = a._store.execute_command("GET", k)
        pause_end = protocol.parse_state(raw).pause_end_ns
        self.srv.start()  # empty
        a._beat()
        self.assertFalse(a.is_local)
        got = self.c.get(k)
        self.assertIsNotNone(got, "the local pause never reached Redis")
        st = protocol.parse_state(got)
        self.assertGreaterEqual(st.pause_end_ns, pause_end - 1000, "the local pause, handed back (to the µs)")

    def test_out_of_memory_is_an_outage(self) -> None:
        """A Redis at its maxmemory (noeviction) refuses the scripts' writes
        with OOM: an outage, as for Go's Limiter (reserve/call.go's
        unavailableCodes), not an error to the caller (combination runner,
        seed 2: every reservation of a Python process failed with
        ResponseError OOM for 3.7 s)."""
        a = self.limiter("a")
        a._beat()
        lim = Limit(10, 1)
        a.reserve("k", lim)
        with self.redis_full():
            r = a.reserve("k", lim)
            self.assertTrue(r.local, "a reservation on a full Redis is made locally")
            self.assertTrue(a.is_local)
            self.assertGreater(a.pause("k", 0.05), 0, "a pause on a full Redis is made locally")
            a._beat()  # fails with OOM too: still local
            self.assertTrue(a.is_local)
        a._beat()
        self.assertFalse(a.is_local, "back on Redis once it takes writes")
        self.assertFalse(a.reserve("k", lim).local)

    def test_local_closes_the_window_at_switch(self) -> None:
        """A member that starts pacing locally in the middle of a window
        takes none of it: the state Redis last showed it does not hold what
        the others took of that window since, up to all of it (combination
        runner, Cluster seed 14: 7 in a window of 6). Its local share
        starts with the next window. The units that close it are Redis's:
        the handback does not send them, and the fleet keeps what is left
        of the window (Go's TestLocalClosesWindowAtSwitch)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        self.assertEqual(a._members, 2)
        n, length = 4, 3600_000_000  # µs: 4 an hour; the current window began a minute ago
        origin = (server_now_ns(self.c) // 1000 - 60_000_000) % length
        pol = Policy((Window("win", n, length, origin, "requests"),))

        def window(ns: int) -> int:
            return (ns // 1000 - origin) // length - (server_now_ns(self.c) // 1000 - origin) // length

        def on_redis(lim: Limiter, key: str) -> int:
            r = lim.reserve(key, pol, {"requests": 1})
            self.assertFalse(r.local)
            return window(r.slot_ns)

        # "full": a saw 1 of 4 taken; b took the other 3 (a's share is 2).
        self.assertEqual([on_redis(a, "full")] + [on_redis(b, "full") for _ in range(3)], [0, 0, 0, 0])
        # "rest": a saw 1 of 4 taken, and nobody took more.
        self.assertEqual(on_redis(a, "rest"), 0)
        with self.redis_full():
            for key in ("full", "rest"):
                r = a.reserve(key, pol, {"requests": 1})
                self.assertTrue(r.local)
                self.assertEqual(window(r.slot_ns), 1, f"{key}: a's first local slot, want the next window")
                a.cancel(r)
        a._beat()
        self.assertFalse(a.is_local)
        self.assertEqual([on_redis(b, "rest") for _ in range(3)], [0, 0, 0], "the 3 left of \"rest\"'s window")
        self.assertEqual(on_redis(a, "rest"), 1, "a fifth call in the first window")
        self.assertEqual(on_redis(b, "full"), 1, "a fifth call in \"full\"'s first window")

    def test_own_pause_honoured_while_redis_is_down(self) -> None:
        """A sleeper whose check of the key just before its slot cannot
        reach Redis still honours the pause its own Limiter made
        (combination runner, seed 2: a Python process paused a key on
        Redis after a 429, Redis failed 0.3 s later, and a call of the same
        process fired 0.3 s into that pause)."""
        a = self.limiter("a")
        a._beat()
        lim = Limit(2, 1)
        a.reserve("k", lim)
        r = a.reserve("k", lim)  # 0.5 s ahead
        end = a._server_now() + a.pause("k", 3.0)
        self.srv.stop()  # the check fails at once: the sleeper is on time
        got = a.sleep(r)
        self.assertGreaterEqual(got.slot_ns, end - MS, "a slot inside the Limiter's own pause")

    def test_local_reservation_honours_redis_pause_once_back(self) -> None:
        """A slot the local fallback granted, slept on after the Limiter is
        back on Redis, honours a pause made on Redis meanwhile (combination
        runner, seed 2: a Python process's local slot fired 90 ms into an
        operator's pause made 0.7 s after it was back on Redis)."""
        a, b = self.limiter("a"), self.limiter("b")
        a._beat()
        lim = Limit(2, 1)
        self.srv.stop()
        rs = [a.reserve("k", lim) for _ in range(3)]
        self.assertTrue(all(r.local for r in rs))
        self.srv.start()  # empty
        a._beat()
        b._beat()
        self.assertFalse(a.is_local)
        end = b._server_now() + b.pause("k", 3.0)  # another member's (or the operator's) pause, on Redis
        got = a.sleep(rs[-1])
        self.assertGreaterEqual(got.slot_ns, end - MS, "a local slot inside a pause made on Redis")

    def test_second_outage_keeps_the_old_share(self) -> None:
        """Back on a Redis restarted empty while members of the fleet it
        knew are not back yet, a Limiter that loses Redis again paces
        locally on its old share, as they do (docs/protocol.md: "and
        locally its old share"), not on the smaller fleet Redis lists
        (combination runner, seed 8: a Python process paced locally at
        "m 2 1" beside a Go process at "m 3 0", their slots together every
        0.2 s)."""
        a, b, c = self.limiter("a"), self.limiter("b"), self.limiter("c")
        for lim in (a, b, c, a):
            lim._beat()
        self.assertEqual(a._n, 3)
        rank = a._rank
        self.srv.stop()
        self.assertTrue(a.reserve("k", Limit(30, 1)).local)
        self.assertTrue(a._local_share and a._local_share.startswith(f"m 3 {rank} "), a._local_share)
        self.srv.start()  # empty
        a._beat()
        other = b if b._rank != rank else c
        other._beat()  # one of the others is back; the third is not
        a._beat()
        self.assertFalse(a.is_local)
        self.assertEqual(a._members, 2)
        # The fleet had just grown when a lost Redis: its calls on Redis
        # wait while the third is missing (test_back_across_two_sizes_waits).
        self.assertIsNone(a._share(grant=True))
        self.srv.stop()
        a._go_local("test: Redis stopped")  # as its heartbeat thread finds
        self.assertTrue(a.reserve("k", Limit(30, 1)).local)
        self.assertTrue(a._local_share and a._local_share.startswith(f"m 3 {rank} "),
                        f"{a._local_share}: the third member may pace locally on the old fleet still")

    def test_exited_member_forgotten_by_its_presence_connection(self) -> None:
        """A member that exits without close() (killed) is forgotten once
        it is a suspect and its presence connection is gone, as a Go
        process is; one silent but connected (stalled) stays (combination
        runner, seed 10: a Python process SIGKILLed kept its share held for
        hold_ms, a minute, and the fleet on Redis used a quarter less of
        every key for the rest of the run)."""
        a, b, c = self.limiter("a"), self.limiter("b"), self.limiter("c")
        for lim in (a, b, c, a, b, c, a):
            lim._beat()  # the second carries the presence connection's id
        self.assertEqual(a._members, 3)
        info = self.c.hget("pacer:{limiters}:info", "b").decode().split()
        self.assertNotEqual(info[2], "0", f"b's heartbeat names no presence connection: {info}")
        names = [x.get("name") for x in self.c.client_list()]
        self.assertIn("pacer-b", names)
        b._absent()  # killed: Redis closes its connections; it beats no more
        time.sleep(1.3)  # silent longer than suspect_ms (1.1 s): a suspect
        a._beat()
        self.assertIsNone(self.c.zscore("pacer:{limiters}", "b"), "b, gone, is still a member")
        self.assertIsNotNone(self.c.zscore("pacer:{limiters}", "c"), "c, silent but connected, was forgotten")
        self.assertEqual(a._members, 2)

    def test_local_member_names_its_connection_and_checks_nobody(self) -> None:
        """A member pacing locally whose heartbeats reach Redis names its
        presence connection in them (if it exits, the fleet finds it gone,
        not held for hold_ms), but checks no suspect: pacing locally, its
        client may reach another node, or none. As Go's Limiter
        (TestExitWhilePacingLocally, TestLocalMemberChecksNobody). a has no
        heartbeat thread: going local wakes it, and its heartbeat, not
        patched, would bring a back to Redis before the test's own (a loaded
        machine runs it at any time: CI failed so)."""
        a = Limiter(self.c, prefix="pacer:", limiter_id="a", heartbeat=False, heartbeat_interval=3600)
        self.lims.append(a)
        a._beat()  # the fleet's first member, as the others' first heartbeat makes it
        b = self.limiter("b")
        for lim in (a, b, a, b, a):
            lim._beat()  # the second carries the presence connection's id
        b._absent()  # killed: Redis closes its connections; it beats no more
        time.sleep(1.3)  # silent longer than suspect_ms (1.1 s): a suspect
        a._go_local("test: a key of a failed")
        with mock.patch.object(a, "_come_back"):  # it stays local, as when a key still fails
            a._beat_once_timed()  # one heartbeat, "local"
        self.assertTrue(a.is_local)
        info = self.c.hget("pacer:{limiters}:info", "a").decode().split()
        self.assertEqual(info[0], "local", f"a's heartbeat: {info}")
        self.assertNotEqual(info[2], "0", f"a's heartbeat pacing locally names no presence connection: {info}")
        self.assertIsNotNone(self.c.zscore("pacer:{limiters}", "b"), "a, pacing locally, checked a suspect: b forgotten")
        self.assertIsNone(self.c.hget("pacer:{limiters}:checked", "b"), "a, pacing locally, checked a suspect")
        a._beat()  # back on Redis: it checks (b is forgotten, or held a check more: a lost Redis)
        gone = self.c.zscore("pacer:{limiters}", "b") is None
        self.assertTrue(gone or self.c.hget("pacer:{limiters}:checked", "b") is not None, "a, back on Redis, did not check b")

    def test_back_first_holds_the_reset(self) -> None:
        """The whole fleet loses Redis, and as the network heals it resets
        the presence connection of b, which still paces locally. a, back
        first, finds b gone at the first check anybody could make: b is
        held one check more, not forgotten at once, as by Go's Limiter
        (TestBackFirstHoldsTheReset; integration's TestFaultTimeout)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a, b, a):
            lim._beat()  # the second carries the presence connection's id
        self.assertEqual(a._members, 2)
        b._absent()  # the network reset it; b beats no more
        a._go_local("test: the network went silent")
        time.sleep(1.3)  # b silent longer than suspect_ms (1.1 s): a suspect
        a._beat()  # back on Redis, it checks the suspects
        self.assertFalse(a.is_local)
        self.assertIsNotNone(self.c.zscore("pacer:{limiters}", "b"), "b was forgotten at the first check after a's outage")
        mark = self.c.hget("pacer:{limiters}:checked", "b")
        self.assertTrue(mark is not None and int(mark) < 0, f"b is not held a check more (mark {mark!r})")

    def test_refusals_hold_no_exit(self) -> None:
        """An outage of refusals (Redis out of memory) closes no connection:
        a member whose presence connection is gone after it has exited, and
        is forgotten at the first check, as by Go's Limiter
        (TestRefusalsHoldNoExit)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a, b, a):
            lim._beat()  # the second carries the presence connection's id
        self.assertEqual(a._members, 2)
        b._absent()  # killed: Redis closes its connections; it beats no more
        with self.redis_full():
            self.assertTrue(a.reserve("k", Limit(10, 1)).local)
        time.sleep(1.3)  # b silent longer than suspect_ms (1.1 s): a suspect
        a._beat()  # back on Redis, it checks the suspects
        self.assertFalse(a.is_local)
        self.assertIsNone(self.c.zscore("pacer:{limiters}", "b"), "b, gone after an outage of refusals, was held")

    def test_paused_redis_is_no_outage(self) -> None:
        """A call that times out is no evidence that Redis is gone: the
        Limiter pings it with a longer timeout and paces locally only if
        that fails too, as Go's does (Options.CallTimeout). A CLIENT PAUSE
        shorter than that is waited out on Redis (combination runner, seed
        10: a Python process paced locally through a 2.1 s CLIENT PAUSE the
        Go processes waited out on Redis, and its local slots met theirs)."""
        a = self.limiter("a")
        a._beat()
        self.c.execute_command("CLIENT", "PAUSE", "1200", "ALL")
        r = a.reserve("k", Limit(10, 1))
        self.assertFalse(r.local, "a reservation made locally while Redis was paused")
        self.assertFalse(a.is_local)
        self.assertEqual(r.seq, 1)


    def test_first_heartbeat_timed_out_on_a_paused_redis(self) -> None:
        """A Limiter started while Redis is paused (its first heartbeat
        times out, the ping waits the pause out) heartbeats again before it
        takes anything, as Go's New does (firstHeartbeat). Before, it took
        the whole rate on Redis until its next heartbeat, a second later
        (combination runner, seed 37: a Python process restarted during a
        3 s freeze took all of a key's 30/s beside two Go processes pacing
        locally on their shares)."""
        a = self.limiter("a")
        a._beat()
        self.c.execute_command("CLIENT", "PAUSE", "1200", "ALL")
        b = self.limiter("b")
        self.assertFalse(b.is_local, "a paused Redis is no outage")
        self.assertTrue(b._learned, "b did not learn the fleet at its start")
        self.assertEqual(b._n, 2, "b's view of the fleet")
        # a, silent since b's outage began, is held in b's view on the
        # whole key (it was alone): that leaves b nothing
        # (test_held_on_whole_takes_nothing) until a is heard from again.
        a._beat()
        b._beat()
        r = b.reserve("k", Limit(10, 1), max_wait=30)
        self.assertFalse(r.local)
    def tell_local(self, lim: Limiter, n: int) -> None:
        """A heartbeat of lim's saying it paces locally on a fleet of n, as
        one whose calls fail while its heartbeats reach Redis (a Cluster's
        shard down) sends."""
        lim.scripts.run(self.c, "Heartbeat", protocol.fleet_keys("pacer:"),
                        protocol.heartbeat_args(lim.id, "local", int(time.time() * 1000) + 1, n, lim._rank))

    def test_born_while_redis_is_down_learns_the_fleet_after_join(self) -> None:
        """A Limiter started while Redis was unavailable has never learned
        the fleet. When it first reaches a Redis restarted empty, the
        members still pacing locally are not listed yet (they probe within
        probe_interval, +25%): it stays off Redis, and takes no share, until
        a heartbeat at least join (1.5 probe_interval) after its first one
        that succeeded, as Go's Limiter (reserve/fleet.go, born). A heartbeat
        that fails meanwhile starts the wait again (combination runner, seed
        1: two Python processes started during an out-of-memory Redis, one
        back on Redis at once, the other's local slots handed back: slots of
        both at the same instants)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        self.srv.stop()
        self.assertTrue(a.reserve("k", Limit(30, 1)).local)  # a paces locally on "m 2 ..."
        c = Limiter(self.c, prefix="pacer:", limiter_id="c", heartbeat_interval=3600, probe_interval=3600)
        self.lims.append(c)
        self.assertTrue(c.is_local)
        self.assertTrue(c._born)
        with self.assertRaises(WaitTooLong) as e:
            c.reserve("k", Limit(30, 1), max_wait=0)  # no share: it never learned the fleet
        self.assertEqual(e.exception.band, limiter.OUTAGE_BAND, "a caller who can wait never gets an outage's error")
        self.srv.start()  # empty
        c._beat()  # its first heartbeat that succeeds: it learns nothing yet
        self.assertTrue(c.is_local, "back on Redis at its first heartbeat, beside members still pacing locally")
        self.assertFalse(c._learned)
        with self.assertRaises(WaitTooLong) as e:
            c.reserve("k", Limit(30, 1), max_wait=0)
        self.assertEqual(e.exception.band, "(outage)")
        self.srv.stop()
        c._beat()  # fails: the wait starts again
        self.srv.start()
        c._beat()
        self.assertTrue(c.is_local)
        c._join_until -= 3600 * 1.5  # join has passed since that heartbeat
        self.srv.stop()
        c._beat()  # fails: the wait starts again from the next one that succeeds
        self.srv.start()
        c._beat()
        self.assertTrue(c.is_local, "a heartbeat that failed did not start the wait again")
        a._beat()  # a is back, at its old rank
        self.assertFalse(a.is_local)
        c._join_until -= 3600 * 1.5
        c._beat()  # at least join after its first that succeeded: it learns the fleet
        self.assertFalse(c.is_local)
        self.assertTrue(c._learned)
        self.assertEqual(c._members, 2)
        self.assertFalse(c.reserve("k", Limit(30, 1)).local)

    def test_newcomer_losing_redis_waits_as_one_born(self) -> None:
        """A member that joined after members that pace locally without it
        (its rank is not below their fleet's size) has no local share; when
        it loses Redis it waits, once back, as one started while Redis was
        down: until its heartbeats could have met theirs (Go's leaving,
        combination runner seed 71)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        self.tell_local(a, 2)  # a paces locally on the fleet of 2
        c = self.limiter("c")
        self.assertEqual((c._n, c._rank, c._held_n), (3, 2, 2))
        self.assertIsNone(c._own_share(), "a newcomer has no local share")
        self.srv.stop()
        with self.assertRaises(WaitTooLong) as e:
            c.reserve("k", Limit(30, 1), max_wait=0)
        self.assertEqual(e.exception.band, "(outage)")
        self.assertTrue(c.is_local)
        self.assertTrue(c._born)
        self.srv.start()
        c._beat()
        self.assertTrue(c.is_local, "a newcomer back on Redis at once, beside members that may pace locally")

    def test_held_on_two_sizes_waits(self) -> None:
        """Members held on lattices of two sizes (one paces on 2: it lost
        Redis before it heard of the third; one on 3): a member on Redis
        takes nothing until they are back, and has no local share on 3
        beside them (Go's TestHeldOnTwoSizes; combination runner, seed 15:
        its rank 2 of 3 met rank 1 of 2 every 6/rate)."""
        x, y, z = self.limiter("x"), self.limiter("y"), self.limiter("z")
        for lim in (x, y, z, x, y):
            lim._beat()
        self.assertEqual([x._rank, y._rank, z._rank], [0, 1, 2])
        self.tell_local(x, 3)
        self.tell_local(y, 2)
        z._beat()
        self.assertEqual((z._n, z._held, z._held_n, z._held_sizes), (3, [0, 1], 3, [2, 3]))
        self.assertIsNone(z._share(grant=True), "a share on Redis beside members held on 2 and 3")
        self.assertEqual(z._share(), "3 0 1")
        self.assertIsNone(z._own_share(), "rank 2 of 3 has a local share beside members held on 2 and 3")
        with self.assertRaises(WaitTooLong) as e:
            z.reserve("k", Limit(30, 1), max_wait=0.2)
        self.assertEqual(e.exception.band, "(outage)")
        self.tell_local(y, 3)  # one size again
        z._beat()
        self.assertEqual((z._held_sizes, z._share(grant=True)), ([3], "3 0 1"))

    def test_held_on_whole_takes_nothing(self) -> None:
        """A member alone reports its local share's size as 1 (the whole of
        each key, not 0: none); held on it, it leaves the others nothing: a
        member that joined since takes nothing on Redis and has no local
        share (Go's TestHeldOnWholeTakesNothing; the combination runner's
        Cluster seed 31: a member alone at its last heartbeat paced locally
        on the whole key while two that joined since took two thirds of it
        on Redis)."""
        x = self.limiter("x")
        x._beat()
        rec = self.c.hget(protocol.fleet_keys("pacer:")[1], "x")
        assert rec is not None
        self.assertEqual(rec.split()[3], b"1", "the record of a member alone")
        y = self.limiter("y")
        y._beat()
        self.tell_local(x, x._share_n())  # x paces locally on the whole
        y._beat()
        self.assertEqual((y._n, y._held, y._held_n), (2, [0], 1))
        self.assertIsNone(y._share(grant=True), "a share on Redis beside a member held on the whole key")
        self.assertIsNone(y._own_share(), "a local share beside a member held on the whole key")
        self.tell_local(x, 2)  # x heard of y: its rank's half
        y._beat()
        self.assertEqual((y._held_n, y._share(grant=True)), (2, "2 0"))

    def test_newcomer_hides_no_missing_member(self) -> None:
        """Back first on a Redis restarted empty, a member finds as many
        members listed as it knew, one of them a newcomer, while a member
        it knew is not back: that one is missing still, and keeps its share
        (Go's TestNewcomerHidesMissing; combination runner, seed 13)."""
        x, y = self.limiter("x"), self.limiter("y")
        for lim in (x, y, x):
            lim._beat()
        self.assertEqual((x._n, x._rank, y._rank), (2, 0, 1))
        self.srv.stop()
        self.assertTrue(x.reserve("k", Limit(30, 1)).local)
        self.srv.start()  # empty
        x._beat()  # back, asking to keep rank 1
        z = self.limiter("z")
        z._beat()
        x._beat()
        self.assertEqual((x._members, z._rank), (2, 2))
        self.assertTrue(x._missing(), "rank 1, not back, hidden by the newcomer")
        self.assertEqual(x._share(), "2 1")

    def test_back_across_two_sizes_waits(self) -> None:
        """A member that lost Redis just after the fleet grew (it paced on
        rank 1 of 3 and of 2), back on a Redis restarted empty before the
        others: a member that had not heard of the third may still pace on
        2, which Redis does not show. It takes nothing on Redis until they
        are back, and keeps within both sizes if it loses Redis again (Go's
        TestBackAcrossTwoSizes; combination runner, seed 13)."""
        x, y, z = self.limiter("x"), self.limiter("y"), self.limiter("z")
        for lim in (x, y, z, x, y):
            lim._beat()
        self.assertEqual((y._n, y._rank, y._before), (3, 1, 2))
        self.srv.stop()
        self.assertTrue(y.reserve("k", Limit(30, 1)).local)
        self.assertEqual(y._local_share, "m 3 1 2")
        self.srv.start()  # empty
        y._beat()  # back alone, at its old rank
        self.assertFalse(y.is_local)
        self.assertTrue(y._missing())
        self.assertIsNone(y._share(grant=True), "a share on Redis beside members that may pace on 2 or 3")
        self.assertEqual(y._share(), "3 0 2")
        self.assertEqual(y._own_share(), "m 3 1 2", "its own share while they are missing")

    def test_remembers_the_held_members_fleet(self) -> None:
        """A member whose calls on Redis kept to a held member's fleet (3,
        where Redis listed 2) remembers that fleet when it loses Redis:
        back on a Redis restarted empty before the held member, it keeps to
        its rank of that lattice (Go's TestBackBesideHeldFleet; combination
        runner seed 2)."""
        x, y, z = self.limiter("x"), self.limiter("y"), self.limiter("z")
        for lim in (x, y, z, x, y):
            lim._beat()
        self.assertEqual([x._rank, y._rank, z._rank], [0, 1, 2])
        self.tell_local(x, 3)  # x paces locally on "m 3 0 0"
        z.close()  # the fleet is 2 on Redis
        self.lims.remove(z)
        y._beat()
        self.assertEqual((y._n, y._held, y._held_n), (2, [0], 3))
        self.assertEqual(y._share(), "3 0")
        self.srv.stop()
        self.assertTrue(y.reserve("k", Limit(30, 1)).local)
        self.srv.start()  # empty
        y._beat()  # back alone, at its old rank
        self.assertFalse(y.is_local)
        self.assertEqual(y._share(), "3 0 2", "back before the held member: not rank 1's of 3")

    def test_failed_heartbeat_while_members_missing(self) -> None:
        """Back on a Redis restarted empty with a member missing, a Limiter
        leaves on Redis the missing member's rank; after a heartbeat that
        failed it leaves every rank but its own, as when none is missing: a
        member back on Redis may have lost it too and pace locally on its
        rank (Go's TestHeartbeatFailedWhileMembersMissing; combination
        runner, seed 7: Redis froze, and this client on Redis granted
        permits at the instants of a Go member pacing locally on rank 1)."""
        y = self.limiter("y")
        y._beat()
        with y._lock:  # rank 2 of the 3 it knew; rank 0's member missing
            y._n, y._rank, y._members, y._held, y._held_n, y._ranks = 3, 2, 2, [], 0, [1, 2]
            y._remembered, y._remembered_members, y._rank_before = 3, 3, 2
            y._back_at = time.monotonic()
        self.assertEqual(y._share(), "3 0")
        with y._lock:
            y._doubt = True  # a heartbeat failed
        self.assertEqual(y._share(), "3 0 1", "after a failed heartbeat: rank 2's of 3 alone")

    def test_doubt_waits_for_heartbeat(self) -> None:
        """After a heartbeat that failed, or on a stale view, a call that
        takes slots on Redis waits for the next heartbeat (no share yet)
        instead of taking this rank's own instants, which moves the key's
        queue past every other rank's; after two failed in a row, or past
        the wait, it takes its own share (Go's TestDoubtWaitsForHeartbeat,
        TestGuessedViewWaitsForHeartbeat)."""
        y = self.limiter("y")
        y._beat()
        with y._lock:  # rank 1 of 3, every member on Redis
            y._n, y._rank, y._members, y._held, y._held_n, y._ranks = 3, 1, 3, [], 0, [0, 1, 2]
            y._doubt, y._fails = True, 1  # a heartbeat failed
        self.assertIsNone(y._share(grant=True), "a heartbeat failed: a call that takes slots waits")
        self.assertEqual(y._share(), "3 0 2", "the other calls send rank 1's of 3")
        with self.assertRaises(WaitTooLong):
            y.reserve("k", Limit(10, 1), max_wait=0.1)
        with y._lock:
            y._fails = 2  # two in a row
        self.assertEqual(y._share(grant=True), "3 0 2", "two heartbeats failed: rank 1's of 3, taken")
        y._beat()
        self.assertEqual(y._share(grant=True), "1", "a heartbeat answered: the whole")
        with y._lock:
            y._n, y._rank, y._members, y._held, y._held_n, y._ranks = 3, 1, 3, [], 0, [0, 1, 2]
            assert y._last_beat is not None
            y._last_beat -= 3 * y.interval  # stopped meanwhile
        self.assertIsNone(y._share(grant=True), "a stale view: a call that takes slots waits")
        with y._lock:
            y._guess_since -= y._guess_wait + 1
        self.assertEqual(y._share(grant=True), "3 0 2", "past the wait: rank 1's of 3, taken")

    def test_local_cost_above_window_share_waits(self) -> None:
        """Pacing locally, a cost above this Limiter's share of a window
        band in every window (N_k) takes no local slot: its caller waits for
        Redis (a maximum wait ends in WaitTooLong naming OUTAGE_BAND), as
        Go's does (noShareError). Before, the caller got Refused: an
        outage's error to a caller who could wait."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        self.srv.stop()
        pol = Policy((Window("w", 4, 1_000_000, 0, "requests"),))  # 2 a window at a half
        r = a.reserve("k", pol, 2)
        self.assertTrue(a.is_local and r.local)
        with self.assertRaises(WaitTooLong) as e:
            a.reserve("k", pol, 3, max_wait=0.05)
        self.assertEqual(e.exception.band, limiter.OUTAGE_BAND)

    def test_local_settle_gives_back_at_its_share(self) -> None:
        """Pacing locally on a member's share (a half here), a settle below
        the estimate gives back what was not used at the share's spacing,
        what those units took ("settle@", adjust.lua): the next call of that
        size goes at once. Counted at the whole rate's spacing, the safe
        count when the share may have fallen since the reservation, half of
        it came back, and the call waited 1.2 s (Go's
        TestLocalSettleGivesBackAtItsShare)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        self.srv.stop()
        pol = Policy((Bucket("tps", 100, 400, "tokens"),))  # a half: 50/s, burst 200
        r = a.reserve("k", pol, 200)
        self.assertTrue(a.is_local and r.local)
        self.assertTrue(r.settle(80))
        r2 = a.reserve("k", pol, 120)
        self.assertLess(r2.delay(), 0.6, "the 120 unused came back whole")

    def test_pending_settle_gives_back_at_its_share(self) -> None:
        """A settle of a reservation Redis granted at a member's share (a
        half: b is held), made while Redis was unavailable, is made on Redis
        at the handback. At the share it was granted at, it gives back what
        was not used at that share's spacing ("settle@"), as on time; the
        queued settle forgot its share and gave back at the whole rate's
        spacing, half of it, and the next call waited (Go's
        TestPendingSettleGivesBackAtItsShare)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        self.srv.stop()
        self.assertTrue(a.reserve("x", Limit(10, 1)).local)
        self.srv.start()  # empty
        a._beat()  # back first: b, not heard from since a's outage began, is held
        self.assertFalse(a.is_local)
        self.assertEqual(a._share(), f"2 {b._rank}")
        pol = Policy((Bucket("tps", 10, 400, "tokens"),))  # a half: 5/s, burst 200
        r = a.reserve("k", pol, 100)
        self.assertFalse(r.local)
        self.assertLess(r.delay(), 0.1)
        with self.redis_full():
            self.assertTrue(r.settle(40))
            self.assertTrue(a.is_local)
        a._beat()
        self.assertFalse(a.is_local)
        self.assertEqual(a._share(), f"2 {b._rank}")
        # 60 back at the half's spacing: 160 there at once. At the whole
        # rate's, 30: 130 and 5 a second, so 155 waited up to 5 s.
        r2 = a.reserve("k", pol, 155)
        self.assertFalse(r2.local)
        self.assertLess(r2.delay(), 0.1, "the settle's 60 did not come back whole")

    def test_late_heartbeat_view_doubted(self) -> None:
        """A heartbeat whose reply comes back late tells the fleet as it was
        when the script ran, and a member may have lost Redis meanwhile and
        paced locally on its share: the late view is doubted, and the next
        heartbeat, made at once, holds every member not heard from since the
        reply arrived, and those that said "local" meanwhile (Go's
        TestLateHeartbeatViewDoubted; TestFaultLatency: a Go member took
        the whole rate on a view that left Redis 1.8 s before it arrived)."""
        for told in (True, False):
            with self.subTest(told=told):
                self.c.flushall()
                a, b = self.limiter("a"), self.limiter("b")
                for lim in (a, b, a, b):
                    lim._beat()
                self.assertEqual((b._n, b._rank, b._share()), (2, 1, "1"))
                run = b.scripts.run

                def late(*args: object, **kw: object) -> object:
                    b.scripts.run = run  # once
                    v = run(*args, **kw)  # type: ignore[arg-type]
                    if told:
                        self.tell_local(a, 2)  # a loses Redis after b's heartbeat ran
                    time.sleep(0.4)
                    return v

                b.scripts.run = late  # type: ignore[method-assign]
                b._beat()
                self.assertIs(b.scripts.run, run, "the late heartbeat never ran")
                self.assertEqual(b._share(), "2 0", "the whole rate on a view that left Redis before a could be held")
                if not told:
                    # a heard from since: 50 ms after b's outage, 20 ms
                    # before b's heartbeat (a b that counted only the last
                    # millisecond as live would hold it). Two things of a
                    # loaded machine rightly keep a held a little longer
                    # (CI, 2026-11-29), so the three steps go again, up to
                    # 20 times:
                    # - b's own heartbeat may come back late too (over
                    #   _LATE_VIEW): a fresh late view, which holds a again;
                    # - live_ms is the time since b's outage when b builds
                    #   its call, and Redis applies it when the call runs:
                    #   a heard within that call's transit of the outage
                    #   counts as held (a 10 ms transit in the CI run).
                    for _ in range(20):
                        time.sleep(0.05)
                        a._beat()
                        time.sleep(0.02)
                        b._beat()
                        if b._share() == "1":
                            break
                    self.assertEqual(b._share(), "1", "a, heard from since, is still held")
                for lim in (a, b):
                    lim.close()
                    self.lims.remove(lim)

    def test_stall_refreshes_fleet(self) -> None:
        """A reservation that a stalled Redis (frozen, a long fork) runs
        after its deadline changes nothing (PACER_STALE): the members may
        have paced locally meanwhile, which the view it was sent on did not
        know. It goes again once a heartbeat has told the fleet after the
        stall (Go's TestStallRefreshesFleet). Before, Python sent no
        deadline: the call ran at the thaw on the view of before, taking
        the whole rate beside a member silent for over two seconds."""
        b = self.limiter("b")  # heard from at its start, then silent
        a = self.limiter("a")
        b._beat()  # b hears of a: silent from now on, it is held on its half (test_held_on_whole_takes_nothing)
        a._beat()
        self.assertEqual(a._n, 2)
        self.assertEqual(a._share(grant=True), "1", "b is live: both on Redis, a takes the whole rate")
        pol = Limit(1000, 1)
        a.reserve("warm", pol)  # an estimate of Redis's clock: the call's deadline
        shares: list[str] = []
        sending = threading.Event()
        run = a.scripts.run

        def record(client: object, name: str, keys: list[str], args: list[str | bytes]) -> object:
            if name == "Reserve":
                sending.set()
            v = run(client, name, keys, args)
            if name == "Reserve":
                env = args[1].decode() if isinstance(args[1], bytes) else args[1]
                # The share, after the format and the lost horizon if any.
                shares.append(" ".join(w for w in env.split(" ") if w[:1] not in ("f", "!")))  # (a stale call raised)
            return v

        a.scripts.run = record  # type: ignore[method-assign]
        time.sleep(1.0)
        got: list[object] = []
        self.srv.freeze()
        try:
            t = threading.Thread(target=lambda: got.append(a.reserve("api", pol)), daemon=True)
            t.start()
            self.assertTrue(sending.wait(10))
            # Its deadline: 2 x 0.5 s (the socket timeout) and the round
            # trip after it was sent. It times out at 0.5 s, and the ping
            # that decides waits 2 s: Redis thaws after the one, before the
            # other.
            time.sleep(1.6)
        finally:
            self.srv.thaw()
        t.join(20)
        self.assertEqual(len(got), 1, "the reservation returned")
        self.assertFalse(a.is_local, "slow, not gone")
        self.assertEqual(len(shares), 1, shares)
        self.assertNotEqual(shares[0], "1", "granted on the view of before the stall, b held by none")
        self.assertTrue(shares[0].startswith(f"2 {1 - a._rank}"), f"b, silent for over two seconds, is held: {shares[0]!r}")

    def test_stale_reads_the_clock_again(self) -> None:
        """A reservation refused as stale reads Redis's clock again (TIME)
        before it goes again: an estimate that is off (Redis's clock
        stepped) would otherwise make every deadline one in the past, and
        every reservation stale, for ever (and every heartbeat, whose
        deadline comes from the same estimate)."""
        a = self.limiter("a")
        a._beat()
        pol = Limit(1000, 1)
        a.reserve("warm", pol)
        with a._lock:
            good = a._offset_ns
            a._offset_ns -= 10 * 1_000_000_000  # Redis's clock taken for 10 s behind
        stale = 0
        run = a.scripts.run

        def count(client: object, name: str, keys: list[str], args: list[str | bytes]) -> object:
            nonlocal stale
            try:
                return run(client, name, keys, args)
            except PacerError as e:
                if name == "Reserve" and e.code == "PACER_STALE":
                    stale += 1
                raise

        a.scripts.run = count  # type: ignore[method-assign]
        r = a.reserve("api", pol, max_wait=5)  # (stuck, it would raise WaitTooLong)
        self.assertFalse(r.local)
        self.assertEqual(stale, 1, "refused as stale once, then sent on the clock read again")
        with a._lock:
            self.assertLess(abs(a._offset_ns - good), 1_000_000_000, "the estimate, read again")
        self.assertIsNotNone(a._deadline_ms(2))

    def test_stale_tries_keep_the_maximum_wait(self) -> None:
        """Reservations that Redis runs past their deadlines every time
        (PACER_STALE), while it answers the client's other commands, leave
        the client on Redis: its caller waits for Redis, within its maximum
        wait, and past it gets WaitTooLong (band "(outage)"), as while
        Redis is unavailable. Before, each stale try went again at once,
        past the maximum, for as long as the tries were stale (Go's
        TestStaleTriesStayOnRedis)."""
        a = self.limiter("a")
        a._beat()
        pol = Limit(1000, 1)
        a.reserve("warm", pol)
        stale = 0
        run = a.scripts.run

        def late(client: object, name: str, keys: list[str], args: list[str | bytes]) -> object:
            nonlocal stale
            if name == "Reserve":
                # Sent as if it had waited 5 s on the way: past its
                # deadline when Redis runs it.
                args = list(args)
                args[0] = str(int(args[0]) - 5000) if args[0] else args[0]
            try:
                return run(client, name, keys, args)
            except PacerError as e:
                if name == "Reserve" and e.code == "PACER_STALE":
                    stale += 1
                raise

        a.scripts.run = late  # type: ignore[method-assign]
        done: list[BaseException | object] = []

        def call() -> None:
            try:
                done.append(a.reserve("api", pol, max_wait=0.3))
            except BaseException as e:  # noqa: BLE001 (handed to the test)
                done.append(e)

        t = threading.Thread(target=call, daemon=True)
        t.start()
        t.join(10)
        a.scripts.run = run  # type: ignore[method-assign]
        t.join(10)
        self.assertFalse(t.is_alive())
        self.assertGreater(stale, 0, "no reservation ran late")
        self.assertLess(stale, 20, "the stale tries went again at once (a few a millisecond before)")
        self.assertEqual(len(done), 1)
        self.assertIsInstance(done[0], WaitTooLong, f"{done[0]!r} after {stale} stale tries")
        assert isinstance(done[0], WaitTooLong)
        self.assertEqual(done[0].band, limiter.OUTAGE_BAND)
        self.assertFalse(a.is_local)

    def test_stale_reads_the_clock_once_for_all(self) -> None:
        """Reservations refused as stale together (after a stall, every
        thread's) read Redis's clock again and hear the fleet once, not
        once each: every one of them was sent before that read (Go's
        resyncClock). Before, each thread sent its own TIME and heartbeat."""
        a = self.limiter("a")
        a._beat()
        pol = Limit(1000, 1)
        a.reserve("warm", pol)
        threads = 8
        refused = threading.Barrier(threads, timeout=10)
        late = threading.local()
        run = a.scripts.run

        def stale_once(client: object, name: str, keys: list[str], args: list[str | bytes]) -> object:
            if name != "Reserve" or getattr(late, "done", False):
                return run(client, name, keys, args)
            late.done = True
            args = list(args)
            args[0] = str(int(args[0]) - 5000)  # past its deadline when Redis runs it
            try:
                return run(client, name, keys, args)
            except PacerError as e:
                if e.code == "PACER_STALE":
                    refused.wait()  # every thread's refused before any reads the clock
                raise

        reads = 0
        resync = a._resync_clock

        def count() -> None:
            nonlocal reads
            reads += 1
            resync()

        a.scripts.run = stale_once  # type: ignore[method-assign]
        a._resync_clock = count  # type: ignore[method-assign]
        got: list[object] = []
        ts = [threading.Thread(target=lambda: got.append(a.reserve("api", pol, max_wait=5)), daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(20)
        self.assertEqual(len(got), threads)
        self.assertTrue(all(isinstance(r, limiter.Reservation) and not r.local for r in got), got)
        self.assertEqual(reads, 1, "each stale thread read the clock again")

    def test_late_redis_beat_holds_local_slots(self) -> None:
        """A Limiter that goes local while a heartbeat of its saying "redis"
        is under way takes no local slot until it is answered (then it is
        back on Redis) or the fleet could have heard "local": such a
        heartbeat, run late (a frozen Redis holds it, a CLIENT PAUSE queues
        it), marks it heard from on Redis after its switch, and a member
        back from the same outage stops holding it (Go's
        TestLateRedisBeatHoldsLocalSlots; combination runner, seed 28: two
        grants at one instant on a band of burst 1)."""
        c = support.client(self.srv.url, socket_timeout=5, socket_connect_timeout=5)
        a = Limiter(c, prefix="pacer:", limiter_id="a", heartbeat_interval=3600)
        self.lims.append(a)
        b = self.limiter("b")
        a._beat()
        b._beat()  # joins after a: the newcomer is b
        a._beat()
        self.assertEqual(a._n, 2)
        pol = Limit(10, 1)
        a.reserve("warm", pol)  # an estimate of Redis's clock: heartbeats' deadlines
        self.srv.freeze()
        try:
            t = threading.Thread(target=a._beat_once)
            t.start()
            for _ in range(500):
                with a._lock:
                    if a._beats_out:
                        break
                time.sleep(0.01)
            with a._lock:
                self.assertEqual(a._beats_out, 1, "the heartbeat saying redis, held by the frozen Redis")
            a._go_local("the test: a call failed and a ping confirmed it")
            with self.assertRaises(WaitTooLong) as e:
                a.reserve("api", pol, max_wait=0)
            self.assertEqual(e.exception.band, limiter.OUTAGE_BAND, "a local slot while the fleet may count a on Redis")
        finally:
            self.srv.thaw()
        t.join(10)
        # Answered: Redis answers, and the Limiter probes at once.
        for _ in range(500):
            if not a.is_local:
                break
            time.sleep(0.01)
        self.assertFalse(a.is_local, "back on Redis after the heartbeat's answer")

    def test_stale_view_after_stall(self) -> None:
        """A view older than two heartbeat intervals (the process was
        stopped) leaves every other rank its share, and the first heartbeat
        after it keeps back the members Redis no longer lists (it restarted
        empty meanwhile), as a return from an outage does (Go's
        TestStaleViewAfterStall; combination runner, seed 8: a process
        stopped for 3 s across a Redis restart empty took the whole rate
        beside members that still paced locally)."""
        a, b, c = self.limiter("a"), self.limiter("b"), self.limiter("c")
        for lim in (a, b, c, a, b, c):
            lim._beat()
        self.assertEqual((b._n, b._rank, b._share()), (3, 1, "1"))
        with b._lock:
            assert b._last_beat is not None
            b._last_beat -= 3 * b.interval  # stopped meanwhile
        self.assertEqual(b._share(), "3 0 2", "a stale view: rank 1's of 3 alone")
        self.srv.stop()
        self.srv.start()  # empty: a and c, pacing locally, are not back
        b._beat()
        self.assertEqual(b._members, 1)
        self.assertEqual(b._share(), "3 0 2", "the first heartbeat after the stall, the others missing")

    def test_first_heartbeat_checks_suspects(self) -> None:
        """A Limiter opens its presence connection before its first
        heartbeat, as Go's does, so that the suspects that first heartbeat
        names are checked at once: a member that exited is forgotten before
        the next newcomer takes a rank (combination runner, seed 1: three
        processes started after the three killed had ranks 3 to 5, the
        fleet counted 6 ranks for 3 members and paced at a sixth)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a, b):
            lim._beat()
        a._absent()  # a and b killed: Redis closes their connections; they beat no more
        b._absent()
        time.sleep(1.3)  # silent longer than suspect_ms (1.1 s): suspects
        c = self.limiter("c")
        self.assertIsNone(self.c.zscore("pacer:{limiters}", "a"), "a, gone, is still a member")
        self.assertIsNone(self.c.zscore("pacer:{limiters}", "b"), "b, gone, is still a member")
        self.assertEqual(c._members, 1)
        d = self.limiter("d")
        self.assertEqual(d._rank, 0, "the rank of a member gone was not free for the next")

    def test_just_started_holds_members_silent_a_heartbeat(self) -> None:
        """A Limiter just started has heard from nobody yet: a member not
        heard from within suspect_ms (a little over a heartbeat) counts as
        held, since it may have lost Redis and pace locally, as for Go's
        Limiter (its live_ms is at most the time since it started, at least
        suspect_ms; combination runner seed 136)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a, b):
            lim._beat()
        time.sleep(1.3)  # both silent longer than suspect_ms (1.1 s)
        c = self.limiter("c")
        self.assertEqual(c._held, sorted([a._rank, b._rank]))
        self.assertIsNone(c._share(), "every rank of the held members' fleet of 2 is held: c takes nothing")

    def test_back_from_an_outage_holds_members_not_heard_since(self) -> None:
        """Right after an outage of its own, a member not heard from since
        the outage began most likely lost Redis too and may pace locally:
        it counts as held until heard from again, as for Go's Limiter (its
        live_ms is at most the time since the outage began; combination
        runner seed 55)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a, b):
            lim._beat()
        with self.redis_full():
            self.assertTrue(a.reserve("k", Limit(10, 1)).local)
        a._beat()
        self.assertFalse(a.is_local)
        self.assertEqual(a._held, [b._rank], "b, not heard from since the outage began, is not held")
        self.assertEqual(a._share(), f"2 {b._rank}")

    def test_back_at_another_rank(self) -> None:
        """Back on a Redis restarted empty at rank 1 where it had rank 0 of
        3 (a member pacing locally took rank 0 first), rank 1 of the fleet
        it knew is another member's, which may still pace locally on it:
        left to it, as Go's Limiter does (TestBackAtAnotherRank; combination
        runner, seed 2: two permits at one instant every 0.1 s)."""
        a = self.limiter("a")
        with a._lock:
            a._learned, a._n, a._rank, a._members = True, 2, 1, 2
            a._held, a._ranks, a._held_n = [0], [0, 1], 0
            a._remembered, a._remembered_members, a._rank_before = 3, 3, 0
            a._back_at, a._last_beat = time.monotonic(), time.monotonic()
        self.assertEqual(a._share(), "3 1 2")

    def test_missing_held_while_heartbeats_fail(self) -> None:
        """Back first on a Redis restarted empty, the members it knew that
        Redis does not list yet are kept back for remember; a heartbeat that
        fails meanwhile (the fleet's records paused: the others cannot be
        back either) starts that time again, as Go's Limiter does
        (TestMissingHeldWhileHeartbeatsFail; the combination runner's
        Cluster seed 50)."""
        a = self.limiter("a")
        with a._lock:
            a._learned, a._n, a._rank, a._members = True, 1, 0, 1
            a._held, a._ranks, a._held_n = [], [0], 0
            a._remembered, a._remembered_members, a._rank_before = 3, 3, 0
            a._remembered_ranks = [0, 1, 2]
            # 10 s, not the 3 h of this Limiter's heartbeat interval: a
            # time 3 h before now is before the machine booted on one up
            # less than that (time.monotonic counts from boot), and reads
            # as "not back" (_back_at 0). The test failed on a fresh VM.
            a._remember = 10.0
            a._back_at, a._last_beat = time.monotonic() - a._remember + 1.0, time.monotonic()
            self.assertTrue(a._missing())

        def paused(*args: object) -> None:
            raise redis.exceptions.TimeoutError("the fleet's master paused")

        a._send_beat = paused  # type: ignore[method-assign]
        a._lost = lambda e: False  # type: ignore[method-assign]
        before = time.monotonic()
        self.assertFalse(a._beat_once_timed())
        with a._lock:
            self.assertGreaterEqual(a._back_at, before, "the time to come back starts again at the failure")
            a._back_at -= 2.0  # two seconds on: past the first remember, within the second
            self.assertTrue(a._missing(), "the members could not be back while the heartbeats failed")

    def test_newcomer_in_doubt_takes_nothing(self) -> None:
        """A member that joined in the fleet's latest change takes nothing on
        Redis while its heartbeats fail, as it has no local share; a member
        of the fleet before the change takes its own rank's (Go's
        TestNewcomerInDoubtTakesNothing; the combination runner's Cluster
        seed 31)."""
        for rank, want in ((2, None), (0, "3 1 2")):
            a = self.limiter(f"n{rank}")
            with a._lock:
                a._learned, a._n, a._rank, a._members, a._before = True, 3, rank, 3, 2
                a._held, a._ranks, a._held_n = [], [0, 1, 2], 0
                a._last_beat = time.monotonic()
                a._doubt, a._fails = True, 2
            self.assertEqual(a._share(grant=True), want, f"rank {rank} of 3, 2 before the change")

    def test_remembered_fleet_lasts_as_go(self) -> None:
        """Back from an outage, the fleet it knew rules the share for
        max(3 heartbeat intervals, 2 probe intervals), as Go's Limiter
        (fleetView.remember), not for 60 s: a Python member back from a
        client pause at 1.3 s still took its local share on the 2 members it
        had remembered then at 5.4 s, rank 1 of 2, beside a Go member's
        rank 2 of the fleet of 3 both knew: the lattices met every 6/rate
        (combination runner, seed 74: 2 permits at one instant every
        0.2 s)."""
        def limiter(interval: float, probe: float) -> Limiter:
            lim = Limiter(self.c, prefix="pacer:", heartbeat=False, heartbeat_interval=interval, probe_interval=probe)
            self.lims.append(lim)
            return lim

        a = limiter(1.0, 0.5)
        self.assertEqual(a._remember, 3.0)
        with a._lock:
            a._learned, a._n, a._rank, a._members = True, 3, 1, 2
            a._held, a._ranks, a._held_n = [], [1, 2], 0
            a._remembered, a._remembered_members, a._rank_before = 2, 2, 1
            a._remembered_ranks = [0, 1]
            a._back_at, a._last_beat = time.monotonic() - 2.0, time.monotonic()
            self.assertTrue(a._missing(), "rank 0 of the fleet it knew is not listed")
            self.assertEqual(a._own_share(), "m 2 1 0", "within remember: the fleet it knew")
            a._back_at = time.monotonic() - 4.0
            self.assertFalse(a._missing())
            self.assertEqual(a._own_share(), "m 3 1 0", "past remember: the fleet Redis lists")
        self.assertEqual(limiter(0.1, 2.0)._remember, 4.0)

    def test_return_ends_when_all_listed(self) -> None:
        """Back from an outage, once a heartbeat lists every member it knew
        the return is complete: a member that dies after it is not missing
        from the outage, and the share is the fleet's as Redis lists it
        (Go's TestReturnEndsWhenAllListed; combination runner, seed 74: a
        member killed after a complete return counted as missing, and the
        next outage's local share was rank 1 of the 2 remembered beside a
        Go member's rank 2 of 3)."""
        a, b, c = self.limiter("a"), self.limiter("b"), self.limiter("c")
        for lim in (a, b, c, a):
            lim._beat()
        with a._lock:  # back, remembering the fleet of 2 it knew: a and b
            a._remembered, a._remembered_members, a._rank_before = 2, 2, a._rank
            a._remembered_ranks = sorted([a._rank, b._rank])
            a._back_at = time.monotonic()
        a._beat()
        self.assertEqual(a._remembered, 0, "every member it knew listed: the return is over")
        b.close()
        a._beat()
        with a._lock:
            self.assertFalse(a._missing(), "b, gone after the return, counted as missing from the outage")
            self.assertEqual(a._own_share(), f"m {a._n} {a._rank} {a._also_n()}")

    def test_newcomer_leaves_missing_share(self) -> None:
        """Back on a Redis restarted empty with the members of ranks 1 and
        2 of 3 missing (they may pace locally still), a Limiter's heartbeat
        asks the fleet to keep their ranks: a newcomer takes rank 3, and
        leaves them their shares on their fleet's lattice (Go's
        TestNewcomerLeavesMissingShare; combination runner, seed 49: this
        client's newcomer took a missing Go member's rank and the whole key
        on Redis beside its local slots)."""
        y = self.limiter("y")
        y._beat()
        self.assertEqual(y._rank, 0)
        with y._lock:  # back alone at rank 0 of the 3 it knew
            y._remembered, y._remembered_members, y._rank_before = 3, 3, 0
            y._back_at = time.monotonic()
            self.assertEqual(y._keep(), (int(3 * y.interval * 1000), 3, [1, 2]), "three intervals, ranks 1 and 2 of 3")
        y._beat()
        self.assertEqual(y._share(), "3 1 2")
        z = self.limiter("z")
        z._beat()
        self.assertEqual((z._rank, z._held, z._held_n), (3, [1, 2], 3), "the newcomer takes no kept rank")
        self.assertEqual(z._share(), "3 1 2", "the newcomer leaves the missing members their shares")
        y._beat()
        self.assertEqual(y._share(), "3 1 2")

    def test_handback_of_a_key_used_only_locally(self) -> None:
        """The local grants on a key this Limiter never reserved on Redis
        are handed back too: Redis grants nothing before them. (Before, the
        handback skipped a key whose policy only a Redis reply had noted,
        and Redis granted the local slots' instants again.)"""
        a = self.limiter("a")
        a._beat()
        lim = Limit(1, 1)
        with self.redis_full():
            local = [a.reserve("fresh", lim, max_wait=10) for _ in range(3)]  # now, 1 s, 2 s
        self.assertTrue(all(r.local for r in local))
        a._beat()  # back
        self.assertFalse(a.is_local)
        r = a.reserve("fresh", lim)
        self.assertFalse(r.local)
        self.assertGreaterEqual(r.slot_ns - local[-1].slot_ns, 1000 * MS - 1000,
                                "Redis granted a slot within 1/rate of the store's last")

    def test_heartbeats_one_at_a_time(self) -> None:
        """Two heartbeats never run at once, as Go's Limiter's, which beat
        from one loop. Before, the heartbeat thread's tell of the switch to
        local, sent while Redis refused writes, could fail after a probe
        begun later had brought the Limiter back: the stale failure made it
        local again (CI: test_handback_of_a_key_used_only_locally, one run
        in many, its log "back on Redis" then "Redis unavailable
        (heartbeat: ... OOM ...)")."""
        a = self.limiter("a")
        a._beat()
        assert a._thread is not None
        sent, release, told = threading.Event(), threading.Event(), threading.Event()
        send, timed = a._send_beat, a._beat_once_timed

        def held_send(*args: object) -> object:
            try:
                return send(*args)  # type: ignore[arg-type]
            finally:
                if threading.current_thread() is a._thread:
                    sent.set()
                    release.wait(10)  # its reply arrives late

        def timed_once() -> bool:
            try:
                return timed()
            finally:
                if threading.current_thread() is a._thread:
                    told.set()

        a._send_beat = held_send  # type: ignore[method-assign]
        a._beat_once_timed = timed_once  # type: ignore[method-assign]
        with self.redis_full():
            self.assertTrue(a.reserve("k", Limit(1, 1), max_wait=10).local)
            self.assertTrue(sent.wait(10), "the thread's tell of the switch")
        probe = threading.Thread(target=a._beat)  # Redis answers: back
        probe.start()
        probe.join(1)  # before the fix, it came back here, the tell's failure pending
        release.set()
        probe.join(10)
        self.assertTrue(told.wait(10))
        self.assertFalse(probe.is_alive())
        self.assertFalse(a.is_local, "a heartbeat's failure outlived a later one's answer")

    def test_handback_moves_sleepers(self) -> None:
        """Back on Redis, the store's sleepers that have not made their
        last check take slots on Redis, and Redis's floor is the latest of
        the other local grants, as Go's Limiter (MovedBack,
        TestHandbackMovesSleepers). A Limiter pacing locally takes slots at
        its share, so its queue runs ahead: floored at its last local slot,
        the fleet waited behind a few sleepers (a 200-process Cluster run's
        keys at 0.2-4 calls/s of 50)."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a, b):
            lim._beat()
        lim2 = Limit(2, 1)  # locally 1/s, a's share of 2
        results: list[limiter.Reservation | None] = [None] * 4
        errors: list[BaseException] = []

        def sleeper(i: int) -> None:
            try:
                results[i] = a.wait("k", lim2)
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=sleeper, args=(i,)) for i in range(4)]
        with self.redis_full():
            first = a.reserve("k", lim2, max_wait=1)  # not slept on: it counts in the floor
            self.assertTrue(first.local)
            for t in threads:
                t.start()
            st = a._keys["k"]
            deadline = time.monotonic() + 10
            while len(st.asleep) < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
            self.assertEqual(len(st.asleep), 4, "the sleepers on local slots")
            local_last = max(st.grants.values())
            self.assertGreater(local_last - first.slot_ns, 3500 * MS, "local slots 1 s apart, 4 s ahead")
        b._beat()  # heard from since the outage: not held
        a._beat()  # back: the sleepers move
        for t in threads:
            t.join(10)
        self.assertEqual(errors, [])
        self.assertEqual(a._moved_back, 4)
        got = [r for r in results if r is not None]
        self.assertEqual(len(got), 4)
        self.assertTrue(all(not r.local for r in got), "a sleeper fired on its local slot after the handback")
        self.assertLess(max(r.slot_ns for r in got), local_last - 1000 * MS,
                        "Redis granted nothing before the end of the local queue: the floor counted the sleepers")
        slots = sorted([first.slot_ns] + [r.slot_ns for r in got])
        self.assertTrue(all(y - x >= 500 * MS - 1000 for x, y in zip(slots, slots[1:])),
                        f"slots closer than 1/rate: {[(y - x) / MS for x, y in zip(slots, slots[1:])]} ms")

    def test_handback_keeps_a_full_window(self) -> None:
        """The store keeps a window band's latest window only: when its
        sleepers went into the next window, the full one's units were gone
        from it, and back on Redis (restarted empty) the sleepers moved to
        Redis, out of the floor, and Redis granted the full window's N in it
        again (Go's TestHandbackKeepsFullWindow; combination runner, seed
        14). Every window holds at most N: the local grants that fired and
        every slot Redis granted."""
        a = self.limiter("a")
        a._beat()
        n, length = 2, 2_000_000  # µs: windows of 2 s, the first ending 1.9 s from now
        origin = (server_now_ns(self.c) // 1000 - 100_000) % length
        pol = Policy((Window("win", n, length, origin, "requests"),))

        def window(ns: int) -> int:
            return (ns // 1000 - origin) // length

        results: list[limiter.Reservation | None] = [None] * n
        errors: list[BaseException] = []

        def sleeper(i: int) -> None:
            try:
                results[i] = a.wait("fw", pol, {"requests": 1})
            except BaseException as e:  # noqa: BLE001 (reported below)
                errors.append(e)

        threads = [threading.Thread(target=sleeper, args=(i,)) for i in range(n)]
        self.srv.stop()
        fired = [a.reserve("fw", pol, {"requests": 1}) for _ in range(n)]
        self.assertTrue(all(r.local for r in fired))
        for t in threads:
            t.start()
        st = a._keys["fw"]
        deadline = time.monotonic() + 10
        while len(st.asleep) < n and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(len(st.asleep), n, "the sleepers on local slots")
        self.srv.start()  # empty
        a._beat()  # back: the sleepers move
        self.assertFalse(a.is_local)
        after = []
        for _ in range(2 * n):
            r = a.reserve("fw", pol, {"requests": 1})
            self.assertFalse(r.local)
            after.append(r)
            if window(r.slot_ns) > window(fired[0].slot_ns):
                break
        for t in threads:
            t.join(10)
        self.assertEqual(errors, [])
        moved = [r for r in results if r is not None]
        self.assertEqual(len(moved), n)
        self.assertTrue(all(not r.local for r in moved), "a sleeper fired on its local slot after the handback")
        for r in after:
            a.cancel(r)
        counts: dict[int, int] = {}
        for r in fired + moved + after:
            counts[window(r.slot_ns)] = counts.get(window(r.slot_ns), 0) + 1
        self.assertLessEqual(max(counts.values()), n, f"units by window: {counts}")

    def test_back_first_of_the_fleet_waits_for_it(self) -> None:
        """Back from an outage while four of the fleet's five members still
        pace locally (held), a Limiter's calls that take slots wait for
        them rather than take its own rank's instants, which would run the
        key's queue ahead of theirs, as Go's Limiter does (fleetView.sparse,
        TestBackWaitsForFleetOnRedis; a 200-process Cluster run put its keys'
        queues 20 s ahead). A call with a maximum wait gets WaitTooLong
        ("(outage)"); once the others are back, calls go to Redis."""
        lims = [Limiter(self.c, prefix="pacer:", limiter_id=name, heartbeat_interval=3600, probe_interval=3600)
                for name in "abcde"]
        self.lims.extend(lims)
        a, others = lims[0], lims[1:]
        for lim in lims + lims:
            lim._beat()
        self.assertEqual(a._n, 5)
        lim5 = Limit(50, 1)  # a burst under the fleet's 5: the lattice
        with self.redis_full():
            self.assertTrue(a.reserve("k", lim5, max_wait=1).local)
        for lim in others:
            self.tell_local(lim, 5)  # they lost Redis too, and are still away
        a._beat()  # back, first of the five
        self.assertFalse(a.is_local)
        self.assertEqual(len(a._held), 4, a._held)
        before = self.c.get("pacer:{k}")
        with self.assertRaises(WaitTooLong) as e:
            a.reserve("k", lim5, max_wait=0.05)
        self.assertEqual(e.exception.band, limiter.OUTAGE_BAND)
        self.assertEqual(self.c.get("pacer:{k}"), before, "a reserved on Redis while waiting for the fleet")
        for lim in others:  # back on Redis
            lim.scripts.run(self.c, "Heartbeat", protocol.fleet_keys("pacer:"),
                            protocol.heartbeat_args(lim.id, "redis", int(time.time() * 1000) + 2, 5, lim._rank))
        a._beat()
        self.assertEqual(a._held, [])
        for _ in range(3):
            self.assertFalse(a.reserve("k", lim5).local)

    def test_heartbeat_tells_the_local_share_size(self) -> None:
        """A member on Redis tells the fleet, in every heartbeat, the size
        its local share would count ("<since_ms> <cid> <n>"), and beats
        again at once when a reply changed it, as Go's Limiter: if it goes
        silent (it lost Redis), the others keep to that lattice (held_n;
        combination runner seed 25). Back on Redis, it tells the fleet at
        once, so that the others stop holding its share."""
        a, b = self.limiter("a"), self.limiter("b")
        a._beat()
        b._beat()
        a._beat()  # learns n = 2: and tells it at once
        self.assertEqual(self.c.hget("pacer:{limiters}:info", "a").decode().split()[3], "2")
        self.srv.stop()
        self.assertTrue(a.reserve("k", Limit(10, 1)).local)
        self.srv.start()  # empty
        b._beat()
        a._beat()  # back: and says "redis" at once
        self.assertFalse(a.is_local)
        self.assertEqual(self.c.hget("pacer:{limiters}:info", "a").decode().split()[0], "redis")

    def test_heartbeat_run_after_its_deadline_changes_nothing(self) -> None:
        """A heartbeat on Redis carries a deadline (when its Limiter gives
        up on it, on the server's clock as estimated): a frozen Redis that
        runs it when it resumes, after the Limiter went local, must not
        show the Limiter live on Redis, as for Go's Limiter (heartbeat.lua's
        ARGV[9]; combination runner seed 72)."""
        a, b = self.limiter("a"), self.limiter("b")
        a.reserve("k", Limit(10, 1))  # a round trip: an estimate of the server's clock
        for lim in (a, b, a, b):
            lim._beat()
        self.srv.freeze()
        # (a's heartbeat thread is not woken when it goes local: its
        # heartbeat saying "local" would reach Redis at the thaw too.)
        with mock.patch.object(a, "_wake", threading.Event()):
            try:
                a._beat()  # times out; a ping fails too: a paces locally
                self.assertTrue(a.is_local)
            finally:
                self.srv.thaw()  # it runs what was queued, a's heartbeat among it
        b._beat()
        self.assertEqual(b._held, [a._rank], "a, pacing locally, counted live on Redis by a stale heartbeat")

    def test_going_local_tells_the_fleet_at_once(self) -> None:
        """A member that starts pacing locally heartbeats at once (its
        heartbeat thread is woken), not an interval later, as Go's Limiter:
        until the fleet hears "local", the others take the whole beside its
        local slots. Here its calls failed while Redis answers the fleet:
        that heartbeat reaches Redis, and is the way back too."""
        a, b = self.limiter("a"), self.limiter("b")
        for lim in (a, b, a):
            lim._beat()
        beaten = threading.Event()
        beat = a._beat

        def spy() -> None:
            beat()
            beaten.set()

        with mock.patch.object(a, "_beat", spy):
            a._go_local("test: a call failed")
            self.assertTrue(beaten.wait(30), "no heartbeat after the switch: the fleet still counts a on Redis")
        self.assertFalse(a.is_local, "that heartbeat reached Redis: a is back")

    def test_without_lupa_waits_for_redis(self) -> None:
        with mock.patch.object(localstore, "AVAILABLE", False):
            a = self.limiter("a")
        self.srv.stop()
        with self.assertRaises(WaitTooLong) as e:
            a.reserve("k", Limit(10, 1), max_wait=0.2)
        self.assertEqual(e.exception.band, "(outage)", "a caller with a maximum wait gets Go's refusal, not an outage's error")
        self.assertEqual(e.exception.wait, 0.2)
        threading.Timer(0.5, self.srv.start).start()
        r = a.wait("k", Limit(10, 1))  # a caller who can wait waits for Redis
        self.assertFalse(r.local)
        self.assertEqual(r.seq, 1)


if __name__ == "__main__":
    unittest.main()
