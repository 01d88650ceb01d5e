"""Calendar windows in the Python client: its tables are Go's
(reserve/testdata/calendar_tables.json, computed by Go's reserve from the
tz database), its band record is Go's, bad windows are refused, and a
Limiter on Redis is held to a day of Los Angeles; then 150 days around two
DST changes on redis-server and on the local store (lupa) side by side,
the client's clock moved by the test: the same replies and states, no day
over N, every day used."""

from __future__ import annotations

import datetime
import json
import random
import unittest
import zoneinfo

import support

from pacer import Limiter, Policy, WaitTooLong, Window, localstore, protocol

LA = zoneinfo.ZoneInfo("America/Los_Angeles")
GOLDEN = support.REPO / "reserve" / "testdata" / "calendar_tables.json"


def ordinal(d: datetime.date) -> int:
    return d.toordinal() - datetime.date(1970, 1, 1).toordinal()


class CalendarTest(unittest.TestCase):
    def test_tables_are_gos(self) -> None:
        with open(GOLDEN) as f:
            cases = json.load(f)
        self.assertGreater(len(cases), 50)
        for c in cases:
            got = protocol.calendar_table(c["period"], zoneinfo.ZoneInfo(c["zone"]), c["now_us"])
            self.assertEqual(got, c["table"], f"{c['period']} {c['zone']} at {c['now_us']}")

    def test_record_is_gos(self) -> None:
        w = Window("daily", 1500, calendar="day", tz="America/Los_Angeles", unit="requests")
        self.assertEqual(w.args(1), ["daily", "1", "c", "1500", "day:America/Los_Angeles"])
        self.assertEqual(w, Window("daily", 1500, calendar="day", tz=LA, unit="requests"))
        p = Policy((w, Window("monthly", 30000, calendar="month", unit="requests")))
        # As Go's reserve.Policy.MarshalText writes it (reserve's TestCalendarSignature).
        self.assertEqual(p.stored_text(), "2 daily requests c 1500 day:America/Los_Angeles monthly requests c 30000 month:UTC")
        env = protocol.common_args("1", p, 1773039599500000, fmt=3)[1]
        self.assertTrue(env.startswith("t1773039599500000:0 cday:America/Los_Angeles=20518:"), env)  # type: ignore[union-attr]
        self.assertIn(";month:UTC=672:", env)
        self.assertTrue(env.endswith(" 1"), env)  # type: ignore[union-attr]
        self.assertTrue(protocol.common_args("1", p, 1773039599500000, fmt=1)[1].startswith("t1773039599500000:0 f1 cday:"))  # type: ignore[union-attr]
        self.assertTrue(protocol.common_args("1", p, None, fmt=2, lost="!5:1")[1].startswith("f2 !5:1 cday:"))  # type: ignore[union-attr]

    def test_bad_windows(self) -> None:
        for kw in (dict(calendar="fortnight"), dict(tz="UTC"), dict(calendar="day", length_us=86_400_000_000),
                   dict(calendar="day", origin_us=1), dict(calendar="day", tz="Mars/Olympus"),
                   dict(calendar="day", tz="Local"), dict(calendar="day", tz="a zone"), dict(calendar="day", tz=3)):
            with self.assertRaises(ValueError, msg=str(kw)):
                Window("daily", 10, **kw)  # type: ignore[arg-type]
        with self.assertRaises(ValueError):
            Window("daily", 0, calendar="day")

    def test_limiter_on_redis(self) -> None:
        c = support.client()
        lim = Limiter(c, prefix=support.prefix(), heartbeat_interval=3600)
        self.addCleanup(lim.close)
        p = Policy((Window("daily", 3, calendar="day", tz=LA, unit="requests"),))
        for _ in range(3):
            lim.reserve("gemini", p, 1, max_wait=0)
        with self.assertRaises(WaitTooLong):
            lim.reserve("gemini", p, 1, max_wait=0)
        r = lim.reserve("gemini", p, 1)
        # The fourth lands at the next midnight in Los Angeles, in its day.
        sec, _ = c.execute_command("TIME")
        today = datetime.datetime.fromtimestamp(int(sec), tz=LA).date()
        tomorrow = today + datetime.timedelta(days=1)
        start = datetime.datetime(tomorrow.year, tomorrow.month, tomorrow.day, tzinfo=LA)
        if datetime.datetime.fromtimestamp(int(sec) + 5, tz=LA).date() != today:
            self.skipTest("the test ran within seconds of midnight in Los Angeles")
        self.assertEqual(r.slot_ns, int(start.timestamp()) * 1_000_000_000)
        self.assertEqual(r.band, "daily")
        state = c.get(protocol.redis_key(lim.prefix, "gemini")).decode()
        self.assertRegex(state, rf" daily w?{ordinal(tomorrow)} 1$")


@unittest.skipUnless(localstore.AVAILABLE, "lupa is not installed")
class CalendarStoresTest(unittest.TestCase):
    def test_days_across_dst_on_both_stores(self) -> None:
        scripts = protocol.Scripts()
        c = support.client()
        store = localstore.LocalStore(scripts)
        key = protocol.redis_key(support.prefix(), "cal")
        keys = [key, key + ":limit", key + ":shadow"]
        n = 4
        p = Policy((Window("daily", n, calendar="day", tz=LA, unit="requests"),))
        rng = random.Random(42)
        used: dict[int, int] = {}
        day = datetime.date(2026, 10, 20)
        lengths = set()
        for _ in range(150):
            start = datetime.datetime(day.year, day.month, day.day, tzinfo=LA)
            nxt = day + datetime.timedelta(days=1)
            end = datetime.datetime(nxt.year, nxt.month, nxt.day, tzinfo=LA)
            a, b = int(start.timestamp()) * 1_000_000, int(end.timestamp()) * 1_000_000
            lengths.add(b - a)
            times = sorted([a, b - 1] + [rng.randrange(a, b) for _ in range(2 * n)])
            for t in times:
                queue = rng.random() < 0.1
                args = protocol.reserve_args(protocol.common_args("1", p, t, 0, 2), "", [(-1 if queue else 0, [1.0])])
                got = [None, None]
                for i, where in enumerate((c, store)):
                    got[i] = protocol.decode_reserve(scripts.run(where, "Reserve", keys, args))
                self.assertEqual(got[0], got[1], f"at {t}")
                self.assertEqual(protocol.normalize(c.get(key)), protocol.normalize(store.execute_command("GET", key)))
                g = got[0].grants[0]
                if g.seq > 0:
                    k = ordinal(datetime.datetime.fromtimestamp(g.slot_ns // 1_000_000_000, tz=LA).date())
                    used[k] = used.get(k, 0) + 1
                    self.assertLessEqual(used[k], n, f"day {k} over N")
            self.assertEqual(used.get(ordinal(day), 0), n, f"{day} did not use its quota")
            day = nxt
        self.assertEqual(lengths, {23 * 3600_000_000, 24 * 3600_000_000, 25 * 3600_000_000})
        c.delete(*keys)


if __name__ == "__main__":
    unittest.main()


class StoredCalendarTest(unittest.TestCase):
    def test_stored_calendar_band_learned(self) -> None:
        # A stored limit (pacer set --per day --tz ...) with a calendar
        # window the caller's policy lacks: the script asks for the zone's
        # table (PACER_CALENDAR), and the reservation is sent again with
        # it, once: the first call is granted, and all are held to it.
        c = support.client()
        lim = Limiter(c, prefix=support.prefix(), heartbeat_interval=3600)
        self.addCleanup(lim.close)
        self.addCleanup(protocol.forget_calendars)  # learned for the process: the other tests' encodings are byte for byte
        key = protocol.redis_key(lim.prefix, "stored")
        c.set(key + ":limit", "enforce 1 daily requests c 2 day:Pacific/Chatham")
        p = Policy((protocol.Bucket("rps", 1000, 1000, unit="requests"),))
        sec, _ = c.execute_command("TIME")
        chatham = zoneinfo.ZoneInfo("Pacific/Chatham")
        if datetime.datetime.fromtimestamp(int(sec) + 5, tz=chatham).date() != datetime.datetime.fromtimestamp(int(sec), tz=chatham).date():
            self.skipTest("the test ran within seconds of midnight in Chatham")
        lim.reserve("stored", p, 1, max_wait=0)
        lim.reserve("stored", p, 1, max_wait=0)
        with self.assertRaises(WaitTooLong) as w:
            lim.reserve("stored", p, 1, max_wait=0)
        self.assertEqual(w.exception.band, "daily")
