"""The Limiter: reservations on Redis through pacer's scripts, a member of
the fleet (heartbeats, shares), and the local fallback (the same scripts,
in-process, at this process's share) while Redis is unavailable."""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

import redis

from . import localstore, protocol
from .protocol import PacerError, Policy

log = logging.getLogger("pacer")

#: The errors that mean Redis is unavailable (docs/protocol.md, Errors:
#: the transient ones): the Limiter paces locally meanwhile.
UNAVAILABLE = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.ReadOnlyError,
    protocol.TransientError,  # OOM, BUSY, TRYAGAIN...
)


def _no_reply(e: BaseException) -> bool:
    """Whether e is a call Redis did not answer (the network, a Redis gone
    or frozen), not a reply of Redis's refusing it (out of memory, loading,
    read-only): Go's noReply."""
    return isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)) \
        and not isinstance(e, redis.exceptions.BusyLoadingError)


#: Reserve's refusals (seq): the queue would be over 30 years long; a band
#: can never take the cost at this share (a window's N_k, or the share's
#: burst of a bucket, below it).
_QUEUE_TOO_LONG, _NEVER = -1, -2


class Unavailable(Exception):
    """Redis is unavailable and the Limiter cannot do what was asked
    locally (a pause without lupa). A caller of reserve or wait never gets
    it: one with a maximum wait gets WaitTooLong naming OUTAGE_BAND."""


#: The binding band of a WaitTooLong raised while Redis is unavailable and
#: this Limiter has no share to pace on locally (no lupa, or it does not
#: know its share of the fleet): its maximum wait passed before Redis
#: answered. Go's reserve.OutageBinding.
OUTAGE_BAND = "(outage)"


class WaitTooLong(Exception):
    """The reservation's wait would exceed the maximum wait asked for;
    ``wait`` (seconds) says how long it would have been. Nothing changed."""

    def __init__(self, wait: float, band: str) -> None:
        super().__init__(f"pacer: the wait would be {wait:.3f} s (band {band})")
        self.wait = wait
        self.band = band


class Refused(Exception):
    """A reservation Reserve refused: its queue would be over 30 years long.
    (A band that can never take the cost at this share makes the call wait
    for Redis or a share instead, within its maximum wait.)"""


@dataclass
class Reservation:
    """A slot on key: ``slot_ns`` is Unix ns on the clock the scripts used
    (Redis's, or the local store's estimate of it); ``band`` names what set
    it ("~p" a pause, "~" nothing)."""

    key: str
    policy: Policy
    costs: list[float]
    slot_ns: int
    seq: int
    band: str
    local: bool
    deadline: float  # time.monotonic() at the slot
    limiter: "Limiter" = field(repr=False)
    shifted: int = field(default=0, repr=False)  # the last resume that moved it (its "~s" r)
    epoch: int = field(default=0, repr=False)  # the key's epoch when Redis granted it (_Key.epoch)
    # How much later than the clock estimate says Redis granted it the slot
    # was placed, in seconds: the reply arrived late (its process was off
    # the CPU). sleep counts it as lateness, as Go's Limiter does.
    placed_late: float = field(default=0.0, repr=False)
    # A slot the local fallback granted: its number among the key's local
    # grants (_Key.grants; 0: Redis granted it), and whether the handback
    # told its sleeper to take a slot on Redis instead (back_move).
    local_id: int = field(default=0, repr=False)
    back_move: bool = field(default=False, repr=False)
    # The share (ARGV[2]'s) the slot was granted at: an adjust at the same
    # share gets its units back at that share's spacing ("settle@"), any
    # other at the whole rate's (adjust.lua), as Go's Reservation.share.
    share: str = field(default="", repr=False)

    def delay(self) -> float:
        """Seconds until the slot (0 once it has passed)."""
        return max(0.0, self.deadline - time.monotonic())

    def cancel(self) -> bool:
        return self.limiter.cancel(self)

    def settle(self, actual: float | Mapping[str, float]) -> bool:
        return self.limiter.settle(self, actual)


@dataclass
class _Key:
    """What this Limiter knows of one key."""

    policy: Policy | None = None
    state: str = ""  # the state Redis last showed
    stored: str = ""  # the stored limit Redis last showed
    seen_ns: int = 0  # when (server clock)
    seq: int = 0  # the last reservation number Redis showed
    seen_t: int = 0  # the write time of the state Redis last showed (Unix µs)
    granted_ns: int = 0  # the latest slot Redis granted this Limiter
    # The states Redis was found to have lost (none, or one numbered before
    # the one seen and written before this Limiter's slots): a reservation
    # carries the epoch Redis granted it in, and a sleeper of an earlier
    # one takes a fresh slot (Go's keyState.epoch). lost: the state seen is
    # such a state, lost_seq its number, so that one loss counts once.
    epoch: int = 0
    lost: bool = False
    lost_seq: int = 0
    # The local fallback's part: whether the store holds the key, what the
    # store granted (latest slot), the window units it started with, a
    # pause made locally.
    local: bool = False
    local_last_ns: int = 0
    local_pause_ns: int = 0
    # The store's grants, by local number, and the latest slot of those
    # dropped since (past); the sleepers among them before their last
    # check (asleep). At the handback, the sleepers take slots on Redis
    # instead, and Redis's floor is the latest of the others (Go's
    # localKey.grants, past and asleep; MovedBack).
    grants: dict[int, int] = field(default_factory=dict)
    past: int = 0
    prune_at: int = 256  # grants kept before the next pruning (doubles: amortized)
    asleep: dict[int, "Reservation"] = field(default_factory=dict)
    # The end of the latest pause this Limiter made on Redis (server
    # clock): honoured by its sleepers when Redis cannot be read.
    own_pause_ns: int = 0
    own_pause_seq: int = 0  # the key's last reservation number then
    seeded: dict[str, tuple[int, float]] = field(default_factory=dict)
    # Whether the store's state has closed the window current when the key
    # was first reserved on locally (Reserve's floor "*": what the others
    # took of it on Redis is unknown, up to all of it). Its units are
    # Redis's: seeded after it.
    shut: bool = False
    # Units the store granted in windows its state no longer shows: it
    # keeps a band's latest window only, and a grant in a later one (a
    # local queue running into the next window) replaces one that may still
    # be current. The handback carries them while they may be: (band,
    # window, units, until), until the slot of the grant that replaced it,
    # by which the window has ended (Go's localKey.closed).
    closed: list[tuple[str, int, float, int]] = field(default_factory=list)
    # Adjustments of Redis's grants made while Redis was unavailable: op,
    # slot, seq, costs, actual, policy, and the share the grant was made at
    # (Reservation.share: the handback sends "@" when it is the share then).
    pending: list[tuple[str, int, int, list[float], list[float] | None, Policy, str]] = field(default_factory=list)
    # The policy's report to the fleet ("Heartbeat"): when last sent, and
    # when last used (time.monotonic()).
    reported: Policy | None = None
    report_sent: float = -math.inf
    report_used: float = 0.0


class Limiter:
    """Paces calls on keys shared by a fleet of processes (Go's and
    Python's) through pacer's Redis scripts.

    ``client`` is a redis.Redis (give it socket timeouts: a call that
    hangs holds its caller). ``prefix`` is the fleet's KeyPrefix. With
    ``heartbeat`` (the default) the Limiter joins the fleet: it heartbeats
    every ``heartbeat_interval`` seconds in a thread of its own, learns its
    share, and paces locally on it while Redis is unavailable (with lupa);
    without lupa, or before it knows the fleet (``fleet_size`` tells a
    size to assume until then), a caller that can wait waits for Redis.
    ``probe_interval`` is how often the fleet's members pacing locally
    probe Redis (Go's Options.ProbeInterval, 1 s by default): a Limiter
    started while Redis is unavailable learns the fleet only from a
    heartbeat 1.5 times that after its first one that succeeds, and stays
    off Redis until then (docs/protocol.md, "Shares and the local
    fallback"). ``close()`` (or ``with``) leaves the fleet and stops the
    thread.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "pacer:",
        lua_dir: str | None = None,
        heartbeat: bool = True,
        heartbeat_interval: float = 1.0,
        probe_interval: float = 1.0,
        fleet_size: int = 0,
        limiter_id: str | None = None,
        local_fallback: bool = True,
    ) -> None:
        if not isinstance(prefix, str) or "{" in prefix or "}" in prefix:
            raise ValueError("pacer: a prefix is a string without braces")
        if not (isinstance(heartbeat_interval, (int, float)) and math.isfinite(heartbeat_interval)
                and heartbeat_interval > 0):
            raise ValueError(f"pacer: heartbeat_interval {heartbeat_interval!r} is not a positive number of seconds")
        if isinstance(probe_interval, bool) or not (isinstance(probe_interval, (int, float))
                                                    and math.isfinite(probe_interval) and probe_interval > 0):
            raise ValueError(f"pacer: probe_interval {probe_interval!r} is not a positive number of seconds")
        if isinstance(fleet_size, bool) or not isinstance(fleet_size, int) or fleet_size < 0:
            raise ValueError(f"pacer: fleet_size {fleet_size!r} is not a whole number >= 0")
        self.redis = client
        self.prefix = prefix
        self.scripts = protocol.Scripts(lua_dir)
        self.id = limiter_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.interval = float(heartbeat_interval)
        self._lock = threading.RLock()
        # The fallback's lock: local grants and the handback, one at a time.
        self._handback_lock = threading.RLock()
        self._keys: dict[str, _Key] = {}
        # The state format to write on Redis ("Versions"): 2 until the
        # fleet's setting (its last heartbeat reply) says 1 or 3. The local
        # store's states are its own: it writes format 3.
        self._format = 2
        # The fleet ("Heartbeat"): n members, this one's rank, the held
        # ranks (they may pace locally: leave them their shares).
        self._learned = False
        self._n, self._rank, self._members = 1, 0, 1
        self._held: list[int] = []
        self._held_n, self._before = 0, 0
        self._held_sizes: list[int] = []
        self._ranks: list[int] = []
        self._hint = fleet_size
        self._doubt = False  # the last heartbeat failed
        # A view in doubt or stale is a guess: calls that take slots on
        # Redis wait for a heartbeat (_guessing) until two failed in a row
        # or _guess_wait passed since a call first found it (Go's
        # fleetView.guessing).
        self._fails = 0
        self._guess_since = 0.0
        self._guess_wait = 3 * self.interval + 2.0
        # The last heartbeat that told the fleet (time.monotonic(); None:
        # none): a view older than two intervals is stale (_stale).
        self._last_beat: float | None = None
        # After an outage, Redis (restarted empty) may list fewer members
        # than the fleet had: those not back yet may pace locally still.
        self._remembered, self._remembered_members, self._rank_before = 0, 0, 0
        self._remembered_also = 0  # the other size its share kept within then (_remember_fleet)
        self._remembered_ranks: list[int] = []  # the ranks Redis listed then
        self._back_at = 0.0
        # How long the fleet it knew rules its share once back, while
        # members are missing: until those alive could have probed back and
        # heartbeated (a probe, then a heartbeat), as Go's fleetView.remember.
        # It was the fleet's hold_ms (60 s): a view remembered from one
        # outage then set the share of the next, on a fleet that had grown
        # since (combination runner, seed 74).
        self._remember = max(3 * self.interval, 2 * float(probe_interval))
        # Back from an outage of its own, while fewer than a quarter of the
        # fleet's ranks are not held (the others not back yet), calls that
        # take slots on Redis wait for them, until _back_until at the most
        # (time.monotonic(); 0: not back): a slot on this rank's own
        # instants moves the key's queue past every other rank's (Go's
        # fleetView.sparse and backWait: the others probe back within a
        # probe interval, +25%, and are heard at their next heartbeats).
        self._back_until = 0.0
        self._back_wait = max(self._guess_wait, self._remember + self.interval)
        # Started while Redis was unavailable (born), it has never learned
        # the fleet. When it first reaches Redis, a Redis restarted empty
        # lists only the members back already; the others, still pacing
        # locally, probe within probe_interval (+25%). So it learns the
        # fleet only from a heartbeat at least _join after its first one
        # that succeeded (_join_until, time.monotonic(); 0: none yet), and
        # stays off Redis until then (Go's fleetView.born).
        self._born = False
        self._join = 1.5 * float(probe_interval)
        self._join_until = 0.0
        # When it started, and when its latest outage began (its heartbeat
        # failed, or it went local; 0: none), time.monotonic(): see _times.
        self._started = time.monotonic()
        self._outage = 0.0
        # Whether that outage began with a call Redis did not answer (Go's
        # health.silent; see _check_suspects).
        self._silent = False
        # The mode: on Redis, or local (Redis unavailable); since when.
        self._local = False
        self._since_ms = int(time.time() * 1000)
        # Heartbeats saying "redis" under way, and until when the last of
        # those that ended may have run on Redis (time.monotonic()); when
        # this Limiter last went local, and when a heartbeat saying "local"
        # first reached Redis since (0: none): see _local_slots_ready.
        self._beats_out = 0
        self._beat_until = 0.0
        self._local_at = 0.0
        self._told_at = 0.0
        self._local_share: str | None = None  # the share taken while local
        self._local_ids = 0  # the last number given to a local grant (Reservation.local_id)
        # Sleepers told by the handback to take a slot on Redis (MovedBack).
        self._moved_back = 0
        self._offset_ns = 0  # server clock - time.time_ns(), from the replies
        # The round trip of the reply that set _offset_ns: the estimate is
        # never ahead of Redis's clock, and behind it by at most that
        # (_clock_sample).
        self._offset_rtt = 0
        self._best_rtt = math.inf
        # How far away Redis is lately: the check's lead (_check_lead).
        self._low = _LowRTT()
        self._store: localstore.LocalStore | None = None
        self._fallback = local_fallback and localstore.AVAILABLE
        if local_fallback and not localstore.AVAILABLE:
            log.warning("pacer: lupa is not installed: while Redis is unavailable, callers wait for it")
        self._probed = 0.0
        # When the next heartbeat (the probe while local) is due, and when
        # the one under way began (0: none), time.monotonic(): a Limiter
        # far behind them was off the CPU (_probes_stalled).
        self._probe_due = time.monotonic() + self.interval
        self._probing = 0.0
        # A stall was seen (_probes_stalled, or a heartbeat begun far behind
        # _probe_due) and no heartbeat has answered since.
        self._stalled = False
        # The presence connection (docs/protocol.md, Heartbeat's cid): one
        # of its own, named pacer-<id>, kept open while the Limiter lives,
        # so that the fleet tells a process that exited (Redis closed it)
        # from one stalled or cut off. Used by the heartbeat thread only.
        self._presence: Any = None
        self._cid, self._run = 0, ""
        self._presence_denied = False
        self._presence_lock = threading.Lock()
        # After a stale reservation (_after_stale): whether a read of the
        # clock and a heartbeat are under way, and when (monotonic) the
        # last one began.
        self._stale_cv = threading.Condition(threading.Lock())
        self._stale_busy = False
        self._stale_read = -math.inf
        self._stop = threading.Event()
        # Wakes the heartbeat thread at once: the Limiter just went local
        # (_go_local), and the fleet must hear it.
        self._wake = threading.Event()
        # Held by the heartbeat under way (_beat): one at a time, as Go's
        # Limiter, which beats from one loop. Two at once, a failure sent
        # before the other's answer could arrive after it and switch a
        # Limiter just back to local pacing again.
        self._beat_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        if heartbeat:
            self._first_beat()
            with self._lock:
                if self._local and not self._learned:
                    self._born = True  # started while Redis was unavailable
            self._thread = threading.Thread(target=self._loop, name="pacer-heartbeat", daemon=True)
            self._thread.start()

    # -------------------------------------------------------------- public

    def reserve(self, key: str, policy: Policy, cost: float | Mapping[str, float] = 1,
                max_wait: float | None = None) -> Reservation:
        """Reserves a slot on key for a request of ``cost`` (a number for a
        policy of one unit, else unit -> amount). ``max_wait`` (seconds,
        None: no maximum): a slot further off is refused (WaitTooLong) and
        changes nothing. Bad input raises ValueError and changes nothing."""
        k = protocol.redis_key(self.prefix, key)
        if not isinstance(policy, Policy):
            raise TypeError(f"pacer: {policy!r} is not a Policy (pacer.Limit(rate, burst) is one)")
        costs = policy.costs(cost)
        if max_wait is not None and (isinstance(max_wait, bool) or not isinstance(max_wait, (int, float))
                                     or not math.isfinite(max_wait) or max_wait < 0):
            raise ValueError(f"pacer: max_wait {max_wait!r} is not None or a finite number >= 0")
        max_us = -1 if max_wait is None else int(max_wait * 1e6)
        give_up = None if max_wait is None else time.monotonic() + max_wait
        delay = 0.05
        stale = 0  # tries Redis ran past their deadlines
        while True:
            with self._lock:
                local = self._local
            r: Reservation | None = None
            try:
                if not local:
                    sent = time.monotonic()
                    try:
                        return self._reserve_redis(key, k, policy, costs, max_us)
                    except _NoShare:
                        pass
                    except PacerError as e:
                        if e.code != "PACER_STALE":
                            raise
                        # Run by Redis after its deadline (it stalled), and
                        # changed nothing: again, once a heartbeat has told
                        # the fleet as it is after the stall (Go's
                        # grantEither; TestStallRefreshesFleet). After
                        # _SLOW_TRIES such tries the caller waits for Redis,
                        # as for a share the client lacks, within its
                        # maximum wait: the fleet counts this client on
                        # Redis (Go's TestStaleTriesStayOnRedis).
                        self._after_stale(sent)
                        stale += 1
                        if stale <= _SLOW_TRIES:
                            if give_up is not None and time.monotonic() > give_up:
                                raise WaitTooLong(max_wait, OUTAGE_BAND) from e
                            continue
                    except UNAVAILABLE as e:
                        if not self._lost(e):
                            if give_up is not None and time.monotonic() > give_up:
                                raise WaitTooLong(max_wait, OUTAGE_BAND) from e
                            continue  # Redis answered a ping: the call goes to Redis again
                        self._go_local(f"{type(e).__name__}: {e}", _no_reply(e))
                        r = self._reserve_local(key, k, policy, costs, max_us)
                else:
                    r = self._reserve_local(key, k, policy, costs, max_us)
            except _Back:
                continue  # back on Redis meanwhile
            if r is not None:
                return r
            # No local share now: wait for Redis.
            if give_up is not None and time.monotonic() + delay > give_up:
                # A caller who can wait never gets an outage's error: its
                # maximum wait is what ends the wait for Redis.
                raise WaitTooLong(max_wait, OUTAGE_BAND)
            self._stop.wait(delay)
            delay = min(delay * 2, self.interval / 2)
            self._probe()

    def wait(self, key: str, policy: Policy, cost: float | Mapping[str, float] = 1,
             timeout: float | None = None) -> Reservation:
        """Reserves a slot and sleeps until it (see sleep). ``timeout`` as
        reserve's ``max_wait``: WaitTooLong if the slot is further off."""
        r = self.reserve(key, policy, cost, max_wait=timeout)
        return self.sleep(r, None if timeout is None else time.monotonic() + timeout)

    def sleep(self, r: Reservation, until: float | None = None) -> Reservation:
        """Sleeps until r's slot, and returns the reservation the caller may
        use now. It never returns inside a pause made meanwhile: just
        before the slot it reads the key's state, and if a pause covers the
        slot it cancels r and takes a fresh slot (docs/protocol.md, Pause).
        While it sleeps it reads the state every _POLL, and uses its slot d
        earlier when a resume moved its reservation ("~s q:r d").
        Nor does it fire on a slot of a state Redis has lost since (its read
        shows none, or one numbered before the one seen): it takes a fresh
        slot (Go's MovedLost).
        Nor does it return much later than the slot: a sleeper that wakes
        more than half its fastest bucket's spacing late (at least 1 ms: a
        stalled process) takes a fresh slot instead, rather than fire
        together with callers that are on time, and again when it is late
        for that one too, up to MAX_LATE_MOVES times (the last is used
        however late); its slot's window units go back first (it never
        fired on it).
        Nor does it fire on a slot the local fallback granted (Redis
        unavailable) when Redis answers again before its last check: the
        fleet paces on Redis from then on, and it takes a slot there (Go's
        MovedBack). ``until`` (time.monotonic()) bounds a fresh slot's
        wait (WaitTooLong)."""
        moves, fired = 0, False
        try:
            while not fired:
                r, moves, fired = self._sleep_once(r, until, moves)
            return r
        finally:
            self._awake(r)

    def _check_lead(self) -> float:
        """How long before its slot a sleeper reads the key for a pause, in
        seconds: _PRECHECK and the shortest round trip of the calls lately
        (_LowRTT, Go's Limiter.checkLead), so that the answer is back
        before the slot however far away Redis is. Before, a Redis farther
        than _PRECHECK and the lateness allowed made every sleeper late on
        the answer, and move; and with the shortest round trip ever seen, a
        Redis that moved farther (a failover to a far replica) did the
        same for the rest of the process's life."""
        with self._lock:
            return _PRECHECK + self._low.value_ns() / 1e9

    def _sleep_once(self, r: Reservation, until: float | None, moves: int) -> tuple[Reservation, int, bool]:
        """One round of sleep: the reservation, how many times it moved for
        lateness, and whether it is the one to use now (else it is a fresh
        one to sleep on)."""
        self._asleep(r)
        lead = self._check_lead()
        while r.delay() > lead + _POLL and not r.back_move:
            # A resume may move the slot earlier meanwhile: Redis then
            # grants the times it left to others.
            time.sleep(_POLL)
            self._pause_end(r)
        if not r.back_move:
            _sleep_to(r, lead)
        pause = self._pause_end(r)
        if pause is not None and pause > r.slot_ns:
            self._awake(r)  # cancelled: out of the floor, and no sleeper
            return self._again(r, until), moves, False
        if self._lost_since(r):
            # Redis lost the state that granted the slot (restarted
            # empty, flushed) and may have granted its instant to
            # others since: a fresh slot. Not cancelled: the state
            # Redis holds now never had it.
            return self._again(r, until, cancel=False), moves, False
        if self._awake(r):
            # The last check: from here the slot is used as granted,
            # and a handback counts it in Redis's floor. The local
            # fallback granted it, and Redis answered again first: a
            # slot on Redis instead. Not cancelled: the store that
            # granted it is gone, and Redis's floor leaves it out.
            with self._lock:
                self._moved_back += 1
            return self._again(r, until, cancel=False), moves, False
        while r.delay() > 0:
            _sleep_to(r, 0.0)
        with self._lock:
            own = self._own_pause_locked(self._keys.get(r.key))
        if own > r.slot_ns:
            # A pause this Limiter made after the check (another caller's
            # 429) covers the slot: its maker honours it (Go's
            # pauseKnownCovers; the combination runner's seed 21).
            return self._again(r, until), moves, False
        most = _max_lateness(r)
        if moves < MAX_LATE_MOVES and most >= 0 and time.monotonic() - r.deadline + r.placed_late > most:
            # Its slot passed unused: a cancel gives a window nothing back
            # once the slot has passed, a settle to nothing does (Go's
            # giveBackUnused). Without it the fresh slot was charged a
            # second unit: on a daily window of 1, the next day's.
            if _charges_window(r):
                self._adjust(r, "settle", [0.0] * len(r.costs))
            return self._again(r, until, cancel=False), moves + 1, False
        return r, moves, True

    def _asleep(self, r: Reservation) -> None:
        """Notes r, a grant of the store that still counts (_Key.grants),
        among its key's sleepers: the handback tells it to move (MovedBack)."""
        if not r.local_id:
            return
        with self._lock:
            st = self._keys.get(r.key)
            if st is not None and st.local and r.local_id in st.grants:
                st.asleep[r.local_id] = r

    def _awake(self, r: Reservation) -> bool:
        """Takes r out of its key's sleepers (_asleep), and reports whether
        the handback told it to take a slot on Redis."""
        if not r.local_id:
            return False
        with self._lock:
            st = self._keys.get(r.key)
            if st is not None and st.asleep.get(r.local_id) is r:
                del st.asleep[r.local_id]
            back, r.back_move = r.back_move, False
            return back

    def _again(self, r: Reservation, until: float | None, cancel: bool = True) -> Reservation:
        """Cancels r (if cancel) and reserves the same again."""
        if cancel:
            self.cancel(r)
        left = None if until is None else max(0.0, until - time.monotonic())
        return self.reserve(r.key, r.policy, dict(zip(r.policy.units, r.costs)), max_wait=left)

    def cancel(self, r: Reservation) -> bool:
        """Gives back what later reservations have not built on (docs/
        protocol.md, Adjust); True if applied, False if it was before."""
        return self._adjust(r, "cancel", None)

    def settle(self, r: Reservation, actual: float | Mapping[str, float]) -> bool:
        """Charges the difference between the actual cost and the reserved
        one: more moves later slots, less gives back under cancel's rule."""
        return self._adjust(r, "settle", r.policy.costs(actual))

    def pause(self, key: str, seconds: float, policy: Policy | None = None) -> int:
        """No slot on key for ``seconds`` (a provider's Retry-After); returns
        the ns until the pause in force ends. A shorter pause than the one in
        force changes nothing."""
        k = protocol.redis_key(self.prefix, key)
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds <= 0 or int(seconds * 1e6) < 1:
            raise ValueError(f"pacer: a pause of {seconds!r} s is not a positive number of µs")
        d_us = int(seconds * 1e6)
        keys = [k, k + ":limit"]
        with self._lock:
            local = self._local
        if not local:
            try:
                v = self.scripts.run(self.redis, "Pause", keys,
                                     protocol.common_args(self._share() or "1", policy, fmt=self._format) + [str(d_us)])
                assert isinstance(v, list)
                self._saw(key, str(v[-1]), "", None)
                with self._lock:
                    st = self._keys.setdefault(key, _Key())
                    st.own_pause_ns = max(st.own_pause_ns, self._server_now() + int(v[2]))  # type: ignore[arg-type]
                    try:
                        st.own_pause_seq = protocol.parse_state(str(v[-1])).seq
                    except ValueError:
                        pass
                return int(v[2])  # type: ignore[arg-type]
            except UNAVAILABLE as e:
                if not self._lost(e):
                    return self.pause(key, seconds, policy)  # Redis answered a ping: again
                self._go_local(f"{type(e).__name__}: {e}", _no_reply(e))
        with self._handback_lock:
            if not self.is_local:
                return self.pause(key, seconds, policy)  # back on Redis meanwhile
            store = self._seed(key, k)
            if store is None:
                raise Unavailable("pacer: Redis is unavailable and the local fallback cannot pause (no lupa)")
            v = self.scripts.run(store, "Pause", keys,
                                 protocol.common_args(self._local_share or "1", policy, fmt=3) + [str(d_us)])
            assert isinstance(v, list)
            with self._lock:
                st = self._keys[key]
                st.local_pause_ns = max(st.local_pause_ns, self._server_now() + int(v[2]))  # type: ignore[arg-type]
            return int(v[2])  # type: ignore[arg-type]

    def close(self) -> None:
        """Stops the heartbeat and leaves the fleet."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            try:
                self.scripts.run(self.redis, "Heartbeat", protocol.fleet_keys(self.prefix),
                                 protocol.heartbeat_args(self.id, "leave", 0, 0, None))
            except (*UNAVAILABLE, PacerError):
                pass
        with self._presence_lock:
            self._absent()

    def __enter__(self) -> "Limiter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def is_local(self) -> bool:
        """Whether the Limiter paces locally now (Redis unavailable)."""
        with self._lock:
            return self._local

    # -------------------------------------------------------------- Redis

    def _reserve_redis(self, key: str, k: str, policy: Policy, costs: list[float], max_us: int) -> Reservation:
        with self._lock:
            st = self._keys.setdefault(key, _Key())
            share = self._share(grant=True)
            lost = ""
            now = self._server_now()
            if st.granted_ns > now:
                # Slots granted on the key still ahead: should Redis have
                # lost it (restarted empty), it grants nothing before them.
                lost = protocol.lost_horizon(st.granted_ns, now, st.seq)
            fmt = self._format
        if share is None:
            raise _NoShare()
        def args() -> list[str | bytes]:  # the deadline counts from when it is sent
            return protocol.reserve_args(protocol.common_args(share, policy, fmt=fmt, lost=lost, deadline_ms=self._deadline_ms(2)),
                                         "", [(max_us, costs)])

        keys = [k, k + ":limit", k + ":shadow"]
        sent, sent_mono = time.time_ns(), time.monotonic()
        patient = _Patient(self)
        try:
            v = self.scripts.run(patient, "Reserve", keys, args())
        except protocol.PacerArgumentError as e:
            if e.code != "PACER_CALENDAR":
                raise
            # A stored limit's calendar window the call had no table for:
            # the script changed nothing, and learned the zone; again, with it.
            sent, sent_mono = time.time_ns(), time.monotonic()
            v = self.scripts.run(patient, "Reserve", keys, args())
        recv, recv_mono = time.time_ns(), time.monotonic()
        rep = protocol.decode_reserve(v)
        self._clock_sample(rep.now_ns, sent, recv)
        g = rep.grants[0]
        epoch = self._saw(key, rep.state, rep.stored, policy, g)
        if g.seq == _NEVER:
            # The group's share can never take the cost while members are
            # held (a window's N_k, or the burst they leave it, below it):
            # the caller waits for a share or for them, within its maximum
            # (Go's noShareError).
            raise _NoShare()
        r = self._result(key, policy, costs, g, False, recv_mono)
        r.epoch, r.share = epoch, share
        r.placed_late = self._placed_late(rep.now_ns, recv)
        return r

    def _placed_late(self, server_ns: int, recv: int) -> float:
        """How much later than the clock estimate places server_ns (the
        instant a script ran) its reply arrived at recv (time.time_ns()),
        less _MAX_EARLY, in seconds; 0 without an estimate. Slots are
        placed from the reply's arrival: one that waited for its process
        is late by this much (Go's MaxEarly: at a busy start, callers whose
        replies waited 75 ms fired 75 ms late, together with callers on
        time)."""
        with self._lock:
            if not math.isfinite(self._best_rtt):
                return 0.0
            est = server_ns - self._offset_ns
        return max(0.0, (recv - est) / 1e9 - _MAX_EARLY)

    def _result(self, key: str, policy: Policy, costs: list[float], g: protocol.Grant, local: bool,
                recv_mono: float) -> Reservation:
        if g.seq == 0:
            raise WaitTooLong(g.wait_ns / 1e9, g.band)
        if g.seq == _QUEUE_TOO_LONG:
            raise Refused("pacer: the queue would be over 30 years long")
        if g.seq < 0:  # (_NEVER: the callers wait for a share before this)
            raise Refused(f"pacer: refused ({g.seq})")
        return Reservation(key, policy, costs, g.slot_ns, g.seq, g.band, local, recv_mono + g.wait_ns / 1e9, self)

    def _saw(self, key: str, state: str, stored: str, policy: Policy | None, g: protocol.Grant | None = None) -> int:
        """Records what a reply or a read showed of a key, and returns the
        key's epoch then."""
        with self._lock:
            st = self._keys.setdefault(key, _Key())
            if policy is not None:
                st.policy = policy
                if st.reported != policy:
                    st.reported, st.report_sent = policy, -math.inf
                st.report_used = time.monotonic()
            if state:
                st.state, st.stored, st.seen_ns = state, stored, self._server_now()
                try:
                    s = protocol.parse_state(state)
                except ValueError:
                    pass
                else:
                    # A state numbered before the one seen (numbers never go
                    # back on a key) and written before slots Redis granted
                    # this Limiter: Redis lost the key, and the number stays
                    # for the lost key's floor. One written after them (the
                    # key lapsed, then a new reservation) is taken whole:
                    # its numbers start again (Go's noteSeen).
                    lost = s.seq < st.seq and st.granted_ns > s.t * 1000
                    # A loss not seen before; one written no later than the
                    # state seen is an older read of it, arriving late.
                    if lost and s.t > st.seen_t and (not st.lost or s.seq < st.lost_seq):
                        st.epoch += 1
                    st.lost, st.lost_seq, st.seen_t = lost, s.seq, max(st.seen_t, s.t)
                    if not lost:
                        st.seq = s.seq
            else:
                # No state: Redis lost the key (or it lapsed with every
                # slot passed).
                st.epoch += 1
                st.lost, st.lost_seq = True, 0
            if g is not None and g.seq > 0:
                st.granted_ns = max(st.granted_ns, g.slot_ns)
            return st.epoch

    def _lost_since(self, r: Reservation) -> bool:
        """Whether Redis lost the state that granted r since (see
        _Key.epoch)."""
        if r.local or r.seq <= 0:
            return False
        with self._lock:
            st = self._keys.get(r.key)
            return st is not None and st.epoch != r.epoch

    def _adjust(self, r: Reservation, op: str, actual: list[float] | None) -> bool:
        if self._lost_since(r):
            # A reservation of a state Redis lost since (this Limiter has
            # seen the loss: _Key.epoch) gives nothing back: the state that
            # holds the key now never charged it, and adjust.lua cannot
            # always tell (a number the new state has reached, a slot within
            # its queue). A settle's raises are still charged; a cancel, or
            # a settle that raises nothing, sends nothing (Go's
            # Reservation.adjust, TestCancelAfterLossSeenGivesNothing).
            kept = list(r.costs)
            raised = False
            for i, a in enumerate(actual or []):
                if a > kept[i]:
                    kept[i], raised = a, True
            if not raised:
                return True
            op, actual = "settle", kept
        k = protocol.redis_key(self.prefix, r.key)
        keys = [k, k + ":limit", k + ":done"]
        with self._lock:
            local, st = self._local, self._keys.setdefault(r.key, _Key())
        if r.local:
            if not local or self._store is None:
                return False  # handed back to Redis already: its slot stands
            share = self._local_share or "1"
            args = protocol.adjust_args(protocol.common_args(share, r.policy, fmt=3), _at_share(op, share, r.share),
                                        r.slot_ns, r.seq, r.costs, actual)
            v = self.scripts.run(self._store, "Adjust", keys, args)
            return isinstance(v, list) and v[0] == 1
        if not local:
            share = self._share() or "1"
            args = protocol.adjust_args(protocol.common_args(share, r.policy, fmt=self._format), _at_share(op, share, r.share),
                                        r.slot_ns, r.seq, r.costs, actual)
            try:
                v = self.scripts.run(self.redis, "Adjust", keys, args)
                assert isinstance(v, list)
                self._saw(r.key, str(v[1] or ""), st.stored, None)
                return v[0] == 1
            except UNAVAILABLE as e:
                if not self._lost(e):
                    return self._adjust(r, op, actual)  # Redis answered a ping: again (Adjust is idempotent)
                self._go_local(f"{type(e).__name__}: {e}", _no_reply(e))
        with self._lock:
            if len(st.pending) < 10_000:
                st.pending.append((op, r.slot_ns, r.seq, r.costs, actual, r.policy, r.share))
        return True

    def _pause_end(self, r: Reservation) -> int | None:
        """The end of the pause in force on r's key (Unix ns, server clock),
        read from the key's state where the Limiter paces now (Redis, or
        the local store while it paces locally: a local slot slept on once
        back on Redis honours the pauses made on Redis meanwhile); where
        that cannot be read, or while local, the pauses this Limiter made
        itself count too (it knows them, whichever engine made them). None
        if nothing is known."""
        k = protocol.redis_key(self.prefix, r.key)
        with self._lock:
            local, st = self._local, self._keys.get(r.key)
            own = self._own_pause_locked(st)
        client: Any = self._store if local else self.redis
        read: int | None = None
        try:
            v = None if client is None else protocol.normalize(client.execute_command("GET", k))
            if not local:
                self._saw(r.key, v if isinstance(v, str) else "", st.stored if st is not None else "", None)
            if isinstance(v, str) and v:
                state = protocol.parse_state(v)
                read = state.pause_end_ns
                if not local:
                    self._shift(r, state)
        except UNAVAILABLE:
            local = True  # Redis cannot say: what this Limiter knows counts
        except ValueError:
            pass
        if local and own > (read or 0):
            return own
        return read

    @staticmethod
    def _own_pause_locked(st: "_Key | None") -> int:
        """The end of the pauses this Limiter made itself on a key (on Redis
        or on the local store; 0: none). self._lock is held."""
        return max(st.own_pause_ns, st.local_pause_ns) if st is not None else 0

    def _shift(self, r: Reservation, state: protocol.State) -> None:
        """Moves r earlier by the resume the state on Redis records ("~s
        q:r d": reservations q+1 to r, d ns earlier; lua/resume.lua), once,
        if it applies to r; forgets this Limiter's own pause on the key if
        the resume came after it."""
        resumed = state.resumed
        if resumed is None:
            return
        q, last, d = resumed
        with self._lock:
            st = self._keys.get(r.key)
            if st is not None and st.own_pause_ns and last >= st.own_pause_seq:
                st.own_pause_ns = 0  # an operator resumed the key after it
            if r.local or d <= 0 or not (q < r.seq <= last) or r.shifted >= last:
                return
            r.shifted = last
            r.slot_ns -= d
            r.deadline -= d / 1e9

    # -------------------------------------------------------------- the clock

    def _clock_sample(self, server_ns: int, sent: int, recv: int) -> None:
        """Takes a reply's server instant (server_ns, read between sent
        and recv, time.time_ns()) for the estimate when its round trip is
        short enough. The instant is taken for the latest local time it can
        have been, the reply's arrival, as Go's clockSync does: the
        estimate is then never ahead of Redis's clock, and a local slot
        never fires before it. Taken for the round trip's midpoint, it was
        up to half of it ahead (test_clock_estimate_never_ahead).

        A reply whose round trip is too long is taken all the same when it
        shows the estimate wrong: the estimate places its server instant
        outside the call's span, before it was sent or after its reply
        arrived (Redis's clock stepped, or a failover reached a host whose
        clock differs), as Go's clockSync.place does. Before, a Redis that
        moved 2 ms or more farther than the shortest round trip seen, to a
        clock of its own, left the estimate on the old clock for good
        (test_clock_estimate_follows_a_clock_that_moved)."""
        rtt = recv - sent
        with self._lock:
            self._low.note(rtt, recv)
            est = server_ns - self._offset_ns  # where the estimate places server_ns
            wrong = math.isfinite(self._best_rtt) and not sent <= est <= recv
            if wrong or rtt <= self._best_rtt * 1.5 or rtt < 2_000_000:
                self._best_rtt = rtt if wrong else min(self._best_rtt, rtt)
                self._offset_ns = server_ns - recv
                self._offset_rtt = rtt

    def _resync_clock(self) -> None:
        """Reads Redis's clock again (TIME) after a script refused as run
        after its deadline (PACER_STALE), and takes it as the estimate,
        whatever its round trip: the deadlines come from the estimate, and
        one that is off (Redis's clock stepped) would make every deadline
        one in the past, and every call stale, for ever. A Redis that does
        not answer leaves it as it was (the heartbeat decides)."""
        try:
            sent = time.time_ns()
            sec, usec = self.redis.execute_command("TIME")
            recv = time.time_ns()
        except (*UNAVAILABLE, redis.exceptions.ResponseError):
            return
        with self._lock:
            self._low.note(recv - sent, recv)
            self._best_rtt = recv - sent
            self._offset_ns = int(sec) * 1_000_000_000 + int(usec) * 1000 - recv  # as _clock_sample
            self._offset_rtt = recv - sent

    def _after_stale(self, sent: float) -> None:
        """After a reservation sent at ``sent`` (monotonic) was refused as
        stale: reads Redis's clock again and hears the fleet (a heartbeat)
        before it goes again, once for every reservation refused meanwhile
        (after a stall, every thread's at once): one sent before such a
        read began went out on the estimate and the view the read renews,
        and waits for a read under way rather than make its own (Go's
        resyncClock)."""
        with self._stale_cv:
            while True:
                if self._stale_read >= sent:
                    return
                if not self._stale_busy:
                    self._stale_busy = True
                    break
                self._stale_cv.wait()
        began = time.monotonic()
        try:
            self._resync_clock()
            self._beat()
        finally:
            with self._stale_cv:
                self._stale_busy = False
                self._stale_read = max(self._stale_read, began)
                self._stale_cv.notify_all()

    def _server_now(self) -> int:
        """Now on Redis's clock as estimated, Unix ns."""
        return time.time_ns() + self._offset_ns

    # -------------------------------------------------------------- the fleet

    def _share(self, grant: bool = False) -> str | None:
        """The share of each key this Limiter takes on Redis (core.lua's
        ARGV[2]): "1", or "<n> <held ranks...>"; None: none now. grant: for
        a call that takes slots, which waits (None) while the view is a
        guess (_guessing)."""
        with self._lock:
            if not self._learned or self._n < 1:
                return "1"
            n, held = self._n, list(self._held)
            doubt = self._doubt or self._stale()
            if self._missing():
                n = self._remembered
                # After a failed heartbeat (doubt), every rank but its own,
                # as below (Go's redisShareOK; combination runner, seed 7).
                # Its own rank on Redis, when not its old one, is no member
                # back: that rank's owner may pace locally still (Go's
                # TestBackAtAnotherRank).
                held = [k for k in range(n) if k != self._rank_before
                        and (doubt or k == self._rank or k not in self._ranks or k in self._held)]
                if (grant and self._remembered_also not in (0, n)
                        and time.monotonic() - self._back_at < self._join):
                    # The fleet had just changed when it lost Redis: members
                    # not back yet may pace on either size, which no share
                    # of one keeps clear of. Wait until they could be back:
                    # the living probe back within _join (Go's
                    # twoSizesBack, TestBackAcrossTwoSizes; combination
                    # runner, seed 13).
                    return None
            elif doubt:
                held = [k for k in range(n) if k != self._rank]
                if grant and self._guessing():
                    # Wait for the next heartbeat: a slot on this rank's own
                    # instants moves the key's queue past every other
                    # rank's, which no member on Redis can take (Go's
                    # redisShareOK; TestDoubtWaitsForHeartbeat).
                    return None
                if grant and self._newcomer():
                    # It joined in the fleet's latest change: a member that
                    # lost Redis since may never have heard of it and pace
                    # locally on a fleet without it. Nothing on Redis until
                    # a heartbeat answers (Go's redisShareOK,
                    # TestNewcomerInDoubtTakesNothing; the combination
                    # runner's Cluster seed 31).
                    return None
            elif held and (self._split() or self._held_on_whole()):
                # The held members pace on lattices of different sizes,
                # which no share of one size keeps clear of: take nothing
                # until they are back or forgotten, leaving every other rank
                # its share for what takes no slot (Go's redisShareOK;
                # TestHeldOnTwoSizes, combination runner, seed 15).
                # So too beside a held member pacing on the whole of each
                # key, which leaves the others nothing (TestHeldOnWholeTakesNothing;
                # the combination runner's Cluster seed 31).
                if grant:
                    return None
                held = [k for k in range(n) if k != self._rank]
            elif held and self._held_n > 1 and self._held_n != n:
                n = self._held_n
                held = [k for k in held if k < n]
                if len(held) >= n:
                    return None
            if not held or len(held) >= n:
                return "1"
            if grant and self._sparse(n, held):
                return None
            return " ".join(str(x) for x in [n, *held])

    def _sparse(self, n: int, held: list[int]) -> bool:
        """Whether, back from an outage of its own within _back_wait, this
        Limiter sees fewer than a quarter of the fleet's n ranks not held:
        its calls that take slots wait for the others (a fleet of 4 or
        fewer never waits). self._lock is held."""
        return bool(self._back_until) and time.monotonic() < self._back_until and 4 * (n - len(held)) < n

    def _guessing(self) -> bool:
        """Whether calls that take slots on Redis wait for a heartbeat
        rather than reserve on a view in doubt. self._lock is held."""
        if self._fails >= 2:
            return False
        if not self._guess_since:
            self._guess_since = time.monotonic()
        return time.monotonic() - self._guess_since < self._guess_wait

    def _stale(self) -> bool:
        """Whether the view is older than two heartbeat intervals while on
        Redis: its heartbeats stopped (the process was stopped, a virtual
        machine paused), so members may have lost Redis and paced locally
        meanwhile, and Redis may have lost the fleet, without its knowing.
        Its calls on Redis leave every other rank its share until a
        heartbeat tells it the fleet, which counts as a return from an
        outage (Go's fleetView.stale; combination runner, seed 8).
        self._lock is held."""
        return (self._learned and not self._local and self._last_beat is not None
                and time.monotonic() - self._last_beat > 2 * self.interval)

    def _remember_fleet(self) -> None:
        """Keeps the fleet its calls on Redis kept to (_share), for
        _missing: the held members' when they pace on another size, so
        that, back on a Redis restarted empty before them, it keeps to
        their lattice (Go's TestBackBesideHeldFleet); and the other size
        its local share kept within (_also_n; -1: more than one), since
        members still pacing locally may pace on either (Go's
        TestBackAcrossTwoSizes). self._lock is held."""
        n, also = self._n, self._also_n()
        if self._split():
            also = -1
        elif self._held and self._held_n > 1 and self._held_n != self._n:
            n, also = self._held_n, 0
        self._remembered, self._remembered_members, self._rank_before = n, self._members, self._rank
        self._remembered_ranks = list(self._ranks)
        self._remembered_also = 0 if also == 1 else also  # a fleet of 1 paces on the whole

    def _keep(self) -> tuple[int, int, list[int]] | None:
        """The ranks a heartbeat asks the fleet to keep (heartbeat.lua's
        ARGV[8] "keep"): while members it remembers are missing, the ranks
        of that fleet, other than its own, that Redis does not list yet,
        for three heartbeat intervals (each heartbeat renews them). No
        newcomer takes one, and every member holds them (Go's
        fleetView.wantRank; combination runner, seed 49). self._lock is
        held."""
        if not self._missing():
            return None
        ranks = [k for k in range(self._remembered) if k != self._rank_before and k not in self._ranks]
        if not ranks:
            return None
        return max(int(3 * self.interval * 1000), 1000), self._remembered, ranks

    def _missing(self) -> bool:
        """Whether, back from an outage, members of the fleet it knew are not
        back yet: fewer listed than it knew, or a rank it knew not listed (a
        member that joined meanwhile hides one missing; Go's
        fleetView.missing, combination runner seed 13). self._lock is
        held."""
        if not (self._back_at > 0 and time.monotonic() - self._back_at < self._remember and self._remembered > 0):
            return False
        if self._remembered_members > self._members:
            return True
        listed = set(self._ranks)
        return any(r != self._rank and r not in listed for r in self._remembered_ranks)

    def _own_share(self) -> str | None:
        """The share this Limiter takes alone while local ("m <n> <rank>
        <also>"), None when it has none (docs/protocol.md, Heartbeat)."""
        if not self._learned:
            if self._hint < 1:
                return None
            if self._hint == 1:
                return "1"
            import zlib
            return f"m {self._hint} {zlib.crc32(self.id.encode()) % self._hint} 0"
        n, rank = self._n, self._rank
        also = self._also_n()
        if self._missing():
            n, rank, also = self._remembered, self._rank_before, self._remembered_also
        if also < 0 or also > 0 and rank >= also:
            return None
        if n <= 1:
            return "1"
        return f"m {n} {min(rank, n - 1)} {also}"

    def _held_on_whole(self) -> bool:
        """Whether a held member paces on the whole of each key: it knew a
        fleet of one, and its heartbeats report size 1 (_share_n). It
        leaves the others nothing (Go's fleetView.heldOnWhole). self._lock
        is held."""
        return bool(self._held) and self._held_n == 1 and self._n > 1

    def _split(self) -> bool:
        """Whether the held members pace on lattices of different sizes
        (heartbeat's held_sizes; Go's fleetView.split). self._lock is
        held."""
        return bool(self._held) and len(self._held_sizes) > 1

    def _also_n(self) -> int:
        """The other fleet size this Limiter's local share keeps within too
        ("m <n> <rank> <also>"; 0: none): the held members' size when it is
        not n (held_sizes of one size other than n, or of n and one other),
        else before when it is not 0 and not n; -1 when the held members'
        sizes and n make more than two (no share keeps within them all).
        self._lock is held."""
        if not self._learned or self._missing():
            return 0
        if self._split():
            others = [x for x in self._held_sizes if x != self._n]
            return others[0] if len(others) == 1 else -1
        if self._held_on_whole():
            return -1  # no other member has a local share (Go's alsoN)
        if self._held and self._held_n > 0 and self._held_n != self._n:
            return self._held_n
        if self._before > 0 and self._before != self._n:
            return self._before
        return 0

    def _newcomer(self) -> bool:
        """Whether this Limiter has no local share because it joined the
        fleet after members that may pace locally without it (its rank is
        not below _also_n). self._lock is held."""
        also = self._also_n()
        return also < 0 or also > 0 and self._rank >= also

    def _deadline_ms(self, timeouts: int = 1) -> int | None:
        """A script's deadline (ARGV[1]), as Go's Limiter sets it: its
        client's socket timeout, ``timeouts`` times over, plus the round
        trip, from now, Unix ms on the server's clock as estimated; None
        without a timeout or an estimate. A Redis that stalled (frozen, a
        long fork) runs the commands queued meanwhile when it resumes: a
        heartbeat saying "redis" from before this Limiter went local would
        show it live on Redis while it paces locally (heartbeat.lua's
        ARGV[9]; a heartbeat is given up at its timeout: once), and a
        reservation would take slots on the view of the fleet from before
        the stall, beside members that paced locally meanwhile (a
        reservation waits past its timeout for the ping that decides, as
        Go's patient calls: twice, Go's scriptDeadline). Run later, the
        script changes nothing and answers PACER_STALE."""
        timeout = self._socket_timeout()
        with self._lock:
            rtt = self._best_rtt
        if not timeout or not math.isfinite(rtt):
            return None
        ns = self._server_now() + int(timeouts * timeout * 1e9) + int(rtt)
        return -(-ns // 1_000_000)

    def _times(self) -> tuple[str, ...]:
        """Heartbeat's live_ms, hold_ms, suspect_ms and keep_ms, as Go's
        Limiter passes them. A member is live if heard from within live_ms
        (2 s). But right after an outage of this Limiter's own, one not
        heard from since the outage began most likely lost Redis too and
        may still pace locally: live_ms is at most the time since it began,
        so that such a member counts as held. And a Limiter just started has
        heard from nobody yet: live_ms is at most the time since it started,
        at least suspect_ms (members beat every interval, +10%)."""
        live = int(protocol.HEARTBEAT_TIMES[0])
        suspect = int(protocol.HEARTBEAT_TIMES[2])
        now = time.monotonic()
        with self._lock:
            outage, started = self._outage, self._started
            if self._stale() and self._last_beat is not None:
                # As after an outage of its own, from its last heartbeat.
                outage = max(outage, self._last_beat)
        if outage:
            live = min(live, max(int((now - outage) * 1000), 1))
        d = int((now - started) * 1000)
        if d < live:
            live = min(live, max(d, suspect))
        return (str(live), *protocol.HEARTBEAT_TIMES[1:])

    def _share_n(self) -> int:
        """The fleet size this Limiter's local share counts, as its
        heartbeats report it (0: none; 1: the whole of each key, which
        leaves the others nothing while it is held): the one it paces on
        while local, else the one it would take if it lost Redis now (Go's
        reportedSize). self._lock is held."""
        share = self._local_share if self._local else self._own_share()
        if share and share.startswith("m "):
            return int(share.split()[1])
        return 1 if share else 0

    def _first_beat(self) -> None:
        """The heartbeat that starts the Limiter, as Go's New makes it
        (firstHeartbeat). One that timed out is no evidence that Redis is
        gone (a paused or frozen Redis, a loaded machine): when the ping
        that decides (_lost) found Redis, the heartbeat goes again, twice
        at most. A Limiter still without a view of the fleet then starts
        off Redis, as one started while Redis was unavailable: on Redis it
        would take the whole rate, beside members that may pace locally on
        their shares (combination runner, seed 37)."""
        for _ in range(3):
            self._beat()
            with self._lock:
                if self._learned or self._local:
                    return
        self._go_local("the first heartbeat timed out three times")

    def _beat(self, wait: bool = True) -> None:
        """A heartbeat (the probe while local), run again at once (twice at
        most) when the reply changed what the next one says, as Go's
        Limiter: its local share's size (the others keep to it if this one
        goes silent), or its mode (it came back to Redis: until the fleet
        hears "redis", the others hold its share). One at a time
        (_beat_lock): it waits for one under way, or (not wait) leaves the
        probe to it."""
        if not self._beat_lock.acquire(blocking=wait):
            return
        try:
            for _ in range(3):
                if not self._beat_once():
                    return
        finally:
            self._beat_lock.release()

    def _beat_once(self) -> bool:
        began = time.monotonic()
        with self._lock:
            if self._local and began > self._probe_due + self._probe_slack():
                self._stalled = True  # begun far behind its schedule: a stall
            self._probing = began
        try:
            return self._beat_once_timed()
        finally:
            with self._lock:
                if self._probing == began:
                    self._probing = 0.0
                # One that left the Limiter local after spanning a stall
                # (the process was off the CPU while it was under way) says
                # nothing of Redis now: the next is due at once, and the
                # stall lasts. Any other answered, and ends a stall seen.
                if not self._local or time.monotonic() - began <= self._probe_budget() + self._probe_slack():
                    self._probe_due = time.monotonic() + self.interval
                    self._stalled = False
                else:
                    self._stalled = True

    def _probe_budget(self) -> float:
        """How long a heartbeat may take: its call and, after a timeout, the
        ping that decides (_lost)."""
        timeout = self._socket_timeout()
        return 2 * timeout + _confirm_budget(timeout)

    def _socket_timeout(self) -> float:
        """The client's socket timeout, seconds (0: none)."""
        return float(self.redis.connection_pool.connection_kwargs.get("socket_timeout") or 0)

    def _probe_slack(self) -> float:
        return self.interval / 2 + 0.25

    def _probes_stalled(self) -> bool:
        """Whether, pacing locally, this Limiter's heartbeats fell behind
        their schedule by more than _probe_slack: its process was off the
        CPU for that long (SIGSTOP, a paused virtual machine). The fleet
        may be back on Redis meanwhile, and the members back keep this
        one's share only for a while after their own return: until a
        probe has answered, it takes no local slot (Go's probesStalled;
        the combination runner's seed 78). A stall seen lasts until a
        heartbeat answers: one begun since, still under way, does not end
        it (TestStalledProbesTakeNoLocalSlot)."""
        now = time.monotonic()
        with self._lock:
            if not self._local:
                return False
            if not self._stalled:
                if self._probing:
                    self._stalled = now - self._probing > self._probe_budget() + self._probe_slack()
                else:
                    self._stalled = now > self._probe_due + self._probe_slack()
            return self._stalled

    def _beat_once_timed(self) -> bool:
        with self._lock:
            mode = "local" if self._local else "redis"
            since = self._since_ms
            n = self._share_n()
            rank = self._rank_before if self._remembered else (self._rank if self._learned else None)
            keep = self._keep()
            reports = self._reports_due()
        with self._presence_lock:
            if mode == "redis" and self._presence is None and not self._presence_denied:
                # Before its first heartbeat on Redis, as Go's Limiter: that
                # heartbeat can check the suspects it names at once, so
                # that a member that exited is forgotten before the next
                # newcomer takes a rank (combination runner, seed 1).
                self._present()
            cid, run = self._cid, self._run
        try:
            sent = time.monotonic()
            v, mode = self._send_beat(mode, since, n, rank, cid, run, keep)
            took = time.monotonic() - sent
        except (*UNAVAILABLE, PacerError) as e:
            if isinstance(e, PacerError) and e.code != "PACER_STALE":
                raise
            if isinstance(e, PacerError):
                self._resync_clock()  # for the next heartbeat's deadline
            with self._lock:
                if self._missing():
                    # Members it remembers are not back yet, and the fleet's
                    # records fail this heartbeat: most likely theirs too,
                    # and they cannot be back while they do. The time they
                    # have to come back counts from the last heartbeat that
                    # failed, not from the return (Go's
                    # fleetView.beatFailed; the combination runner's
                    # Cluster seed 50).
                    self._back_at = time.monotonic()
                self._doubt = self._learned
                if self._learned:
                    self._fails += 1
                if not self._local:
                    self._outage = time.monotonic()  # an outage of its own, for _live
                    self._silent = isinstance(e, UNAVAILABLE) and _no_reply(e)
                if self._born:
                    self._join_until = 0.0  # the fleet did not answer: joining starts again
            if isinstance(e, UNAVAILABLE) and not self.is_local and self._lost(e):
                self._go_local(f"heartbeat: {type(e).__name__}: {e}", _no_reply(e))
            return False
        self._send_reports(reports)
        with self._presence_lock:
            # For the next heartbeat: after this one, so that a Redis that
            # does not answer holds up no heartbeat twice.
            self._present()
        hb = protocol.decode_heartbeat(v)
        if hb is None:
            return False
        with self._lock:
            if self._born:
                now = time.monotonic()
                if not self._join_until:
                    self._join_until = now + self._join
                if now < self._join_until:
                    return False  # not yet: it stays off Redis, and learns nothing
                self._born = False
        # Only a member on Redis checks: pacing locally, its heartbeat names
        # its presence connection (it can be found gone) but checks nobody,
        # as Go's Limiter (TestLocalMemberChecksNobody).
        if hb.suspects and cid and mode == "redis" and self._check_suspects(hb.suspects, run):
            # Members that exited were forgotten: the view without them.
            try:
                sent = time.monotonic()
                v, mode = self._send_beat(mode, since, n, rank, cid, run, keep)
                took = time.monotonic() - sent
                hb = protocol.decode_heartbeat(v) or hb
            except (*UNAVAILABLE, PacerError):
                pass
        with self._lock:
            # A reply that came back late tells the fleet as it was when the
            # script ran: a member may have lost Redis since and paced
            # locally, its "local" landing after this heartbeat ran. The view
            # is doubted as after a heartbeat that failed, its arrival is an
            # outage of this Limiter's own (_times), and the heartbeat goes
            # again at once (Go's lateView).
            late = mode == "redis" and took > _LATE_VIEW + (self._best_rtt / 1e9 if math.isfinite(self._best_rtt) else 0)
            if self._stale() and not self._missing():
                # The first heartbeat after the view went stale: as one back
                # from an outage of its own, keep back the shares of members
                # it knew that Redis does not list (it lost them).
                self._remember_fleet()
                self._back_at = time.monotonic()
            if mode == "local" and self._local and not self._told_at:
                self._told_at = time.monotonic()
            self._learned, self._doubt = True, late
            if late:
                self._fails += 1
                self._outage, self._silent = time.monotonic(), False
            else:
                self._fails, self._guess_since = 0, 0.0
            self._last_beat = time.monotonic()
            self._n, self._rank, self._members = hb.n, hb.rank, hb.live + hb.held
            self._held, self._held_n, self._before, self._ranks = hb.held_ranks, hb.held_n, hb.before, hb.ranks
            self._held_sizes = hb.held_sizes
            self._format = hb.format
            # The return ends after remember, or once a heartbeat lists every
            # member it knew: one that dies after that (its rank freed) is
            # not missing from the outage (Go's fleetView.taken, seed 74).
            if self._back_at and (time.monotonic() - self._back_at >= self._remember
                                  or self._remembered > 0 and not self._missing()):
                self._back_at, self._remembered, self._remembered_members = 0.0, 0, 0
            local = self._local
            changed = not local and (late or self._share_n() != n)
        if local:
            self._come_back()
            return not self.is_local  # back: tell the fleet at once
        return changed

    def _lost(self, e: BaseException) -> bool:
        """Whether e means Redis is unavailable. A call that timed out is no
        evidence that Redis is gone (a slow or paused Redis, a busy
        process): Redis is pinged on a connection of its own with a longer
        timeout (_confirm_budget: 8 times the client's, at least 2 s), and
        only if that fails too is it unavailable, as for Go's Limiter
        (outage.ConfirmBudget of Options.CallTimeout); meanwhile the call
        waits."""
        if not isinstance(e, redis.exceptions.TimeoutError):
            return True
        pool = self.redis.connection_pool
        kw = dict(pool.connection_kwargs)
        t = _confirm_budget(float(kw.get("socket_timeout") or 0))
        kw["socket_timeout"] = kw["socket_connect_timeout"] = t
        conn = pool.connection_class(**kw)
        try:
            conn.connect()
            conn.send_command("PING")
            conn.read_response()
            return False
        except (*UNAVAILABLE, redis.exceptions.ResponseError):
            return True
        finally:
            conn.disconnect()

    def _present(self) -> tuple[int, str]:
        """Makes sure the presence connection is open (Redis restarted, or
        its idle timeout, closes it) and returns its client id and its
        server's run id ((0, ""): none). It carries no command after its
        name, so no timeout ever closes it from this side (self._presence_lock
        is held). A Redis that
        may not name and list connections (an ACL) leaves it out: the
        fleet then holds this Limiter's share for hold_ms when it goes
        silent, as before."""
        if self._presence is not None:
            try:
                listed = protocol.normalize(self.redis.execute_command("CLIENT", "LIST", "ID", str(self._cid)))
                if f"name=pacer-{self.id} " in f"{listed} ":
                    return self._cid, self._run
            except UNAVAILABLE:
                return self._cid, self._run  # Redis does not answer: keep it, the network may
            except redis.exceptions.ResponseError:
                pass
            self._absent()
        if self._presence_denied:
            return 0, ""
        conn = None
        try:
            pool = self.redis.connection_pool
            conn = pool.connection_class(**pool.connection_kwargs)
            conn.connect()
            conn.send_command("CLIENT", "SETNAME", f"pacer-{self.id}")
            conn.read_response()
            conn.send_command("CLIENT", "ID")
            cid = int(conn.read_response())
            conn.send_command("INFO", "server")
            info = protocol.normalize(conn.read_response())
            run = str(info).split("run_id:", 1)[1].split()[0] if "run_id:" in str(info) else ""
            self.redis.execute_command("CLIENT", "LIST", "ID", str(cid))
        except UNAVAILABLE:
            if conn is not None:
                conn.disconnect()
            return 0, ""
        except redis.exceptions.ResponseError as e:
            if conn is not None:
                conn.disconnect()
            if str(e).startswith("NOPERM"):
                self._presence_denied = True
                log.info("pacer: the Redis user may not name and list connections (CLIENT SETNAME, ID, LIST, INFO "
                         "server): a process that exits without close() keeps its share held for hold_ms")
            return 0, ""
        if not run:
            conn.disconnect()
            return 0, ""
        self._presence, self._cid, self._run = conn, cid, run
        return cid, run

    def _absent(self) -> None:
        """Closes the presence connection."""
        if self._presence is not None:
            self._presence.disconnect()
        self._presence, self._cid, self._run = None, 0, ""

    def _check_suspects(self, suspects: list[str], run: str) -> bool:
        """Looks for each suspect's presence connection (by client id, and
        its name) in CLIENT LIST, as Go's Limiter does: a member whose
        connection is gone has exited and is forgotten at once; one still
        connected is stalled or cut off and stays held. Only the suspects
        whose connection was opened on this Limiter's server (run) are
        checked. True if any was forgotten."""
        cids: dict[str, int] = {}
        for i in range(0, len(suspects) - 2, 3):
            member, c, on = str(suspects[i]), str(suspects[i + 1]), str(suspects[i + 2])
            if member and member != self.id and run and on == run and c.isdigit():
                cids[member] = int(c)
        if not cids:
            return False
        try:
            listed = str(protocol.normalize(self.redis.execute_command("CLIENT", "LIST", "ID", *map(str, cids.values()))))
        except (*UNAVAILABLE, redis.exceptions.ResponseError):
            return False
        connected = set()
        for line in listed.splitlines():
            fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
            name = fields.get("name", "")
            if name.startswith("pacer-") and fields.get("id") == str(cids.get(name[len("pacer-"):], -1)):
                connected.add(name[len("pacer-"):])
        gone = sorted(m for m in cids if m not in connected)
        alive = sorted(m for m in cids if m in connected)
        # Back from an outage of its own within hold_ms in which Redis did
        # not answer it, as Go's Limiter: the members no check found yet,
        # most likely cut off by the same fault and their connections reset
        # as it healed, are held one check more (heartbeat.lua's "check").
        # An outage of refusals (out of memory) closes no connection.
        with self._lock:
            outage, silent = self._outage, self._silent
        hold = int(protocol.HEARTBEAT_TIMES[1]) / 1000
        unsure = "1" if silent and outage and time.monotonic() - outage < hold else "0"
        try:
            self.scripts.run(self.redis, "Heartbeat", protocol.fleet_keys(self.prefix),
                             [self.id, "check", " ".join(gone), " ".join(alive), unsure])
        except (*UNAVAILABLE, PacerError):
            return False
        return bool(gone)

    def _send_reports(self, reports: list[tuple[str, str]]) -> None:
        """Sends the reports due after a heartbeat, protocol.REPORT_CHUNK to
        a call of the script's "report" (Go's sendReports). A chunk that
        fails is not sent again: its keys are due again a minute on."""
        for i in range(0, len(reports), protocol.REPORT_CHUNK):
            try:
                self.scripts.run(self.redis, "Heartbeat", protocol.fleet_keys(self.prefix),
                                 protocol.report_args(self.id, reports[i:i + protocol.REPORT_CHUNK]))
            except (*UNAVAILABLE, PacerError):
                return

    def _reports_due(self) -> list[tuple[str, str]]:
        """The policies to report: of keys used since their last report and
        not reported within a minute (at most 100). self._lock is held."""
        now, ms = time.monotonic(), int(time.time() * 1000)
        out = []
        for key, st in self._keys.items():
            if len(out) >= _REPORT_BATCH:
                break
            if st.reported is not None and now - st.report_sent >= _REPORT_EVERY and st.report_used > st.report_sent:
                out.append((key, f"{ms} {st.reported.stored_text()}"))
                st.report_sent = now
        return out

    def _loop(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self._beat()
            except Exception:  # noqa: BLE001 - the loop must go on; the error is logged
                log.exception("pacer: heartbeat")

    def _probe(self) -> None:
        """While local and waiting for Redis: a heartbeat now (the way back
        to Redis), at most every 100 ms, unless one is under way."""
        with self._lock:
            if not self._local or time.monotonic() - self._probed < 0.1:
                return
            self._probed = time.monotonic()
        self._beat(wait=False)

    # -------------------------------------------------------------- local

    def _go_local(self, why: str, silent: bool = True) -> None:
        """Switches to local pacing; silent: Redis did not answer the call
        that failed (_no_reply)."""
        with self._lock:
            if self._local:
                return
            self._local = True
            self._stalled = False
            self._since_ms = int(time.time() * 1000)
            self._outage = self._local_at = time.monotonic()
            self._silent = silent
            self._told_at = 0.0
            if self._missing():
                pass  # keep the fleet remembered from the outage before
            elif self._learned and self._newcomer():
                # It joined after members that may pace locally without it:
                # it has no share of their fleet. When Redis answers again
                # it waits as one started while Redis was down does (born),
                # until they could be back, and takes nothing meanwhile: as
                # a member of the fleet it remembers it would take instants
                # of a lattice they do not pace on (Go's leaving).
                self._born, self._join_until = True, 0.0
                self._remembered, self._remembered_members, self._remembered_ranks = 0, 0, []
            elif self._learned:
                self._remember_fleet()
            # The share before _back_at goes: a member of the fleet it knew
            # that is not back yet may pace on its old share still, so this
            # one paces on its own old share too (Go's keeps it).
            self._local_share = self._own_share()
            self._back_at = 0.0
            if self._fallback and self._store is None:
                self._store = localstore.LocalStore(self.scripts, self._server_now)
            learned = self._learned
        if learned and self._thread is not None:
            # Tell the fleet at once, as Go's Limiter: until it hears
            # "local", the others take the whole beside this one's local
            # slots. (One that never learned the fleet has told it nothing.)
            self._wake.set()
        log.warning("pacer: Redis unavailable (%s): pacing locally at share %s", why, self._local_share)

    def _seed(self, key: str, k: str) -> localstore.LocalStore | None:
        """The store, holding key: seeded at its first local use with the
        state and stored limit Redis last showed."""
        with self._lock:
            store = self._store
            st = self._keys.setdefault(key, _Key())
            if store is None or st.local:
                return store
            st.local = True
            if st.state:
                store.execute_command("SET", k, st.state)
                if st.stored:
                    store.execute_command("SET", k + ":limit", st.stored)
                try:
                    parsed = protocol.parse_state(st.state)
                    st.seeded = {r.name: (r.w, r.u) for r in parsed.recs if r.window}
                except ValueError:
                    st.seeded = {}
            return store

    def _send_beat(self, mode: str, since: int, n: int, rank: int | None, cid: int, run: str,
                   keep: tuple[int, int, list[int]] | None) -> tuple[Any, str]:
        """Runs the heartbeat script; returns its reply and the mode it
        said. The mode is the one as the heartbeat leaves: a switch to local
        pacing since must not be reported as "redis". A "redis" under way
        is counted in the same lock, so that a switch after this sees it
        (_local_slots_ready), and only it carries a deadline."""
        with self._lock:
            if mode == "redis" and self._local:
                mode, since = "local", self._since_ms
            out = mode == "redis"
            if out:
                self._beats_out += 1
        deadline = self._deadline_ms() if out else None
        until = 0.0
        if deadline is not None:
            until = time.monotonic() + (deadline * 1_000_000 - self._server_now()) / 1e9
        try:
            v = self.scripts.run(self.redis, "Heartbeat", protocol.fleet_keys(self.prefix),
                                 protocol.heartbeat_args(self.id, mode, since, n, rank, times=self._times(),
                                                         cid=cid, run=run, keep=keep, deadline_ms=deadline))
        except BaseException as e:
            if out:
                answered = isinstance(e, (redis.exceptions.ResponseError, PacerError))
                self._beat_back(answered, until if _may_sent(e) else 0.0)
            raise
        if out:
            self._beat_back(True, 0.0)
        return v, mode

    def _beat_back(self, answered: bool, until: float) -> None:
        """The end of a heartbeat saying "redis" (_beats_out): answered if
        Redis replied to it (it ran by now); else until, if not 0, is when
        Redis stops running it if it has not yet (its deadline). (A reply
        that reaches a Limiter pacing locally brings it back to Redis:
        _beat_once_timed.)"""
        with self._lock:
            self._beats_out -= 1
            if answered:
                until = time.monotonic()
            self._beat_until = max(self._beat_until, until)

    def _local_slots_ready(self) -> bool:
        """Whether this Limiter, pacing locally, may take local slots as far
        as its own heartbeats go (Go's localSlotsReady). A heartbeat of its
        saying "redis" that Redis ran after the switch (a CLIENT PAUSE
        queued it, a frozen Redis held it) marks it heard from on Redis: a
        member back from the same outage, which held it by its silence,
        stops holding it and takes its share on Redis beside its local
        slots (combination runner, seed 28). So when such a heartbeat may
        have run after the switch, local slots wait until a heartbeat saying
        "local" reached Redis two intervals ago (the others heard it; a
        "redis" run after it changes nothing), or until the others hold
        this one by its silence since that heartbeat could last run."""
        now = time.monotonic()
        with self._lock:
            if not self._beats_out and self._beat_until <= self._local_at:
                return True
            if not self._learned or self._members <= 1:
                return True
            settle = 2 * self.interval
            if self._told_at and now - self._told_at >= settle:
                return True
            may_run = now + self._probe_budget() if self._beats_out else self._beat_until
            return now - may_run >= 1.6 * settle

    def _reserve_local(self, key: str, k: str, policy: Policy, costs: list[float], max_us: int) -> Reservation | None:
        """A reservation on the store, or None when there is no local share
        now. One at a time with the handback (_come_back), so that every
        slot the store grants is handed back: _Back once on Redis again."""
        if self._probes_stalled():
            # A probe first, from this caller: the fleet may be back on
            # Redis.
            self._beat()
            if not self.is_local:
                raise _Back()
            if self._probes_stalled():
                return None  # no local slot yet: the caller waits for Redis
        if not self._local_slots_ready():
            return None  # the fleet may count this Limiter on Redis: wait
        with self._handback_lock:
            if not self.is_local:
                raise _Back()
            return self._reserve_store(key, k, policy, costs, max_us)

    def _reserve_store(self, key: str, k: str, policy: Policy, costs: list[float], max_us: int) -> Reservation | None:
        with self._lock:
            share = self._local_share
            if share is None and self._learned is False and self._hint:
                share = self._local_share = self._own_share()
        if share is None:
            return None
        store = self._seed(key, k)
        if store is None:
            return None
        with self._lock:
            st = self._keys[key]
            shut = st.shut or (not st.stored and not any(isinstance(b, protocol.Window) for b in policy.bands))
        if not shut:
            # The window current now, on every window band, is closed to
            # the store (Go's startLocal): the state Redis last showed may
            # not hold what the others took of it since.
            try:
                v = self.scripts.run(store, "Reserve", [k, k + ":limit", k + ":shadow"],
                                     protocol.reserve_args(protocol.common_args(share, policy, fmt=3), "*", []))
            except PacerError as e:
                if e.code == "PACER_ARG" and "share" in str(e):
                    return None
                raise
            state = protocol.decode_reserve(v).state
            with self._lock:
                st.shut = True
                try:
                    st.seeded = {r.name: (r.w, r.u) for r in protocol.parse_state(state).recs if r.window} if state else {}
                except ValueError:
                    st.seeded = {}
        with self._lock:
            now = self._server_now()
            # No earlier than the latest slot Redis granted this Limiter,
            # than the latest slot the state it saw records (another
            # member's fair turn may lie beyond the queue's end), nor than
            # the end of the queue it last saw, assumed to stay as long (the
            # others went on reserving).
            horizon = st.granted_ns
            if st.state:
                try:
                    parsed = protocol.parse_state(st.state)
                    horizon = max(horizon, parsed.last_event_ns, now + parsed.queue_end_ns - st.seen_ns)
                except ValueError:
                    pass
            floor = f"{max(0, (horizon - now + 999) // 1000)}" if horizon > now and st.local_last_ns == 0 else ""
        args = protocol.reserve_args(protocol.common_args(share, policy, fmt=3), floor, [(max_us, costs)])
        before = store.execute_command("GET", k)
        try:
            v = self.scripts.run(store, "Reserve", [k, k + ":limit", k + ":shadow"], args)
        except PacerError as e:
            if e.code == "PACER_ARG" and "share" in str(e):
                return None
            raise
        recv_mono = time.monotonic()
        rep = protocol.decode_reserve(v)
        g = rep.grants[0]
        if g.seq > 0:
            self._note_windows(st, before, store.execute_command("GET", k), g.slot_ns, now)
        if g.seq == _NEVER:
            # A band can never take the cost at this share (a window's N_k
            # in every window, or a bucket's burst B_k, below it; core.lua's
            # earliest): no local share for it, and the caller waits for
            # Redis, as Go's (noShareError).
            return None
        r = self._result(key, policy, costs, g, True, recv_mono)
        r.share = share
        with self._lock:
            # The policy the handback floors Redis with, on a key no reply
            # from Redis has shown yet too.
            st.policy = policy
            st.local_last_ns = max(st.local_last_ns, g.slot_ns)
            self._local_ids += 1
            r.local_id = self._local_ids
            st.grants[r.local_id] = g.slot_ns
            if len(st.grants) > st.prune_at:
                # Grants passed a second ago have fired or moved: their
                # latest slot is all the floor needs of them. The next
                # pruning waits for twice what is left, so that a long
                # queue of grants still ahead is not scanned at each grant.
                for lid, slot in list(st.grants.items()):
                    if slot < now - 1_000_000_000 and lid not in st.asleep:
                        st.past = max(st.past, slot)
                        del st.grants[lid]
                st.prune_at = max(256, 2 * len(st.grants))
        return r

    def _note_windows(self, st: _Key, before: Any, after: Any, slot_ns: int, now: int) -> None:
        """Records in st.closed the units of each window the store's grant
        at slot_ns replaced by a later one, from its state before and
        after, and forgets those ended by now (server clock)."""
        before, after = protocol.normalize(before), protocol.normalize(after)
        with self._lock:
            st.closed = [c for c in st.closed if c[3] > now]
            if not isinstance(before, str) or not before or before == after or not isinstance(after, str):
                return
            try:
                was = {r.name: (r.w, r.u) for r in protocol.parse_state(before).recs if r.window}
                if not was:
                    return
                for r in protocol.parse_state(after).recs:
                    if r.window and r.name in was and r.w > was[r.name][0]:
                        units = self._own_units(st, r.name, *was[r.name])
                        if units > 1e-9:
                            st.closed.append((r.name, was[r.name][0], units, slot_ns))
            except ValueError:
                pass

    @staticmethod
    def _own_units(st: _Key, name: str, w: int, u: float) -> float:
        """The units of band name's window w (u in all) the store granted
        itself: those the state started with (seeded) are Redis's."""
        w0, u0 = st.seeded.get(name, (w, 0.0))
        if w0 == w:
            return u - u0
        return 0.0 if w0 > w else u

    def _come_back(self) -> None:
        """Redis answers again: hand back what the store granted (Reserve's
        floor, a pause), the adjustments kept, then pace on Redis."""
        with self._handback_lock:
            self._come_back_locked()

    def _come_back_locked(self) -> None:
        with self._lock:
            if not self._local:
                return
            keys = list(self._keys.items())
            store = self._store
            # The store's sleepers before their last check take slots on
            # Redis instead (_sleep_once), and Redis's floor is the latest
            # of the other grants: a process pacing locally takes slots at
            # its share of the fleet, so its queue runs far ahead, and
            # floored at its last slot the whole fleet would wait behind a
            # few sleepers (Go's takeHandback; a 200-process Cluster run's
            # keys at 0.2-4 calls/s of 50).
            floors: dict[str, int] = {}
            told: list[Reservation] = []
            # The handback is made at the share taken on Redis after it: back
            # from an outage of its own, members it knew that are not listed
            # yet are held (_missing counts from _back_at). A raise settled
            # meanwhile charged at the whole share, where the others keep
            # to theirs, was undercharged.
            back_before = self._back_at
            self._back_at = time.monotonic()
            for key, st in keys:
                floors[key] = max([st.past] + [slot for lid, slot in st.grants.items() if lid not in st.asleep])
                for r in st.asleep.values():
                    r.back_move = True
                    told.append(r)
        now = self._server_now()
        try:
            for key, st in keys:
                k = protocol.redis_key(self.prefix, key)
                if st.local and store is not None and st.policy is not None:
                    floor, lost = self._handback(store, k, st, now, floors[key])
                    if floor or lost:
                        args = protocol.reserve_args(protocol.common_args(self._share() or "1", st.policy, fmt=self._format,
                                                                          lost=lost), floor, [])
                        v = self.scripts.run(self.redis, "Reserve", [k, k + ":limit", k + ":shadow"], args)
                        rep = protocol.decode_reserve(v)
                        self._saw(key, rep.state, rep.stored, None)
                # A pause made locally, on any key (one this process only
                # paused has no policy here): handed back.
                if st.local_pause_ns > now:
                    d_us = (st.local_pause_ns - now + 999) // 1000
                    self.scripts.run(self.redis, "Pause", [k, k + ":limit"],
                                     protocol.common_args(self._share() or "1", None, fmt=self._format) + [str(d_us)])
                for p in list(st.pending):
                    op, slot, seq, costs, actual, pol, granted = p
                    share = self._share() or "1"
                    self.scripts.run(self.redis, "Adjust", [k, k + ":limit", k + ":done"],
                                     protocol.adjust_args(protocol.common_args(share, pol, fmt=self._format),
                                                          _at_share(op, share, granted), slot, seq, costs, actual))
                    st.pending.remove(p)
        except UNAVAILABLE:
            with self._lock:
                self._back_at = back_before
                for r in told:
                    r.back_move = False  # still away: they may fire on the store's slots
            return  # the next heartbeat tries again
        with self._lock:
            for key, st in keys:
                st.local, st.local_last_ns, st.local_pause_ns, st.seeded, st.shut = False, 0, 0, {}, False
                st.grants, st.past, st.prune_at, st.closed = {}, 0, 256, []
            self._store = localstore.LocalStore(self.scripts, self._server_now) if self._fallback else None
            self._local = False
            self._since_ms = int(time.time() * 1000)
            self._back_at = time.monotonic()
            self._back_until = self._back_at + self._back_wait
            self._local_share = None
        log.warning("pacer: back on Redis")

    def _handback(self, store: localstore.LocalStore, k: str, st: _Key, now: int, last_ns: int) -> tuple[str, str]:
        """Reserve's floor for what the store granted on a key: the latest
        slot it counts (last_ns: those of sleepers that move are left out)
        and each window band's own units ("Reserve", floor), "" if nothing;
        and the key's lost horizon (ARGV[2]'s "!<h2_us>:<seq>"), "" if no
        slot Redis granted is still ahead."""
        parts = []
        if last_ns:
            # The local slots are on the estimate of Redis's clock. Were it
            # ahead of Redis's, the callers fired that much earlier than
            # their slots say, and a slot on Redis right after the floor,
            # placed by the same estimate, would come that much less than
            # its spacing after the last of them (combination runner, seed
            # 77: 32.6 ms at 30/s, when the estimate was a round trip's
            # midpoint). It is not ahead when taken (_clock_sample); the
            # floor still leaves half the round trip that set it, against
            # the clocks' drift since.
            with self._lock:
                err = (self._offset_rtt + 1) // 2
            parts.append(str(max(0, (last_ns + err - now + 999) // 1000)))
        else:
            parts.append("0")
        # Each band's windows in order (Reserve's floor): those the state
        # no longer shows that may still be current (st.closed), then its
        # latest.
        windows = [(name, w, units) for name, w, units, until in st.closed if until > now]
        raw = protocol.normalize(store.execute_command("GET", k))
        if isinstance(raw, str) and raw:
            try:
                for r in protocol.parse_state(raw).recs:
                    if r.window:
                        windows.append((r.name, r.w, self._own_units(st, r.name, r.w, r.u)))
            except ValueError:
                pass
        for name, w, units in sorted(windows):
            if units > 1e-9:
                parts.append(f"{name}:{w}:{protocol.fmt_num(units)}")
        lost = protocol.lost_horizon(st.granted_ns, now, st.seq) if st.granted_ns > now else ""
        if parts == ["0"] and not last_ns:
            # Nothing granted locally. A local grant whose slot has passed
            # still floors Redis at now ("0", as Go's handback.matters):
            # the bucket may not have refilled since, and without it Redis
            # (restarted empty) granted a slot at once, less than a spacing
            # after the last local one (combination runner, seed 77).
            return "", lost
        return " ".join(parts), lost


#: The policies' reports (Go's): at most 100 a heartbeat, each again every
#: minute while the key is in use.
_REPORT_BATCH, _REPORT_EVERY = 100, 60.0

#: How long before its slot a sleeper reads the key's state for a pause,
#: plus the shortest round trip to Redis lately (Limiter._check_lead).
_PRECHECK = 0.002

#: The span of one window of _LowRTT, in ns (Go's lowWindow).
_LOW_WINDOW_NS = 10_000_000_000


class _LowRTT:
    """How far away Redis is: the shortest round trip of the calls in the
    current window of _LOW_WINDOW_NS and in the one before it (Go's
    clockSync.low). One slow call (a stall) does not lengthen it, a Redis
    that moved farther is followed within two windows, and none is 0.
    Guarded by the Limiter's lock."""

    __slots__ = ("cur", "prev", "start")

    def __init__(self) -> None:
        self.cur = 0
        self.prev = -1  # none
        self.start: int | None = None  # when the current window began, time.time_ns()

    def note(self, rtt: int, recv: int) -> None:
        """Takes a call's round trip (ns), whose reply arrived at recv
        (time.time_ns())."""
        rtt = max(rtt, 0)
        age = None if self.start is None else recv - self.start
        if age is None or age >= 2 * _LOW_WINDOW_NS:
            self.prev, self.cur, self.start = -1, rtt, recv
        elif age >= _LOW_WINDOW_NS:
            self.prev, self.cur, self.start = self.cur, rtt, recv
        else:
            self.cur = min(self.cur, rtt)

    def value_ns(self) -> int:
        """The shortest round trip of the two windows, in ns; 0 before
        the first call."""
        if self.start is None:
            return 0
        return self.cur if self.prev < 0 else min(self.cur, self.prev)


def _may_sent(e: BaseException) -> bool:
    """Whether a call that failed with e may have reached Redis, and so may
    still run there: not one whose connection was never made."""
    return not (isinstance(e, redis.exceptions.ConnectionError)
                and not isinstance(e, redis.exceptions.TimeoutError) and "connecting to" in str(e))


#: How much later than the clock estimate a reply may arrive before its
#: slots count as placed late (Go's MaxEarly, 1 ms): the estimate's own
#: error.
_MAX_EARLY = 0.001

#: The least time a ping after a timed-out call waits for Redis (_lost).
_PING_TIMEOUT = 2.0


def _confirm_budget(timeout: float) -> float:
    """How long a ping after a call that timed out may take before Redis
    counts as gone: eight of the client's socket timeouts, at least
    _PING_TIMEOUT (Go's outage.ConfirmBudget: eight CallTimeouts, at least
    2 s). Before, four: a Redis slow by 4 to 8 timeouts was an outage to
    Python and not to Go."""
    return max(_PING_TIMEOUT, 8 * timeout)


#: How much longer than the shortest round trip seen a heartbeat's script
#: may take before its view of the fleet is too old to stand (Go's default
#: CallTimeout: its lateView).
_LATE_VIEW = 0.25

#: How often a sleeper reads the key's state for a resume that moved it.
_POLL = 0.1

#: How many times a reservation that Redis ran past its deadline goes to
#: Redis again at once; then its caller waits for Redis between tries (Go's
#: maxSlowTries).
_SLOW_TRIES = 4

def _sleep_to(r: Reservation, before: float) -> None:
    """Sleeps until before seconds ahead of r's slot, reading the clock
    once: read twice, a slot just beyond before at the first reading may be
    within it at the second, and time.sleep refuses a negative length."""
    d = r.delay() - before
    if d > 0:
        time.sleep(d)


def _at_share(op: str, share: str, granted: str) -> str:
    """Adjust's op for a reservation granted at share granted, adjusted at
    share: with "@" when that is the same share, not the whole one
    (adjust.lua gives its units back at the share's spacing, what they
    took; else at the whole rate's, never more than they took)."""
    return op + "@" if share != "1" and share == granted else op


def _charges_window(r: Reservation) -> bool:
    """Whether r's cost charges a window band."""
    return any(isinstance(b, protocol.Window) and protocol.charged(r.policy, r.costs, b) for b in r.policy.bands)


# How many times sleep moves a reservation to a fresh slot for lateness at
# most; it uses the last however late it wakes for it (Go's
# reserve.MaxLateMoves).
MAX_LATE_MOVES = 3


def _max_lateness(r: Reservation) -> float:
    """How late after its slot a caller may wake and still use it, in
    seconds; negative: no limit. Half the spacing of the fastest bucket its
    cost charges, at least 1 ms (no bucket charged: no limit), and never
    past the end of a window its cost charges (Go's
    Reservation.maxLateness). Before, a window's end did not bound it: a
    sleeper woken just after the end of the window its slot lay in fired
    in the next window, on top of the units the fleet was granted there
    (test_max_lateness_ends_with_the_window); and a policy of windows only
    moved a sleeper 1 ms late, where Go's fires it within its window."""
    spacings = [c / b.rate for b in r.policy.bands if isinstance(b, protocol.Bucket)
                for u, c in zip(r.policy.units, r.costs) if u == b.unit and c > 0]
    late = max(0.001, min(spacings) / 2) if spacings else -1.0
    end = protocol.window_end(r.policy, r.costs, r.slot_ns)
    if end is not None:
        d = (end - r.slot_ns) / 1e9
        if late < 0 or d < late:
            late = d
    return late


class _Patient:
    """A client for one call that changes state (Reserve), with
    ``execute_command`` only: the call is not cut at the client's socket
    timeout. It may have run, and sent again it would be charged twice (a
    daily window of 1 gave its caller tomorrow's slot); and on a Redis
    steadily slower than the timeout, every try timed out and went again,
    for ever. Past the timeout, Redis is pinged (Limiter._lost) as for any
    call that timed out: if it answers, the call waits for its own reply as
    long again as the ping may take; if not, Redis is gone. Go's Limiter
    does the same (reserve's call, TestTimedOutCallChargedOnce)."""

    def __init__(self, lim: Limiter) -> None:
        self.lim = lim

    def execute_command(self, *args: Any) -> Any:
        lim = self.lim
        timeout = lim._socket_timeout()
        if not timeout:
            return lim.redis.execute_command(*args)
        pool = lim.redis.connection_pool
        try:
            conn = pool.get_connection()  # redis-py 5.1 on: no command name
        except TypeError:
            conn = pool.get_connection(args[0])
        done = False
        try:
            conn.send_command(*args)
            if not conn.can_read(timeout=timeout):
                e = redis.exceptions.TimeoutError(f"Timeout reading from socket (a reply later than {timeout} s)")
                if lim._lost(e):
                    # Raised as a ConnectionError: the ping has decided.
                    raise redis.exceptions.ConnectionError(f"{e}, and Redis did not answer a ping") from e
                if not conn.can_read(timeout=_confirm_budget(timeout)):
                    raise e
            try:
                v = conn.read_response()
            except redis.exceptions.ResponseError:
                done = True  # an error reply, read whole
                raise
            done = True
            return v
        finally:
            if not done:
                conn.disconnect()  # its reply may still come: not for the next caller
            pool.release(conn)


class _Back(Exception):
    """The Limiter is back on Redis: the call goes there."""


class _NoShare(Exception):
    """This Limiter may take nothing on Redis now (every rank of the held
    members' fleet is held): treated as Redis unavailable."""



