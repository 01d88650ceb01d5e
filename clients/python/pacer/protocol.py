"""pacer's Redis protocol, as docs/protocol.md gives it: key names, the
scripts, their arguments and replies, and the state's grammar.

Nothing here paces: every pacing rule is in the Lua scripts (lua/*.lua),
which this module loads and calls. Each function names the section of
docs/protocol.md it follows.
"""

from __future__ import annotations

import datetime
import hashlib
import math
import os
import re
import struct as pystruct
import threading
import time
import zoneinfo
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, Union

import redis

# The scripts, as the concatenation of lua/ files ("Scripts"; a test holds
# this table to the page's).
SCRIPT_FILES: dict[str, tuple[str, ...]] = {
    "Reserve": ("head.lua", "fast.lua", "core.lua", "reserve.lua"),
    "Fair": ("head.lua", "core.lua", "tools.lua", "fair.lua", "reserve.lua"),
    "Adjust": ("head.lua", "core.lua", "tools.lua", "adjust.lua"),
    "Pause": ("head.lua", "core.lua", "tools.lua", "note.lua", "pause.lua"),
    "Resume": ("head.lua", "core.lua", "tools.lua", "note.lua", "resume.lua"),
    "Peek": ("head.lua", "core.lua", "tools.lua", "peek.lua"),
    "Claim": ("head.lua", "core.lua", "tools.lua", "claim.lua"),
    "Hold": ("head.lua", "core.lua", "tools.lua", "hold.lua"),
    "Lease": ("head.lua", "core.lua", "tools.lua", "lease.lua"),
    "Rewrite": ("head.lua", "core.lua", "tools.lua", "rewrite.lua"),
    "Heartbeat": ("heartbeat.lua",),
    "Admin": ("admin.lua",),
    "Restore": ("restore.lua",),
    "Adaptive": ("adaptive.lua",),
    "Quota": ("quota.lua",),
    "Seats": ("seats.lua",),
}

#: Go's defaults for Heartbeat's live_ms, hold_ms, suspect_ms and keep_ms.
HEARTBEAT_TIMES = ("2000", "60000", "1100", "180000")

#: The fleet's keys under the prefix ("Keys", "Heartbeat"), in Heartbeat's
#: order: the ninth, where a member records the highest state format it
#: reads (3), lets an operator's ``pacer format 3`` see this client as one
#: that reads format 3; the tenth to twelfth are the indexes a member told
#: format 3 keeps (the writers, those pacing locally, the holes in the ranks).
FLEET_SUFFIXES = ("", ":info", ":policies", ":ids", ":checked", ":policies:at", ":format", ":writes", ":reads",
                  ":x:w", ":x:local", ":x:holes")

#: The state formats this client reads ("The state"); it writes the one the
#: fleet's setting says ("Versions": 2 unless told 1 or 3).
FORMATS = (1, 2, 3)

Reply = Union[int, str, None, list["Reply"]]


class PacerError(Exception):
    """A script's error reply ("Errors"): ``code`` is its first word."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = message.split(" ", 1)[0]


class PacerArgumentError(PacerError, ValueError):
    """PACER_ARG, PACER_EXCEEDS, PACER_CONFIG or PACER_CALENDAR: the call
    was malformed (PACER_CALENDAR: a stored limit has a calendar window
    whose zone's table the call did not carry) and changed nothing."""


class TransientError(redis.exceptions.ResponseError):
    """An error reply of a Redis that is there but cannot serve now
    (TRANSIENT_CODES: loading, failing over, a read-only replica, a busy
    script, or at its maxmemory with noeviction, where OOM refuses the
    script's write and nothing was granted): the Limiter counts it as Redis
    being unavailable, as Go's does (reserve/call.go, unavailableCodes)."""


#: The error codes TransientError covers: Go's unavailableCodes but
#: PACER_STALE (a heartbeat run after its deadline: the Limiter counts it
#: as a heartbeat that failed, no outage).
TRANSIENT_CODES = frozenset({"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS", "BUSY", "OOM"})


def script_error(err: redis.exceptions.ResponseError) -> Exception:
    """Returns a script's error reply as a PacerError (Redis's own errors,
    such as WRONGTYPE, as they are; the transient ones as TransientError)."""
    msg = str(err)
    if msg.split(" ", 1)[0] in TRANSIENT_CODES:
        return TransientError(msg)
    if not msg.startswith("PACER_"):
        return err
    if msg.startswith("PACER_CALENDAR "):
        learn_calendar(msg.split(" ")[1])
    if msg.split(" ", 1)[0] in ("PACER_ARG", "PACER_EXCEEDS", "PACER_CONFIG", "PACER_CALENDAR"):
        return PacerArgumentError(msg)
    return PacerError(msg)


# ---------------------------------------------------------------- Keys


def redis_key(prefix: str, key: str, suffix: str = "") -> str:
    """Returns key's Redis key P{k} plus suffix ("Keys"): %, { and } escaped."""
    if not isinstance(key, str) or key == "":
        raise ValueError("pacer: a key is a non-empty string")
    if key == "limiters":
        raise ValueError('pacer: the key name "limiters" is the fleet\'s')
    esc = key.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")
    return f"{prefix}{{{esc}}}{suffix}"


def fleet_keys(prefix: str) -> list[str]:
    """Heartbeat's twelve keys ("Heartbeat")."""
    return [f"{prefix}{{limiters}}{s}" for s in FLEET_SUFFIXES]


# ---------------------------------------------------------------- Scripts


def default_lua_dir() -> Path:
    """The lua/ directory the client follows: $PACER_LUA_DIR, else this
    repository's."""
    env = os.environ.get("PACER_LUA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "lua"


class Scripts:
    """The scripts' texts and SHA1s, read from a release's lua/ files."""

    def __init__(self, lua_dir: str | os.PathLike[str] | None = None) -> None:
        d = Path(lua_dir) if lua_dir is not None else default_lua_dir()
        cache: dict[str, bytes] = {}

        def read(name: str) -> bytes:
            if name not in cache:
                cache[name] = (d / name).read_bytes()
            return cache[name]

        self.text: dict[str, bytes] = {n: b"".join(read(f) for f in fs) for n, fs in SCRIPT_FILES.items()}
        self.sha: dict[str, str] = {n: hashlib.sha1(t).hexdigest() for n, t in self.text.items()}

    def run(self, client: Any, name: str, keys: Sequence[str], args: Sequence[str | bytes]) -> Reply:
        """Runs script name with EVALSHA, loading it on NOSCRIPT ("Scripts").
        An argument is bytes, or a str sent as its bytes (``to_bytes``: a
        state or a reply's string, read with ``normalize``, goes back as it
        came). A script's error reply is raised as a PacerError."""
        args = [to_bytes(a) for a in args]
        try:
            try:
                v = client.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *args)
            except redis.exceptions.NoScriptError:
                client.execute_command("SCRIPT", "LOAD", self.text[name])
                v = client.execute_command("EVALSHA", self.sha[name], len(keys), *keys, *args)
        except redis.exceptions.ResponseError as e:
            if isinstance(e, (redis.exceptions.NoScriptError, redis.exceptions.BusyLoadingError,
                              redis.exceptions.ReadOnlyError)):
                raise
            raise script_error(e) from None
        return normalize(v)


def normalize(v: Any) -> Reply:
    """A reply with bytes decoded: int, str, None or lists of them. A
    string's bytes are UTF-8 with the bytes that are not (a format 3 state,
    Reserve's reply, little-endian doubles) kept as lone surrogates
    ("surrogateescape"): ``to_bytes`` gives them back exactly."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    if isinstance(v, (list, tuple)):
        return [normalize(x) for x in v]
    return v


def to_bytes(v: str | bytes) -> bytes:
    """A string's bytes, as ``normalize`` read them (an argument, a state)."""
    if isinstance(v, bytes):
        return v
    return v.encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------- Policies


def fmt_num(x: float) -> str:
    """A decimal as the scripts read it: whole numbers without a point."""
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(float(x))


def _name(what: str, s: object) -> str:
    if not isinstance(s, str) or s == "" or any(c.isspace() for c in s):
        raise ValueError(f"pacer: {what} {s!r} is not a non-empty name without spaces")
    return s


def _finite(what: str, x: object) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise ValueError(f"pacer: {what} {x!r} is not a finite number")
    return float(x)


@dataclass(frozen=True)
class Bucket:
    """A token bucket band: ``rate`` units per second, ``burst`` at most at once."""

    name: str
    rate: float
    burst: int
    unit: str = "permits"

    def __post_init__(self) -> None:
        _name("a band's name", self.name)
        if self.name.startswith("~"):
            raise ValueError(f"pacer: a band's name {self.name!r} starts with ~ (reserved)")
        _name("a unit", self.unit)
        if _finite("a rate", self.rate) <= 0:
            raise ValueError(f"pacer: a rate must be > 0, not {self.rate!r}")
        if isinstance(self.burst, bool) or not isinstance(self.burst, (int, float)) or not math.isfinite(self.burst) \
                or self.burst != int(self.burst) or self.burst < 1:
            raise ValueError(f"pacer: a burst must be a whole number >= 1, not {self.burst!r}")

    def args(self, unit_index: int) -> list[str]:
        return [self.name, str(unit_index), "b", fmt_num(self.rate), str(int(self.burst))]


@dataclass(frozen=True)
class Window:
    """A fixed-window band: at most ``n`` units in each window of
    ``length_us`` µs, windows starting at ``origin_us`` modulo the length
    (0: Unix time's, so a day is a UTC day).

    Or, with ``calendar`` ("day", "week" or "month"), a calendar window:
    the windows are the days, ISO weeks (from Monday) or months of the
    time zone ``tz`` (a ``zoneinfo.ZoneInfo`` or its name; None: UTC), each
    from its local midnight, across daylight-saving changes; length and
    origin stay 0. Each call carries the zone's period boundaries around
    now ("Common arguments": ARGV[2]'s "c" tables), computed here from the
    tz database as Go's reserve computes them."""

    name: str
    n: float
    length_us: int = 0
    origin_us: int = 0
    unit: str = "permits"
    calendar: str | None = None
    tz: zoneinfo.ZoneInfo | str | None = None

    def __post_init__(self) -> None:
        _name("a band's name", self.name)
        if self.name.startswith("~"):
            raise ValueError(f"pacer: a band's name {self.name!r} starts with ~ (reserved)")
        _name("a unit", self.unit)
        if _finite("a window's N", self.n) < 1:
            raise ValueError(f"pacer: a window's N must be >= 1, not {self.n!r}")
        if self.calendar is not None or self.tz is not None:
            if self.calendar not in PERIODS:
                raise ValueError(f"pacer: a calendar window's period is day, week or month, not {self.calendar!r}"
                                 + (" (a tz without a calendar period)" if self.calendar is None else ""))
            if self.length_us != 0 or self.origin_us != 0:
                raise ValueError("pacer: a calendar window has no length or origin (its periods are the zone's)")
            object.__setattr__(self, "tz", _zone(self.tz))
            return
        for what, v in (("length", self.length_us), ("origin", self.origin_us)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"pacer: a window's {what} is whole µs, not {v!r}")
        if self.length_us <= 0 or not 0 <= self.origin_us < self.length_us:
            raise ValueError("pacer: a window's length must be > 0 µs and its origin within it")

    @property
    def spec(self) -> str | None:
        """A calendar window's "<period>:<zone>" (None for a fixed window)."""
        if self.calendar is None:
            return None
        return f"{self.calendar}:{self.tz.key}"  # type: ignore[union-attr]

    def args(self, unit_index: int) -> list[str]:
        if self.calendar is not None:
            return [self.name, str(unit_index), "c", fmt_num(self.n), self.spec]  # type: ignore[list-item]
        return [self.name, str(unit_index), "w", fmt_num(self.n), f"{self.length_us}:{self.origin_us}"]


# ---------------------------------------------------------------- Calendars
#
# Calendar windows' tables ("Common arguments", ARGV[2]'s "c" part): the
# zone's period boundaries around now, each "<spec>=<i0>:<b0>:<len>*<count>,..."
# (the window numbered i0, the period's ordinal, starts at Unix µs b0; then
# runs of count periods of len µs), from two periods before now to 400 days,
# 60 weeks or 14 months after. The same arithmetic as Go's reserve/calendar.go,
# on zoneinfo: reserve/testdata/calendar_tables.json holds Go's tables, which
# the tests compare. Nothing here paces: the scripts count.

PERIODS = ("day", "week", "month")
_AHEAD = {"day": 400, "week": 60, "month": 14}
_EPOCH_DAY = datetime.date(1970, 1, 1).toordinal()
_UTC = datetime.timezone.utc


def _zone(tz: zoneinfo.ZoneInfo | str | None) -> zoneinfo.ZoneInfo:
    """The zone of a calendar window: a ZoneInfo with a tz database key."""
    if tz is None:
        tz = "UTC"
    if isinstance(tz, str):
        if not re.fullmatch(r"[A-Za-z0-9/_+-]{1,64}", tz) or tz == "Local":
            raise ValueError(f"pacer: a calendar window's zone {tz!r} is not a tz database name")
        try:
            return zoneinfo.ZoneInfo(tz)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"pacer: unknown time zone {tz!r}: {e}") from None
    if not isinstance(tz, zoneinfo.ZoneInfo) or not tz.key or not re.fullmatch(r"[A-Za-z0-9/_+-]{1,64}", tz.key):
        raise ValueError(f"pacer: a calendar window's zone must be a zoneinfo.ZoneInfo with a tz database key, not {tz!r}")
    return tz


def _civil(zone: zoneinfo.ZoneInfo, t_s: int) -> datetime.date:
    """The local date at Unix second t_s."""
    return datetime.datetime.fromtimestamp(t_s, tz=zone).date()


def _civil_us(zone: zoneinfo.ZoneInfo, t_us: int) -> datetime.date:
    return _civil(zone, t_us // 1_000_000)


def _period_of(period: str, d: datetime.date) -> tuple[datetime.date, int]:
    """The first date of the period holding date d, and its ordinal."""
    days = d.toordinal() - _EPOCH_DAY
    if period == "week":
        k = (days - 4) // 7  # 1970-01-05 was a Monday
        return datetime.date.fromordinal(_EPOCH_DAY + 4 + 7 * k), k
    if period == "month":
        return d.replace(day=1), (d.year - 1970) * 12 + d.month - 1
    return d, days


def _next(period: str, d: datetime.date) -> datetime.date:
    if period == "week":
        return d + datetime.timedelta(days=7)
    if period == "month":
        return (d.replace(day=28) + datetime.timedelta(days=4)).replace(day=1)
    return d + datetime.timedelta(days=1)


def _midnight(zone: zoneinfo.ZoneInfo, d: datetime.date) -> int:
    """The Unix second date d starts in zone: the last instant its date is
    entered from an earlier one (Go's calendar.midnight)."""
    du = (d.toordinal() - _EPOCH_DAY) * 86400
    best = None
    offs: list[int] = []
    for probe in (du - 2 * 86400, du - 86400, du, du + 86400, du + 2 * 86400):
        off = int(datetime.datetime.fromtimestamp(probe, tz=zone).utcoffset().total_seconds())  # type: ignore[union-attr]
        if off in offs:
            continue
        offs.append(off)
        cand = du - off
        local = datetime.datetime.fromtimestamp(cand, tz=zone)
        if (local.hour, local.minute, local.second) == (0, 0, 0) and local.date() == d \
                and _civil(zone, cand - 1) < d and (best is None or cand > best):
            best = cand
    if best is not None:
        return best
    lo, hi = du - 2 * 86400, du + 2 * 86400  # the clocks skip 00:00: d starts at the change
    while hi - lo > 1:
        mid = lo + (hi - lo) // 2
        if _civil(zone, mid) < d:
            lo = mid
        else:
            hi = mid
    return hi


def charged(policy: "Policy", costs: Sequence[float], band: "Bucket | Window") -> bool:
    """Whether costs (one per policy.units) charge band's unit."""
    return any(u == band.unit and c > 0 for u, c in zip(policy.units, costs))


def window_end(policy: "Policy", costs: Sequence[float], t_ns: int) -> int | None:
    """The end (Unix ns) of the earliest window, among policy's window bands
    that costs charge, holding t_ns; None when costs charge none (Go's
    spec.windowEnd)."""
    end: int | None = None
    for b in policy.bands:
        if not isinstance(b, Window) or not charged(policy, costs, b):
            continue
        if b.calendar is not None:
            d, _ = _period_of(b.calendar, _civil_us(b.tz, t_ns // 1000))  # type: ignore[arg-type]
            e = _midnight(b.tz, _next(b.calendar, d)) * 1_000_000_000  # type: ignore[arg-type]
        else:
            length, origin = b.length_us * 1000, b.origin_us * 1000
            e = origin + ((t_ns - origin) // length + 1) * length
        if end is None or e < end:
            end = e
    return end


_cal_cache: dict[str, tuple[int, int, str]] = {}
_cal_lock = threading.Lock()


def calendar_table(period: str, zone: zoneinfo.ZoneInfo, now_us: int) -> str:
    """The table a call at now_us carries for a calendar window."""
    spec = f"{period}:{zone.key}"
    with _cal_lock:
        hit = _cal_cache.get(spec)
    if hit is not None and hit[0] <= now_us < hit[1]:
        return hit[2]
    d, i = _period_of(period, _civil_us(zone, now_us))
    first = d
    for _ in range(2):
        d, _ = _period_of(period, _civil_us(zone, _midnight(zone, d) * 1_000_000 - 1))
        i -= 1
    at = _midnight(zone, d) * 1_000_000
    out = f"{spec}={i}:{at}:"
    runs: list[list[int]] = []
    for _ in range(2 + 1 + _AHEAD[period]):
        d = _next(period, d)
        e = _midnight(zone, d) * 1_000_000
        if runs and runs[-1][0] == e - at:
            runs[-1][1] += 1
        else:
            runs.append([e - at, 1])
        at = e
    out += ",".join(f"{l}*{k}" for l, k in runs)
    start = _midnight(zone, first) * 1_000_000
    end = _midnight(zone, _next(period, first)) * 1_000_000
    with _cal_lock:
        if len(_cal_cache) > 256:
            _cal_cache.clear()
        _cal_cache[spec] = (start, end, out)
    return out


# The calendars of stored limits that a script asked for (PACER_CALENDAR: a
# stored calendar window the call's policy does not have): every call of
# this process carries their tables from then on, as Go's Limiter does.
_learned: dict[str, tuple[str, zoneinfo.ZoneInfo]] = {}


def learn_calendar(spec: str) -> None:
    """Notes a calendar "<period>:<zone>" a script asked for."""
    period, _, zone = spec.partition(":")
    try:
        z = _zone(zone)
    except ValueError:
        return
    if period in PERIODS and len(_learned) < 64:
        with _cal_lock:
            _learned[spec] = (period, z)


def forget_calendars() -> None:
    """Forgets the calendars learned (tests)."""
    with _cal_lock:
        _learned.clear()


def calendar_arg(policy: "Policy | None", now_us: int | None) -> str:
    """ARGV[2]'s "c" part for the policy's calendar windows and the
    calendars learned ("" if none)."""
    tables: dict[str, str] = {}
    now = time.time_ns() // 1000 if now_us is None else now_us
    for b in policy.bands if policy is not None else ():
        if isinstance(b, Window) and b.calendar is not None and b.spec not in tables:
            tables[b.spec] = calendar_table(b.calendar, b.tz, now)  # type: ignore[arg-type,index]
    with _cal_lock:
        learned = list(_learned.items())
    for spec, (period, z) in learned:
        if spec not in tables:
            tables[spec] = calendar_table(period, z, now)
    if not tables:
        return ""
    return "c" + ";".join(tables.values()) + " "


Band = Union[Bucket, Window]


@dataclass(frozen=True)
class Policy:
    """Bands, each charging one unit of cost ("Common arguments"). The units
    are the bands' in order of first use unless given."""

    bands: tuple[Band, ...]
    units: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        bands = tuple(self.bands)
        if not bands:
            raise ValueError("pacer: a policy has at least one band")
        for b in bands:
            if not isinstance(b, (Bucket, Window)):
                raise TypeError(f"pacer: {b!r} is not a Bucket or a Window")
        names = [b.name for b in bands]
        if len(set(names)) != len(names):
            raise ValueError(f"pacer: band names repeat: {names}")
        units = tuple(self.units) or tuple(dict.fromkeys(b.unit for b in bands))
        for u in units:
            _name("a unit", u)
        for b in bands:
            if b.unit not in units:
                raise ValueError(f"pacer: band {b.name} charges unit {b.unit}, not among {units}")
        object.__setattr__(self, "bands", bands)
        object.__setattr__(self, "units", units)

    def stored_text(self) -> str:
        """The policy in the stored limit's form without its mode, each
        band's unit by name: what a heartbeat reports ("Heartbeat")."""
        out = [str(len(self.bands))]
        for b in self.bands:
            out += [b.name, b.unit] + b.args(1)[2:]
        return " ".join(out)

    def arg(self) -> str | bytes:
        """ARGV[3], the policy in one argument ("Common arguments"): a
        Limit (one bucket named permits charging the one unit permits) as
        b"L" and its rate and burst, little-endian doubles; any other as
        text: the number of units, their names, k, then the bands."""
        b = self.bands[0]
        if self.units == ("permits",) and len(self.bands) == 1 and isinstance(b, Bucket) and b.name == "permits":
            return b"L" + pystruct.pack("<dd", float(b.rate), float(b.burst))
        out = [str(len(self.units)), *self.units, str(len(self.bands))]
        for b in self.bands:
            out += b.args(self.units.index(b.unit) + 1)
        return " ".join(out)

    def costs(self, cost: float | Mapping[str, float]) -> list[float]:
        """A request's costs per unit, in the units' order: a number for a
        policy of one unit, else a mapping (units left out cost 0)."""
        if isinstance(cost, Mapping):
            for u in cost:
                if u not in self.units:
                    raise ValueError(f"pacer: cost of unit {u!r}, which the policy does not have {self.units}")
            out = [cost.get(u, 0) for u in self.units]
        elif len(self.units) == 1:
            out = [cost]
        else:
            raise ValueError(f"pacer: a policy of units {self.units} takes a cost per unit (a mapping)")
        for c in out:
            if _finite("a cost", c) < 0:
                raise ValueError(f"pacer: a cost must be >= 0, not {c!r}")
        return [float(c) for c in out]


def Limit(rate: float, burst: int = 1) -> Policy:
    """One bucket named permits: ``Limit(rate=500, burst=1)``."""
    return Policy((Bucket("permits", rate, burst),))


# ---------------------------------------------------------------- Arguments


def env_arg(share: str, policy: Policy | None, now_us: int | None = None, now_ns: int = 0, fmt: int = 2,
            lost: str = "") -> str:
    """ARGV[2], the call's environment ("Common arguments"): "1" in the
    common case (server time, format 3, the whole limit); else the client
    clock "t<now_us>:<now_ns> " (now_us None: Redis's TIME), the format to
    write ("f1 ", "f2 "; nothing for 3), a lost key's horizon (lost:
    "!<h2_us>:<seq>", see lost_horizon), the calendar tables of the
    policy's calendar windows and of those learned, then the share."""
    if fmt not in FORMATS:
        raise ValueError(f"pacer: a state format is 1, 2 or 3, not {fmt!r}")
    head = "" if now_us is None else f"t{now_us}:{now_ns} "
    if fmt != 3:
        head += f"f{fmt} "
    if lost:
        head += lost + " "
    return head + calendar_arg(policy, now_us) + share


def common_args(share: str, policy: Policy | None, now_us: int | None = None, now_ns: int = 0,
                fmt: int = 2, lost: str = "", deadline_ms: int | None = None) -> list[str | bytes]:
    """"Common arguments": ARGV[1] the deadline (Unix ms on the server's
    clock, after which the script changes nothing and answers PACER_STALE;
    None: none), ARGV[2] the environment (env_arg: now, None for Redis's
    TIME; the format to write; a lost key's horizon; the share) and ARGV[3]
    the policy (None: "", the state's records alone)."""
    return ["" if deadline_ms is None else str(deadline_ms), env_arg(share, policy, now_us, now_ns, fmt, lost),
            policy.arg() if policy is not None else ""]


def requests_arg(requests: Sequence[tuple[int, Sequence[float]]], short: bool = True) -> str | bytes:
    """Reserve's requests ("Reserve"): "" for one request of cost 1 on
    every unit with no maximum wait (unless not short); "0" for none; else
    per request its maximum wait (integer µs, -1: none) and its costs,
    little-endian doubles."""
    if not requests:
        return "0"
    for max_wait_us, costs in requests:
        if isinstance(max_wait_us, bool) or not isinstance(max_wait_us, int) or max_wait_us < -1:
            raise ValueError(f"pacer: a maximum wait is -1 or a whole number of µs >= 0, not {max_wait_us!r}")
        for c in costs:
            if _finite("a cost", c) < 0:
                raise ValueError(f"pacer: a cost must be >= 0, not {c!r}")
    if short and len(requests) == 1 and requests[0][0] == -1 and all(c == 1 for c in requests[0][1]):
        return ""
    return b"".join(pystruct.pack(f"<{1 + len(costs)}d", float(w), *map(float, costs)) for w, costs in requests)


def reserve_args(common: list[str | bytes], floor: str, requests: Sequence[tuple[int, Sequence[float]]],
                 short: bool = True) -> list[str | bytes]:
    """Reserve's arguments: the common ones, then its own, the floor and
    the requests (requests_arg), both left out when neither says anything
    (no floor, one plain request: the common call). Not short: a plain
    request written out as its doubles (the scripts take both)."""
    reqs = requests_arg(requests, short)
    if floor == "" and reqs == "":
        return list(common)
    return list(common) + [floor, reqs]


def adjust_args(common: list[str | bytes], op: str, slot_ns: int, seq: int, costs: Sequence[float],
                actual: Sequence[float] | None = None) -> list[str | bytes]:
    """Adjust's ("Adjust"): cancel, or settle with the actual costs; op
    "cancel@" or "settle@" when the reservation was made at common's share
    (its units come back at that share's spacing, else at the whole
    rate's)."""
    out = list(common) + [op, str(slot_ns // 1000), str(slot_ns % 1000), str(seq)] + [fmt_num(c) for c in costs]
    if op in ("settle", "settle@"):
        if actual is None:
            raise ValueError("pacer: settle takes the actual costs")
        out += [fmt_num(c) for c in actual]
    return out


def lost_horizon(horizon_ns: int, now_ns: int, seq: int) -> str:
    """A lost key's horizon for ARGV[2] ("Reserve"): "!<h2_us>:<seq>", the
    slots granted on the key up to horizon_ns (server clock), applied only
    if Redis lost the key (no state, or one numbered before seq)."""
    return f"!{(horizon_ns - now_ns + 999) // 1000}:{seq}"


# ---------------------------------------------------------------- Replies


def slot_ns(now_us: int, now_ns: int, wait_ns: int) -> int:
    """A reservation's slot, Unix ns on the clock the script used ("Reserve")."""
    return now_us * 1000 + now_ns + wait_ns


@dataclass(frozen=True)
class Grant:
    wait_ns: int
    seq: int  # > 0, or a refusal: 0 over the maximum wait, -1 queue too long, -2 never at this share, -3 deferred
    slot_ns: int
    band: str  # what set the slot: a band's name, "~p" a pause, "~" nothing


@dataclass(frozen=True)
class ReserveReply:
    now_ns: int  # Unix ns, the script's clock
    grants: list[Grant]
    state: str
    stored: str


def decode_reserve(v: Reply | bytes) -> ReserveReply:
    """Reserve's reply, one string of bytes ("Reserve"): "<I7HI4" now_us,
    now_ns and m; "<i8i8" wait_ns and seq per request; the state and the
    stored limit, each after its "<I4" length; then to the end the binding
    bands, one word per request."""
    if not isinstance(v, (str, bytes)):
        raise PacerError(f"PACER_REPLY Reserve replied {v!r}")
    b = to_bytes(v)

    def bad(why: str) -> PacerError:
        return PacerError(f"PACER_REPLY Reserve replied {b!r}: {why}")

    if len(b) < 13:
        raise bad("shorter than its head")
    now_us, now_ns = int.from_bytes(b[:7], "little"), int.from_bytes(b[7:9], "little")
    m, pos = int.from_bytes(b[9:13], "little"), 13
    if len(b) < pos + 16 * m:
        raise bad(f"{m} requests do not fit")
    pairs = []
    for _ in range(m):
        pairs.append(pystruct.unpack_from("<qq", b, pos))
        pos += 16
    strs = []
    for _ in range(2):
        if len(b) < pos + 4:
            raise bad("cut short")
        n = int.from_bytes(b[pos:pos + 4], "little")
        if len(b) < pos + 4 + n:
            raise bad("cut short")
        strs.append(b[pos + 4:pos + 4 + n].decode("utf-8", "surrogateescape"))
        pos += 4 + n
    bands = b[pos:].decode("utf-8", "surrogateescape").split()
    if len(bands) != m:
        raise bad(f"{len(bands)} binding bands for {m} requests")
    grants = [Grant(w, s, slot_ns(now_us, now_ns, w), bands[i]) for i, (w, s) in enumerate(pairs)]
    return ReserveReply(now_us * 1000 + now_ns, grants, strs[0], strs[1])


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat's 12-entry reply ("Heartbeat")."""

    now_ms: int
    live: int
    held: int
    rank: int
    n: int
    held_ranks: list[int]
    suspects: list[str]  # flat: id, client id, run id, ...
    held_n: int
    before: int
    ranks: list[int]  # taken: every rank below n but the reply's holes
    format: int  # the state format to write: 1, 2 or 3 (P{limiters}:format; absent: 2)
    held_sizes: list[int]  # the sizes the held members pace on, ascending (held_n the largest)


def heartbeat_args(member: str, mode: str, since_ms: int, n: int, rank: int | None,
                   times: Sequence[str] = HEARTBEAT_TIMES, reports: Sequence[tuple[str, str]] = (),
                   cid: int = 0, run: str = "", deadline_ms: int | None = None,
                   keep: tuple[int, int, Sequence[int]] | None = None) -> list[str]:
    """Heartbeat's ARGV: id, mode, "<since_ms> <cid> <n>[ <run>]" (cid: the
    client id of its presence connection and run the run id of the server
    that gave it; 0: none), the four times, the rank asked for (then, with
    keep = (keep_ms, n, ranks), " keep <keep_ms> <n> <ranks...>": the ranks
    of the fleet of n it remembers that are not back yet, kept for them),
    the deadline (Unix ms on the server's clock; None: none), then the
    reports: key and "<Unix ms> <policy>" pairs."""
    since = f"{since_ms} {cid} {n}" + (f" {run}" if cid and run else "")
    want = "" if rank is None else str(rank)
    if keep is not None and keep[2]:
        want += f" keep {keep[0]} {keep[1]} " + " ".join(str(r) for r in keep[2])
    out = [member, mode, since, *times, want,
           "" if deadline_ms is None else str(deadline_ms)]
    for key, report in reports:
        out += [key, report]
    return out


#: Reports per call of heartbeat.lua's "report" (Go's reportChunk).
REPORT_CHUNK = 20


def report_args(member: str, reports: Sequence[tuple[str, str]],
                times: Sequence[str] = HEARTBEAT_TIMES) -> list[str]:
    """ARGV of heartbeat.lua's "report": the reports alone (key and
    "<Unix ms> <policy>" pairs), sent after a heartbeat, REPORT_CHUNK at a
    time, so that no call holds Redis long; hold_ms and keep_ms as a
    heartbeat passes them."""
    out = [member, "report", "", "", times[1], "", times[3], "", ""]
    for key, report in reports:
        out += [key, report]
    return out


def decode_heartbeat(v: Reply) -> Heartbeat | None:
    """Heartbeat's reply; None for ``[now_ms]`` (a heartbeat that changed nothing)."""
    if not isinstance(v, list) or len(v) != 12:
        return None
    ints = lambda a: [int(x) for x in a]  # noqa: E731
    n, holes = int(v[4]), set(ints(v[9]))  # type: ignore
    return Heartbeat(int(v[0]), int(v[1]), int(v[2]), int(v[3]), n, ints(v[5]), v[6],  # type: ignore
                     int(v[7]), int(v[8]), [k for k in range(n) if k not in holes],
                     {"1": 1, "3": 3}.get(str(v[10]), 2), [x for x in ints(v[11]) if x > 0])  # type: ignore


# ---------------------------------------------------------------- The state

_TIME = re.compile(r"-?[0-9]+(\.[0-9]{3})?")
_DEC3 = re.compile(r"-?[0-9]+\.[0-9]{3}")
_DIGITS = re.compile(r"[0-9]+")
_INT = re.compile(r"-?[0-9]+")
_WINDOWS = re.compile(r"-|[A-Za-z0-9._-]+:-?[0-9]+(,[A-Za-z0-9._-]+:-?[0-9]+)*")  # a pause's windows ("~w")
_UNITS = re.compile(r"[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?")
_T = re.compile(r"[0-9]{2,}")


@dataclass(frozen=True)
class Record:
    name: str
    window: bool = False
    z: float = 0.0  # a bucket's: ns after t
    e: float = 0.0
    w: int = 0  # a window's
    u: float = 0.0
    fields: tuple[str, str] = ("", "")  # a reserved record's ("~p", "~w", "~s", "~l", "~e") two fields, as written


@dataclass(frozen=True)
class State:
    """A key's state ("The state"), in any of the three formats; times in
    ns after ``t`` (Unix µs)."""

    format: int
    t: int
    x: int  # the expiry after t: ms (formats 2 and 3), ns (format 1)
    seq: int
    pause: float
    stored: bool
    recs: tuple[Record, ...]

    @property
    def pause_end_ns(self) -> int:
        """The pause's end, Unix ns; before ``t`` when none is in force."""
        return self.t * 1000 + math.ceil(self.pause)

    @property
    def last_event_ns(self) -> int:
        """The latest slot the state records (its buckets' last events),
        Unix ns; 0 if none. A slot granted ahead out of the queue's order
        (a fair turn) lies beyond the queue's end: the local fallback
        starts no earlier (docs/protocol.md, "Shares and the local
        fallback")."""
        es = [r.e for r in self.recs if not r.window and not r.name.startswith("~")]
        e = max(es, default=0.0)
        return self.t * 1000 + math.ceil(e) if e > 0 else 0

    @property
    def queue_end_ns(self) -> int:
        """The latest time at which a bucket's balance is zero, Unix ns."""
        zs = [r.z for r in self.recs if not r.window and not r.name.startswith("~")]
        return self.t * 1000 + math.ceil(max(zs, default=0.0))

    @property
    def resumed(self) -> tuple[int, int, int] | None:
        """The resume the state records ("~s q:r d": reservations q+1 to r
        moved d ns earlier; lua/resume.lua), None if none."""
        for r in self.recs:
            if r.name == "~s":
                q, last = r.fields[0].split(":")
                return int(q), int(last), int(r.fields[1])
        return None


def parse_state(text: str | bytes) -> State:
    """Reads a state by "The state"'s grammar (formats 1 and 2) and format
    3's table, strictly; ValueError if it is not one. ``text`` is the
    state's bytes, or a str as ``normalize`` read them."""
    raw = to_bytes(text)

    def bad(why: str) -> ValueError:
        return ValueError(f"pacer: state {raw!r}: {why}")

    if raw and raw[0] >= 0xA0:
        return _parse_state3(raw, bad)
    try:
        f = raw.decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise bad("not text") from None
    full = lambda r, s: r.fullmatch(s) is not None  # noqa: E731
    time_re = _TIME
    if f[0] == "1":
        time_re = _DEC3
        if len(f) < 6 or not full(_DIGITS, f[1]) or not full(_INT, f[2]) or not full(_DIGITS, f[3]) \
                or not full(_DEC3, f[4]) or f[5] not in ("0", "1"):
            raise bad("not format 1's head")
        fmt, t, x, seq, pause, stored, rest = 1, int(f[1]), int(f[2]), int(f[3]), float(f[4]), f[5] == "1", f[6:]
    else:
        if len(f) < 4 or not full(_T, f[0]) or not full(_DIGITS, f[1]) or not full(_DIGITS, f[2]):
            raise bad("not format 2's head")
        stored = f[3].startswith("c")
        p = f[3][1:] if stored else f[3]
        if not full(_TIME, p):
            raise bad("p is not [c]time")
        fmt, t, x, seq, pause, rest = 2, int(f[0]), int(f[1]), int(f[2]), float(p), f[4:]
        if len(rest) == 2:
            if not full(_TIME, rest[0]) or not full(_TIME, rest[1]):
                raise bad("a Limit's z e are not times")
            return State(fmt, t, x, seq, pause, stored, (Record("permits", z=float(rest[0]), e=float(rest[1])),))
    return State(fmt, t, x, seq, pause, stored, _records(rest, fmt, time_re, bad))


def _parse_state3(raw: bytes, bad: Callable[[str], ValueError]) -> State:
    """Format 3 ("The state"'s table): the first byte a form, its lowest
    bit the flag, then the form's fields, little-endian."""
    stored, form, n = bool(raw[0] & 1), raw[0] & ~1, len(raw)
    le = lambda a, b: int.from_bytes(raw[a:b], "little")  # noqa: E731
    sle = lambda a, b: int.from_bytes(raw[a:b], "little", signed=True)  # noqa: E731
    t = le(1, 8)
    if form == 0xA0 and n == 11:
        return State(3, t, le(8, 10), raw[10], 0.0, stored, (Record("permits"),))
    if form == 0xB0 and n == 28:
        return State(3, t, le(8, 12), le(12, 16), 0.0, stored, (Record("permits", z=float(sle(16, 22)), e=float(sle(22, 28))),))
    if form == 0xC0 and n == 34:
        z, e = pystruct.unpack_from("<dd", raw, 18)
        if not (math.isfinite(z) and math.isfinite(e)):
            raise bad("a Limit's z e are not finite")
        return State(3, t, le(8, 12), le(12, 18), 0.0, stored, (Record("permits", z=z, e=e),))
    if form == 0xD0 and n >= 28:
        (pause,) = pystruct.unpack_from("<d", raw, 20)
        if not math.isfinite(pause):
            raise bad("p is not finite")
        x, seq, rest = le(8, 14), le(14, 20), raw[28:]
        if not rest:
            return State(3, t, x, seq, pause, stored, ())
        try:
            text = rest.decode("ascii")
        except UnicodeDecodeError:
            raise bad("the records are not text") from None
        if not text.startswith(" "):
            raise bad("the general form's records do not start with a space")
        f = text[1:].split(" ")
        if len(f) == 2:
            if not _TIME.fullmatch(f[0]) or not _TIME.fullmatch(f[1]):
                raise bad("a Limit's z e are not times")
            return State(3, t, x, seq, pause, stored, (Record("permits", z=float(f[0]), e=float(f[1])),))
        return State(3, t, x, seq, pause, stored, _records(f, 2, _TIME, bad))
    raise bad("not a form of format 3")


def _records(rest: list[str], fmt: int, time_re: re.Pattern[str], bad: Callable[[str], ValueError]) -> tuple[Record, ...]:
    """A state's records (formats 1 and 2, and format 3's general form,
    whose records are format 2's)."""
    full = lambda r, s: r.fullmatch(s) is not None  # noqa: E731
    if len(rest) % 3:
        raise bad("records are not of three fields")
    recs = []
    for i in range(0, len(rest), 3):
        name, f1, f2 = rest[i:i + 3]
        if name == "~p":
            if not full(_DIGITS, f1) or not full(time_re, f2):
                raise bad("bad ~p record")
            recs.append(Record(name, fields=(f1, f2)))
        elif name == "~w":
            if not full(_DIGITS, f1) or not full(_WINDOWS, f2):
                raise bad("bad ~w record")
            recs.append(Record(name, fields=(f1, f2)))
        elif name == "~s":
            if not re.fullmatch(r"[0-9]+:[0-9]+", f1) or not full(_DIGITS, f2):
                raise bad("bad ~s record")
            recs.append(Record(name, fields=(f1, f2)))
        elif name == "~l":
            if not full(_DIGITS, f1) or not full(_DIGITS, f2):
                raise bad("bad ~l record")
            recs.append(Record(name, fields=(f1, f2)))
        elif name == "~e":
            if f1.startswith("~") or not full(time_re, f2):
                raise bad("bad ~e record")
            recs.append(Record(name, fields=(f1, f2)))
        elif name.startswith("~"):
            raise bad("unknown reserved record " + name)
        elif fmt == 2 and f1.startswith("w"):
            if not full(_INT, f1[1:]) or not full(_UNITS, f2):
                raise bad("bad window record " + name)
            recs.append(Record(name, window=True, w=int(f1[1:]), u=float(f2)))
        elif fmt == 1 and "." not in f1:
            if not full(_INT, f1) or not full(_UNITS, f2):
                raise bad("bad window record " + name)
            recs.append(Record(name, window=True, w=int(f1), u=float(f2)))
        else:
            if not full(time_re, f1) or not full(time_re, f2):
                raise bad("bad bucket record " + name)
            recs.append(Record(name, z=float(f1), e=float(f2)))
    return tuple(recs)
