"""pacer's Redis protocol, as docs/protocol.md gives it: key names, the
scripts, their arguments and replies, and the state's grammar.

Nothing here paces: every pacing rule is in the Lua scripts (lua/*.lua),
which this module loads and calls. Each function names the section of
docs/protocol.md it follows.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence, Union

import redis

# The scripts, as the concatenation of lua/ files ("Scripts"; a test holds
# this table to the page's).
SCRIPT_FILES: dict[str, tuple[str, ...]] = {
    "Reserve": ("fast.lua", "core.lua", "reserve.lua"),
    "Fair": ("core.lua", "fair.lua", "reserve.lua"),
    "Adjust": ("core.lua", "adjust.lua"),
    "Pause": ("core.lua", "note.lua", "pause.lua"),
    "Resume": ("core.lua", "note.lua", "resume.lua"),
    "Peek": ("core.lua", "peek.lua"),
    "Claim": ("core.lua", "claim.lua"),
    "Hold": ("core.lua", "hold.lua"),
    "Lease": ("core.lua", "lease.lua"),
    "Rewrite": ("core.lua", "rewrite.lua"),
    "Heartbeat": ("heartbeat.lua",),
    "Admin": ("admin.lua",),
    "Restore": ("restore.lua",),
    "Adaptive": ("adaptive.lua",),
    "Quota": ("quota.lua",),
}

#: Go's defaults for Heartbeat's live_ms, hold_ms, suspect_ms and keep_ms.
HEARTBEAT_TIMES = ("2000", "60000", "1100", "180000")

#: The fleet's keys under the prefix ("Keys", "Heartbeat"), in Heartbeat's order.
FLEET_SUFFIXES = ("", ":info", ":policies", ":ids", ":checked", ":policies:at", ":format", ":writes")

Reply = Union[int, str, None, list["Reply"]]


class PacerError(Exception):
    """A script's error reply ("Errors"): ``code`` is its first word."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = message.split(" ", 1)[0]


class PacerArgumentError(PacerError, ValueError):
    """PACER_ARG, PACER_EXCEEDS or PACER_CONFIG: the call was malformed and
    changed nothing."""


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
    if msg.split(" ", 1)[0] in ("PACER_ARG", "PACER_EXCEEDS", "PACER_CONFIG"):
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
    """Heartbeat's eight keys ("Heartbeat")."""
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

    def run(self, client: Any, name: str, keys: Sequence[str], args: Sequence[str]) -> Reply:
        """Runs script name with EVALSHA, loading it on NOSCRIPT ("Scripts").
        A script's error reply is raised as a PacerError."""
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
    """A reply with bytes decoded: int, str, None or lists of them."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, (list, tuple)):
        return [normalize(x) for x in v]
    return v


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
    (0: Unix time's, so a day is a UTC day)."""

    name: str
    n: float
    length_us: int
    origin_us: int = 0
    unit: str = "permits"

    def __post_init__(self) -> None:
        _name("a band's name", self.name)
        if self.name.startswith("~"):
            raise ValueError(f"pacer: a band's name {self.name!r} starts with ~ (reserved)")
        _name("a unit", self.unit)
        if _finite("a window's N", self.n) < 1:
            raise ValueError(f"pacer: a window's N must be >= 1, not {self.n!r}")
        for what, v in (("length", self.length_us), ("origin", self.origin_us)):
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"pacer: a window's {what} is whole µs, not {v!r}")
        if self.length_us <= 0 or not 0 <= self.origin_us < self.length_us:
            raise ValueError("pacer: a window's length must be > 0 µs and its origin within it")

    def args(self, unit_index: int) -> list[str]:
        return [self.name, str(unit_index), "w", fmt_num(self.n), f"{self.length_us}:{self.origin_us}"]


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

    def args(self) -> list[str]:
        """ARGV[4..]: the units, k and the bands."""
        out = [" ".join(self.units), str(len(self.bands))]
        for b in self.bands:
            out += b.args(self.units.index(b.unit) + 1)
        return out

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


def share_arg(fmt: int, share: str) -> str:
    """ARGV[3]: the format to write ("f1 " for format 1) and the share."""
    return ("f1 " if fmt == 1 else "") + share


def common_args(share: str, policy: Policy | None, now_us: int | None = None, now_ns: int = 0,
                fmt: int = 2) -> list[str]:
    """"Common arguments": now (None: Redis's TIME), ARGV[3] and the policy
    (None: k = 0, the state's records alone)."""
    head = ["" if now_us is None else str(now_us), str(now_ns), share_arg(fmt, share)]
    return head + (policy.args() if policy is not None else ["permits", "0"])


def reserve_args(common: list[str], floor: str, requests: Sequence[tuple[int, Sequence[float]]]) -> list[str]:
    """Reserve's own arguments after the common ones: the floor, m, then
    per request its maximum wait (µs, -1: none) and costs ("Reserve")."""
    out = common + [floor, str(len(requests))]
    for max_wait_us, costs in requests:
        out.append(str(max_wait_us))
        out += [fmt_num(c) for c in costs]
    return out


def adjust_args(common: list[str], op: str, slot_ns: int, seq: int, costs: Sequence[float],
                actual: Sequence[float] | None = None) -> list[str]:
    """Adjust's ("Adjust"): cancel, or settle with the actual costs."""
    out = common + [op, str(slot_ns // 1000), str(slot_ns % 1000), str(seq)] + [fmt_num(c) for c in costs]
    if op == "settle":
        if actual is None:
            raise ValueError("pacer: settle takes the actual costs")
        out += [fmt_num(c) for c in actual]
    return out


def lost_floor(horizon_ns: int, now_ns: int, seq: int) -> str:
    """Reserve's floor for a key Redis lost: "!<h2_us>:<seq>"."""
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


def decode_reserve(v: Reply) -> ReserveReply:
    """Reserve's reply: now_us, now_ns, wait_ns and seq per request, the
    state, the stored limit, the binding bands ("Reserve")."""
    if not isinstance(v, list) or len(v) < 5 or len(v) % 2 != 1:
        raise PacerError(f"PACER_REPLY Reserve replied {v!r}")
    now_us, now_ns = int(v[0]), int(v[1])  # type: ignore[arg-type]
    bands = str(v[-1]).split()
    pairs = v[2:-3]
    grants = []
    for i in range(0, len(pairs), 2):
        w, s = int(pairs[i]), int(pairs[i + 1])  # type: ignore[arg-type]
        grants.append(Grant(w, s, slot_ns(now_us, now_ns, w), bands[i // 2] if i // 2 < len(bands) else "~"))
    return ReserveReply(now_us * 1000 + now_ns, grants, str(v[-3] or ""), str(v[-2] or ""))


@dataclass(frozen=True)
class Heartbeat:
    """Heartbeat's 11-entry reply ("Heartbeat")."""

    now_ms: int
    live: int
    held: int
    rank: int
    n: int
    held_ranks: list[int]
    suspects: list[str]  # flat: id, client id, run id, ...
    held_n: int
    before: int
    ranks: list[int]
    format: int


def heartbeat_args(member: str, mode: str, since_ms: int, n: int, rank: int | None,
                   times: Sequence[str] = HEARTBEAT_TIMES, reports: Sequence[tuple[str, str]] = (),
                   cid: int = 0, run: str = "", deadline_ms: int | None = None) -> list[str]:
    """Heartbeat's ARGV: id, mode, "<since_ms> <cid> <n>[ <run>]" (cid: the
    client id of its presence connection and run the run id of the server
    that gave it; 0: none), the four times, the rank asked for, the
    deadline (Unix ms on the server's clock; None: none), then the reports:
    key and "<Unix ms> <policy>" pairs."""
    since = f"{since_ms} {cid} {n}" + (f" {run}" if cid and run else "")
    out = [member, mode, since, *times, "" if rank is None else str(rank),
           "" if deadline_ms is None else str(deadline_ms)]
    for key, report in reports:
        out += [key, report]
    return out


def decode_heartbeat(v: Reply) -> Heartbeat | None:
    """Heartbeat's reply; None for ``[now_ms]`` (a heartbeat that changed nothing)."""
    if not isinstance(v, list) or len(v) != 11:
        return None
    ints = lambda a: [int(x) for x in a]  # noqa: E731
    return Heartbeat(int(v[0]), int(v[1]), int(v[2]), int(v[3]), int(v[4]), ints(v[5]), v[6],  # type: ignore
                     int(v[7]), int(v[8]), ints(v[9]), 2 if v[10] == "2" else 1)  # type: ignore


# ---------------------------------------------------------------- The state

_TIME = re.compile(r"-?[0-9]+(\.[0-9]{3})?")
_DEC3 = re.compile(r"-?[0-9]+\.[0-9]{3}")
_DIGITS = re.compile(r"[0-9]+")
_INT = re.compile(r"-?[0-9]+")
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


@dataclass(frozen=True)
class State:
    """A key's state ("The state"); times in ns after ``t`` (Unix µs)."""

    format: int
    t: int
    x: int
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


def parse_state(text: str) -> State:
    """Reads a state by "The state"'s grammar, strictly; ValueError if it is not one."""
    f = text.split(" ")

    def bad(why: str) -> ValueError:
        return ValueError(f"pacer: state {text!r}: {why}")

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
    if len(rest) % 3:
        raise bad("records are not of three fields")
    recs = []
    for i in range(0, len(rest), 3):
        name, f1, f2 = rest[i:i + 3]
        if name == "~p":
            if not full(_DIGITS, f1) or not full(time_re, f2):
                raise bad("bad ~p record")
            recs.append(Record(name))
        elif name == "~s":
            if not re.fullmatch(r"[0-9]+:[0-9]+", f1) or not full(_DIGITS, f2):
                raise bad("bad ~s record")
            recs.append(Record(name))
        elif name == "~l":
            if not full(_DIGITS, f1) or not full(_DIGITS, f2):
                raise bad("bad ~l record")
            recs.append(Record(name))
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
    return State(fmt, t, x, seq, pause, stored, tuple(recs))
