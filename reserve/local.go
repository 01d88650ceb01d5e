package reserve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
)

// historyKeep is how many entries a key's history keeps when a Limiter
// writes one (Admin's default).
const historyKeep = 50

// The local fallback: while Redis is unavailable, a Limiter runs the very
// scripts it runs on Redis (package lua) on a store of its own
// (internal/luastore, an in-process keyspace), at its own share of the
// fleet (core.lua's member share: its rank's part of every band), on the
// server's clock as it estimates it. Every pacing rule is the scripts'
// (buckets, windows, stored limits, pauses, settles, fair turns); this
// file only moves a key's state between the two stores, so that they form
// one schedule per key:
//
//   - Redis to local: a key's local state starts from the state Redis last
//     showed this Limiter (every granting reply carries it, with the stored
//     limit: the key's state's seen and stored), and no earlier than the
//     latest slot Redis granted it (granted: leases and holds too), nor
//     than the end of the queue it saw, assumed to stay as long (the
//     others went on reserving). The floor is applied by reserve.lua's own
//     floor argument, run on the store. The floor also closes each window
//     band's window current then (its "*"): what the others took of it on
//     Redis since that state is unknown, up to all of it, so the local
//     share starts with the next window.
//   - Local to Redis: what the store granted (its latest slot, each window
//     band's units in each window that may still be current, a pause made
//     locally) is handed back as reserve.lua's floor and pause.lua's
//     pause: at once for every key when Redis answers again, and with a
//     key's next call after a single failed one. Cancels and settles of
//     Redis's grants made while Redis was unavailable are made on Redis
//     then too.

// localKey is the local fallback's part of a key (a field of its state,
// keys.go).
type localKey struct {
	spec *spec // the policy the key was last paced by locally (keyOnly: only paused)
	held bool  // the store holds the key
	// shut is set once the store's state has closed the window current
	// when the key was first paced locally (startLocal): a key only
	// paused so far has not.
	shut bool
	// What the store granted, since the key's local state started: its
	// latest slot (server clock, Unix ns), and the windows the state
	// started with (handback counts only the store's own units; a pause
	// is read from the store's state).
	last   int64
	seeded map[string]layout.WindowUse
	// seededPause is the end of the pause the state started with (Unix
	// ns; 0: none): Redis's, not the store's own.
	seededPause int64
	// hand is what was taken from the store and has not reached Redis
	// yet (a call that carried it failed); inflight, what a call in flight
	// carries.
	hand, inflight *handback
	// grants are the store's grants whose slots may still be ahead (local
	// id to slot, server clock, Unix ns); past is the latest slot of those
	// swept out of it once passed. asleep are the grants whose callers
	// sleep in Sleep, not yet past their last check: at the handback when
	// Redis answers again they take slots on Redis instead (backMove), and
	// the floor leaves them out (backFloor).
	grants map[string]int64
	past   int64
	asleep map[string]*Reservation
	// closed are units the store granted in windows its state no longer
	// shows: the state keeps a band's latest window only, and a grant in
	// a later one (a local queue running into the next window) replaces a
	// window that may still be current. Its units would be lost to the
	// handback when the grants in the later window move to Redis and leave
	// the floor (backFloor): Redis would grant that window's N again in it
	// (TestHandbackKeepsFullWindow). until is the latest slot of the grants
	// that replaced it (server clock, Unix ns; 0 until they are placed):
	// the window has ended by then.
	closed []closedWindow
}

// A closedWindow is a window's units the store's state no longer shows
// (localKey.closed).
type closedWindow struct {
	windowUnits
	until int64
}

// own returns the units of band name's window use w that the store
// granted itself: those the state started with (seeded) are Redis's.
func (lk *localKey) own(name string, w layout.WindowUse) float64 {
	units := w.U
	if seed, ok := lk.seeded[name]; ok && seed.W == w.W {
		units -= seed.U
	} else if ok && seed.W > w.W {
		units = 0
	}
	return units
}

// noteWindows records, from the store's state before and after a script
// ran on the key, the units of each window the run replaced by a later
// one (closed), and forgets those ended by nowNS (server clock). ks.mu is
// held.
func (lk *localKey) noteWindows(before, after string, nowNS int64) {
	lk.closed = slices.DeleteFunc(lk.closed, func(c closedWindow) bool { return c.until != 0 && c.until <= nowNS })
	if before == after || before == "" {
		return
	}
	was := layout.Windows(before)
	if len(was) == 0 {
		return
	}
	for name, w := range layout.Windows(after) {
		if old, ok := was[name]; ok && w.W > old.W {
			if units := lk.own(name, old); units > 1e-9 {
				lk.closed = append(lk.closed, closedWindow{windowUnits: windowUnits{band: name, w: int64(old.W), units: units}})
			}
		}
	}
}

// placed records the latest slot of a run's grants on the store: the
// windows the run closed have ended by then. ks.mu is held.
func (lk *localKey) placed(last int64) {
	lk.last = max(lk.last, last)
	for i := range lk.closed {
		if lk.closed[i].until == 0 {
			lk.closed[i].until = last
		}
	}
}

// sweepGrantsAt is how many grants a key's table holds before the passed
// ones are swept out of it (into past).
const sweepGrantsAt = 256

// noteGrant records a grant of the store, its id and slot, at nowNS (server
// clock). ks.mu is held.
func (lk *localKey) noteGrant(id string, slotNS, nowNS int64) {
	if lk.grants == nil {
		lk.grants = map[string]int64{}
	}
	if len(lk.grants) >= sweepGrantsAt {
		for g, s := range lk.grants {
			if s <= nowNS {
				lk.past = max(lk.past, s)
				delete(lk.grants, g)
			}
		}
	}
	lk.grants[id] = slotNS
}

// backFloor returns the latest slot of the store's grants that will be
// used as granted: every one but those whose callers sleep before their
// last check (asleep), which it tells to take a slot on Redis instead.
// ks.mu is held.
func (lk *localKey) backFloor() (last int64, moved int) {
	last = lk.past
	for id, slot := range lk.grants {
		if r := lk.asleep[id]; r != nil {
			r.backMove.Store(true)
			moved++
			continue
		}
		last = max(last, slot)
	}
	return last, moved
}

// A handback is what the store granted on a key, for Redis to take into
// account: reserve.lua's floor and a pause.
type handback struct {
	last    int64 // the latest slot granted locally, Unix ns; 0: none
	pause   int64 // the end of a pause made locally, Unix ns; 0: none
	windows []windowUnits
	spec    *spec // the policy to hand it back with
}

// windowUnits are units granted in window w of band.
type windowUnits struct {
	band  string
	w     int64
	units float64
}

// maxHandWindows bounds the windows of one band a handback keeps: past it,
// the earliest are dropped. A handback holds the windows its key's local
// grants touched that may still be current; more than a few come only from
// handbacks that failed again and again, and the earliest of those have
// long ended.
const maxHandWindows = 16

// merge adds o to h (nil is nothing): units of one window add up, and
// each window is kept (Redis applies them in order: reserve.lua's floor).
func (h *handback) merge(o *handback) *handback {
	if o == nil {
		return h
	}
	if h == nil {
		c := *o
		c.windows = slices.Clone(o.windows)
		return &c
	}
	h.last, h.pause = max(h.last, o.last), max(h.pause, o.pause)
	if h.spec == nil || h.spec == keyOnly {
		h.spec = o.spec
	}
	for _, w := range o.windows {
		i := slices.IndexFunc(h.windows, func(x windowUnits) bool { return x.band == w.band && x.w == w.w })
		if i >= 0 {
			h.windows[i].units += w.units
			continue
		}
		h.windows = append(h.windows, w)
		var same []int
		for j, x := range h.windows {
			if x.band == w.band {
				same = append(same, j)
			}
		}
		if len(same) > maxHandWindows {
			first := slices.MinFunc(same, func(a, b int) int { return cmp.Compare(h.windows[a].w, h.windows[b].w) })
			h.windows = slices.Delete(h.windows, first, first+1)
		}
	}
	return h
}

// floorArg returns h as reserve.lua's floor at now (server clock, Unix
// ns).
func (h *handback) floorArg(now int64) string {
	var b strings.Builder
	us := int64(0)
	if h != nil && h.last > now {
		us = (h.last - now + 999) / 1000
	}
	b.WriteString(strconv.FormatInt(us, 10))
	if h != nil {
		ws := slices.Clone(h.windows)
		slices.SortStableFunc(ws, func(x, y windowUnits) int {
			if c := strings.Compare(x.band, y.band); c != 0 {
				return c
			}
			return int(x.w - y.w)
		})
		for _, w := range ws {
			b.WriteString(" " + w.band + ":" + strconv.FormatInt(w.w, 10) + ":" + strconv.FormatFloat(w.units, 'f', -1, 64))
		}
	}
	return b.String()
}

// matters reports whether h holds anything Redis must know at now: a local
// grant (even one whose slot has passed: the bucket may not have refilled
// since), a pause still in force, or window units.
func (h *handback) matters(now int64) bool {
	return h != nil && (h.last != 0 || h.pause > now || len(h.windows) > 0)
}

// maxAssumedQueue bounds the queue a Limiter assumes the others kept (see
// localStart).
const maxAssumedQueue = 10 * time.Second

// maxPending bounds the cancels and settles kept, per key, for Redis.
const maxPending = 10_000

// A pendingAdjust is a cancel or settle of a reservation Redis granted,
// made while Redis was unavailable.
type pendingAdjust struct {
	spec    *spec
	slotNS  int64
	id      string
	share   string // the share it was granted at (Reservation.share)
	amounts []float64
	actual  []float64 // nil: cancel
}

// newStore returns the local fallback's store: its TIME and its keys'
// expiry follow the server's clock as this Limiter estimates it (or the
// Limiter's Clock with ClientTime), the clock the scripts use on Redis.
func (l *Limiter) newStore() *luastore.Store {
	return luastore.New(func() time.Time {
		ns, _ := l.serverNow()
		return time.Unix(0, ns)
	})
}

// serverNow returns now on the clock the scripts use: the server's, as
// estimated from the calls' round trips, or the Limiter's Clock when one is
// set (the scripts then use it too). Unix ns.
func (l *Limiter) serverNow() (int64, time.Time) {
	now := l.clock.Now()
	if !l.serverTime {
		return now.UnixNano(), now
	}
	return l.sync.server(now), now
}

// A noShareError is the outage's answer to a call this Limiter cannot
// serve on any share now: it joined the fleet after members that may pace
// locally without it, Redis never answered it (it does not know the
// fleet), or its share of a window band is below the cost. It matches
// ErrUnavailable. A caller who can wait never sees it (reserve.go waits
// for Redis or a share instead); one that asked not to wait does.
type noShareError struct{ err error }

func (e *noShareError) Error() string { return e.err.Error() }
func (e *noShareError) Unwrap() error { return e.err }

// noShareErr is the refusal of a Limiter that joined the fleet after
// members that pace locally without it (fleetView.alsoN, redisShareOK).
func (l *Limiter) noShareErr(key string) error {
	if wait, held, n, ok := l.fleet.awaitingFleet(); ok {
		return &noShareError{fmt.Errorf("reserve: %q: %w: this Limiter is back from an outage while %d of the fleet's %d members are still held (they may pace locally): its calls on Redis wait for them, %v at the most, rather than take its own rank's few instants, which would run the key's queue ahead of theirs", key, l.unavailableErr(), held, n, wait.Round(time.Millisecond))}
	}
	if sizes, ok := l.fleet.splitSizes(); ok {
		return &noShareError{fmt.Errorf("reserve: %q: %w: members held or not back yet may pace locally on fleets of different sizes %v (they lost Redis around a change of the fleet), which no share of one size keeps clear of: this Limiter's calls wait until they are back on Redis or forgotten", key, l.unavailableErr(), sizes)}
	}
	if wait, ok := l.fleet.awaitingHeartbeat(); ok {
		return &noShareError{fmt.Errorf("reserve: %q: %w: this Limiter's last heartbeat failed or ran late, so it does not know whether the other members pace locally now: its calls on Redis wait for the next heartbeat, %v at the most, before they take its own share", key, l.unavailableErr(), wait.Round(time.Millisecond))}
	}
	return &noShareError{fmt.Errorf("reserve: %q: %w: this Limiter joined the fleet after members that may pace locally without it (Redis failed just after it joined, or they lost Redis before): it has no share to pace on until they are back on Redis", key, l.unavailableErr())}
}

// localShareArg returns the share this Limiter paces key by locally, as
// the scripts take it.
func (l *Limiter) localShareArg(key string) (string, error) {
	sh, ok := l.fleet.localShare()
	if !ok && l.fleet.newcomer() {
		return "", l.noShareErr(key)
	}
	if !ok {
		return "", &noShareError{fmt.Errorf("reserve: %q: %w: Redis has never answered this Limiter, so it does not know how many share the limit (set Options.FleetSize to pace locally meanwhile)", key, l.unavailableErr())}
	}
	return sh.Arg(), nil
}

// stalledErr is the refusal of a local slot while the probes are stalled
// (probesStalled).
func (l *Limiter) stalledErr(key string) error {
	return &noShareError{fmt.Errorf("reserve: %q: %w: this Limiter's probes of Redis fell behind (its process was off the CPU): the fleet may be back on Redis, and its calls wait for a probe before they pace locally", key, l.unavailableErr())}
}

// beatOutErr is the refusal of a local slot while the fleet may count
// this Limiter on Redis (localSlotsReady).
func (l *Limiter) beatOutErr(key string) error {
	return &noShareError{fmt.Errorf("reserve: %q: %w: a heartbeat of this Limiter's saying it is on Redis may have run there after it switched to local pacing (Redis held it), so the fleet may take this Limiter's share on Redis: its calls wait until the fleet has heard it pace locally", key, l.unavailableErr())}
}

// onRedisErr is the refusal of a local slot to a Limiter on Redis (not
// degraded) whose calls on key timed out or ran late maxSlowTries times
// after its pings found Redis answering (grantEither).
func (l *Limiter) onRedisErr(key string) error {
	return &noShareError{fmt.Errorf("reserve: %q: %w: Redis answers this Limiter's pings but did not run its calls on the key in time, and the fleet counts it on Redis, which leaves it no local share: its calls wait for Redis", key, l.unavailableErr())}
}

// localKeys are key's Redis keys in the store: its state and stored limit,
// then more.
func (l *Limiter) localKeys(key string, more ...string) []string { return l.keys(key, more...) }

// dropLocalState deletes the store's keys of key's rate state (all under
// its Redis key), not those of its in-flight band: seats.go keeps the
// seats held on the store, and hands them back itself (renewSeats).
// Before, seeding a key's rate state deleted every store key under its
// name, the seats' too: a call of a policy with both bands took its seat,
// then its slot's first local grant forgot the seats held, and the process
// took its share of N again beside them (TestSeatsWithRateThroughOutage;
// combination runner, seed 21: 5 calls open on N = 4). ks.mu is held.
func (l *Limiter) dropLocalState(key string) {
	seats := l.seatKeys(key)
	for _, k := range l.store.Keys(l.RedisKey(key)) {
		if !slices.Contains(seats, k) {
			l.store.Del(k)
		}
	}
}

// startLocal makes sure the store holds key, seeded as the file's comment
// says, for s (keyOnly: a pause alone). ks.mu is held.
func (l *Limiter) startLocal(ctx context.Context, ks *keyState, s *spec, shareArg string) error {
	lk := ks.local
	if lk == nil {
		lk = &localKey{}
		ks.local = lk
	}
	if s != keyOnly || lk.spec == nil {
		lk.spec = s
	}
	if lk.held && (s == keyOnly || lk.shut) {
		return nil
	}
	rk := l.RedisKey(ks.name)
	nowNS, _ := l.serverNow()
	if !lk.held {
		l.dropLocalState(ks.name)
		if ks.seen != "" {
			if exp := layout.Expiry(ks.seen); exp > nowNS {
				l.store.Set(rk, ks.seen, time.Duration(exp-nowNS))
			}
		}
		if ks.stored != "" {
			l.store.Set(rk+":limit", ks.stored, 0)
		}
		lk.held, lk.last = true, 0
		state, _ := l.store.Get(rk)
		lk.seeded = layout.Windows(state)
		lk.seededPause = layout.PauseEnd(state)
	}
	if s == keyOnly {
		return nil // the floor comes with the first policy the key is paced by
	}
	// The floor: no earlier than what Redis granted this Limiter, than what
	// the store granted that Redis has not taken yet, nor than the queue
	// this Limiter saw (the others went on reserving: assume it stayed as
	// long; a queue that drained costs at most its length, one that grew
	// may still overlap its first slots).
	h := (&handback{last: ks.horizon()}).merge(lk.hand).merge(lk.inflight)
	if ks.seen != "" {
		if q := min(layout.Queue(ks.seen), int64(maxAssumedQueue)); q > 0 {
			h.last = max(h.last, nowNS+q)
		}
	}
	// And in the window current now, on every window band (the policy's,
	// or a stored limit's), what the others may have taken of it since
	// the state Redis last showed this Limiter is counted (the floor's
	// "*"). Those units are Redis's (seeded), never handed back. A key
	// only paused so far gets its floor now: the store has granted nothing
	// on it yet.
	floor := ""
	if h.last > nowNS || len(h.windows) > 0 {
		floor = h.floorArg(nowNS)
	}
	if ks.stored != "" || slices.ContainsFunc(s.bands, func(b bandSpec) bool { return !b.bucket }) {
		floor = strings.TrimPrefix(floor+" *", " ")
	}
	if floor != "" {
		args := l.argsWith(ks.name, l.clock.Now(), s, 2, shareArg, true)
		args = append(args, floor, "0")
		if _, err := reserveScript.Run(ctx, l.store, l.keys(ks.name, ":shadow"), args...).Result(); err != nil {
			return l.localError(names.OpReserve, ks.name, err)
		}
	}
	lk.shut = true
	state, _ := l.store.Get(rk)
	lk.seeded = layout.Windows(state)
	return nil
}

// takeHandback takes what must go to Redis for the key: what the store
// granted (the store forgets the key) and what earlier calls could not
// hand back. The caller gives it back (handbackDone) if its call fails.
//
// back is set at the handback when Redis answers again (handBack): the
// store's grants whose callers still sleep before their last check then
// take slots on Redis instead (Sleep's MovedBack), and the floor is the
// latest of the other grants, not of every grant. At a fleet's share a
// process's local queue runs far ahead (at 200 processes and 50/s, a
// slot every 4 s of its rank: 12 to 28 s ahead), and a floor at its end
// held the whole key there: the fleet's other callers waited behind a
// few sleepers. A call that carries a handback after a single failed
// call (run.go) keeps every grant in the floor: the Limiter is not
// degraded, and the sleepers' calls could reach Redis before its floor.
// ks.mu is held.
func (l *Limiter) takeHandback(ks *keyState, back bool) (*handback, bool) {
	lk := ks.local
	if lk == nil {
		return nil, false
	}
	h := lk.hand
	lk.hand = nil
	nowNS, _ := l.serverNow()
	if lk.held {
		rk := l.RedisKey(ks.name)
		state, _ := l.store.Get(rk)
		last := lk.last
		if back {
			var moved int
			if last, moved = lk.backFloor(); moved > 0 {
				ks.changed() // wake them
			}
		}
		g := &handback{last: last, pause: layout.PauseEnd(state), spec: lk.spec}
		if g.pause <= lk.seededPause && ks.pause.endNS != lk.seededPause {
			// Redis's pause the store started with, which Redis has moved
			// since (an operator resumed it): Redis's word is the newer.
			g.pause = 0
		}
		for name, w := range layout.Windows(state) {
			if units := lk.own(name, w); units > 1e-9 {
				g.windows = append(g.windows, windowUnits{band: name, w: int64(w.W), units: units})
			}
		}
		for _, c := range lk.closed {
			if c.until == 0 || c.until > nowNS {
				g.windows = append(g.windows, c.windowUnits)
			}
		}
		l.dropLocalState(ks.name)
		lk.held, lk.shut, lk.last, lk.seeded, lk.seededPause = false, false, 0, nil, 0
		lk.grants, lk.past, lk.asleep, lk.closed = nil, 0, nil, nil
		h = h.merge(g)
	}
	if !h.matters(nowNS) {
		if lk.inflight == nil {
			ks.local = nil
		}
		return nil, false
	}
	lk.inflight = lk.inflight.merge(h)
	return h, true
}

// handbackDone ends a call that carried h: Redis has it (ok), or it goes
// back to be handed over by a later call. ks.mu is held.
func (l *Limiter) handbackDone(ks *keyState, h *handback, ok bool) {
	lk := ks.local
	if lk == nil {
		return
	}
	lk.inflight = nil
	if !ok {
		lk.hand = lk.hand.merge(h)
		l.anyHandback.Store(true)
	}
	if !lk.held && lk.hand == nil {
		ks.local = nil
	}
}

// retryHandbacks hands to Redis the handbacks that failed calls left, after
// a heartbeat that found Redis (loop): a key whose handback Redis refused
// when the Limiter came back (on a Cluster, its master still frozen while
// the others answered the probe) then gets it within a heartbeat of
// answering, with the pause made locally in it, and not only with the
// Limiter's next call on the key, which its own callers, waiting that
// pause out, make only once it has ended (TestFailedHandbackRetriedWithHeartbeat).
// As retryPending, it stops at the first key whose call fails again: the
// others wait for the next heartbeat.
func (l *Limiter) retryHandbacks(ctx context.Context) {
	if !l.anyHandback.Swap(false) {
		return
	}
	for _, ks := range l.states.all() {
		ks.mu.Lock()
		if lk := ks.local; lk == nil || lk.held || lk.hand == nil {
			ks.mu.Unlock()
			continue
		}
		h, ok := l.takeHandback(ks, false)
		granted, seq := ks.horizon(), ks.seenSeq
		ks.mu.Unlock()
		if !ok {
			continue
		}
		err := l.giveBack(ctx, ks.name, h, granted, seq)
		ks.mu.Lock()
		l.handbackDone(ks, h, err == nil)
		ks.mu.Unlock()
		if err != nil {
			break // handbackDone kept it, and marked it for the next heartbeat
		}
	}
}

// hasLocal reports whether key has local grants Redis has not seen.
func (l *Limiter) hasLocal(key string) bool {
	ks := l.states.peek(key)
	if ks == nil {
		return false
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.local != nil
}

// localPauseEnd returns the end of the pause of ks's key in the store
// (server clock, Unix ns; 0: none).
func (l *Limiter) localPauseEnd(ks *keyState) int64 {
	if l.store.Empty() {
		return 0 // Redis has been answering: nothing to read
	}
	state, ok := l.store.Get(l.RedisKey(ks.name))
	if !ok {
		return 0
	}
	return layout.PauseEnd(state)
}

// localError maps the error of a script run on the store, as mapError
// maps Redis's.
func (l *Limiter) localError(op, key string, err error) error {
	if code, ok := layout.ErrorCode(err); ok {
		if sentinel := scriptCodes[code]; sentinel != nil {
			return fmt.Errorf("reserve: %s %q: %w: %w", op, key, sentinel, err)
		}
	}
	return fmt.Errorf("reserve: %s %q (local): %w", op, key, err)
}

// runLocal runs script on the store for key, as one of the key's local
// operations: it seeds the key first. s is the policy (keyOnly: none).
func (l *Limiter) runLocal(ctx context.Context, op string, ks *keyState, s *spec, script *redis.Script, keys []string, args []any, shareArg string) (any, error) {
	if err := l.startLocal(ctx, ks, s, shareArg); err != nil {
		return nil, err
	}
	rk := l.RedisKey(ks.name)
	before, _ := l.store.Get(rk)
	res, err := script.Run(ctx, l.store, keys, args...).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, l.localError(op, ks.name, err)
	}
	after, _ := l.store.Get(rk)
	nowNS, _ := l.serverNow()
	ks.local.noteWindows(before, after, nowNS)
	return res, nil
}

// pauseLocal pauses key on the store.
func (l *Limiter) pauseLocal(ctx context.Context, key string, s *spec, d time.Duration) error {
	shareArg, err := l.localShareArg(key)
	if err != nil {
		shareArg = "1" // a pause takes no share: the provider's word holds whatever the fleet
	}
	now := l.clock.Now()
	args := l.argsWith(key, now, s, 1, shareArg, true)
	args = append(args, strconv.FormatInt(int64((d+time.Microsecond-1)/time.Microsecond), 10))
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	res, err := l.runLocal(ctx, names.OpPause, ks, s, pauseScript, l.keys(key), args, shareArg)
	if err != nil {
		return err
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 5 {
		return replyError(names.OpPause, key, res)
	}
	base, err1 := l.localBase(now, reply)
	end, ok1 := reply[2].(int64)
	if err1 != nil || !ok1 {
		return replyError(names.OpPause, key, res)
	}
	if end > 0 {
		// Sleepers read it from the store (localPauseEnd); Redis is told
		// it with the handback, and again if it loses it (own).
		endNS := base.serverNS + end
		ks.mine(endNS, -1, s)
		ks.changed()
	}
	return nil
}

// localBase reads the now_us, now_ns that begin a reply of the store,
// whose TIME is the server's clock as estimated (serverNow); with a client
// clock, the now the script was given.
func (l *Limiter) localBase(now time.Time, reply []any) (replyTime, error) {
	if len(reply) < 2 {
		return replyTime{}, errors.New("bad reply time")
	}
	us, ok1 := reply[0].(int64)
	ns, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return replyTime{}, errors.New("bad reply time")
	}
	return l.localBaseNS(now, us*1000+ns), nil
}

// localBaseNS is localBase for a script of the store that ran at serverNS.
func (l *Limiter) localBaseNS(now time.Time, serverNS int64) replyTime {
	b := replyTime{serverNS: serverNS, local: now}
	if l.serverTime {
		// The store read the server's clock as estimated (serverNow): the
		// same estimate places the instant back on the local clock.
		b.local = l.sync.localOf(b.serverNS)
	}
	return b
}

// adjustLocal cancels or settles a reservation the store granted and
// still holds. ks.mu is held.
func (l *Limiter) adjustLocal(ctx context.Context, ks *keyState, r *Reservation, actual []float64) error {
	shareArg, err := l.localShareArg(r.key)
	if err != nil {
		shareArg = "1" // a give-back takes no share
	}
	op := names.OpCancel
	if actual != nil {
		op = names.OpSettle
	}
	_, err = l.runLocal(ctx, op, ks, r.spec, adjustScript, l.adjustKeys(r, actual), l.adjustArgs(r, r.localID, actual, shareArg, true), shareArg)
	return err
}

// addPending queues a cancel or settle of a Redis reservation made while
// Redis was unavailable. ks.mu is held.
func (l *Limiter) addPending(ks *keyState, p pendingAdjust) {
	if len(ks.pending) >= maxPending {
		l.droppedAdjusts.Add(1)
		return
	}
	ks.pending = append(ks.pending, p)
	l.anyPending.Store(true)
}

// handBack runs when Redis answers again: every key the store holds, every
// handback a failed call left, and every key with a slot Redis granted
// this Limiter still ahead (a Redis restarted empty has forgotten it) goes
// to Redis as a floor (one call per key, with no reservation), a pause
// made locally goes with it, and the adjustments Redis has not seen are
// made. Keys whose call fails stay for their next call.
func (l *Limiter) handBack(ctx context.Context) {
	nowNS, _ := l.serverNow()
	stored := map[string]string{}
	type work struct {
		ks      *keyState
		pending []pendingAdjust
	}
	var todo []work
	for _, ks := range l.states.all() {
		ks.mu.Lock()
		if ks.local != nil || ks.horizon() > nowNS || len(ks.pending) > 0 {
			todo = append(todo, work{ks, ks.pending})
			ks.pending = nil
		}
		if ks.stored != "" && ks.local != nil && ks.local.held {
			// Paced locally by a stored limit: put it back if Redis lost
			// it (restore.lua), so that the members still pacing locally
			// and those back on Redis pace by one limit.
			stored[ks.name] = ks.stored
		}
		ks.mu.Unlock()
	}
	for _, k := range slices.Sorted(maps.Keys(stored)) {
		l.restoreStored(ctx, k, stored[k])
	}
	// In-flight bands: Redis counts exactly the seats this Limiter holds
	// now (given back and taken on the store meanwhile), and its waiters
	// queue on Redis again.
	l.renewSeats(ctx)
	slices.SortFunc(todo, func(a, b work) int { return strings.Compare(a.ks.name, b.ks.name) })
	for _, w := range todo {
		ks := w.ks
		ks.mu.Lock()
		h, ok := l.takeHandback(ks, true)
		granted, seq := ks.horizon(), ks.seenSeq
		ks.mu.Unlock()
		var err error
		if ok || granted > nowNS {
			err = l.giveBack(ctx, ks.name, h, granted, seq)
		}
		if ok {
			ks.mu.Lock()
			l.handbackDone(ks, h, err == nil)
			ks.mu.Unlock()
		}
		_ = l.makePending(ctx, ks, w.pending)
	}
	l.warnDropped()
}

// makePending makes on Redis the adjustments pending of ks's key, taken
// from ks.pending, in order; from the first that finds Redis unavailable
// on, they are kept again, and it reports false.
func (l *Limiter) makePending(ctx context.Context, ks *keyState, pending []pendingAdjust) bool {
	for i, p := range pending {
		r := &Reservation{lim: l, key: ks.name, spec: p.spec, amounts: p.amounts, slotNS: p.slotNS, share: p.share}
		if err := r.adjustRedis(ctx, p.id, p.actual); err != nil && errors.Is(err, ErrUnavailable) {
			ks.mu.Lock()
			ks.pending = append(slices.Clone(pending[i:]), ks.pending...)
			l.anyPending.Store(true)
			if n := len(ks.pending) - maxPending; n > 0 {
				l.droppedAdjusts.Add(int64(n))
				ks.pending = ks.pending[:maxPending]
			}
			ks.mu.Unlock()
			return false
		}
	}
	return true
}

// retryPending makes the adjustments Redis refused while this Limiter
// stayed on it (a failure under FailAfter: a timeout, a Redis at its
// maxmemory): the loop calls it after a heartbeat that found Redis, so
// that a raise settled then is paid within a heartbeat, not at the end of
// the next outage. (handBack makes them after an outage.) It stops at the
// first key that finds Redis unavailable again: the others wait for the
// next heartbeat, so that a slow Redis holds the loop one call at most.
func (l *Limiter) retryPending(ctx context.Context) {
	if !l.anyPending.Swap(false) {
		return
	}
	for _, ks := range l.states.all() {
		ks.mu.Lock()
		pending := ks.pending
		ks.pending = nil
		ks.mu.Unlock()
		if len(pending) > 0 && !l.makePending(ctx, ks, pending) {
			l.anyPending.Store(true)
			break
		}
	}
	l.warnDropped()
}

// warnDropped logs the adjustments dropped since the last call, if any.
func (l *Limiter) warnDropped() {
	if dropped := l.droppedAdjusts.Swap(0); dropped > 0 {
		l.opts.Logger.Warn("pacer: cancels and settles made while Redis was unavailable were too many to keep; some were not applied",
			"dropped", dropped, "limiter", l.id)
	}
}

// giveBack hands h (nil: nothing) to Redis for key: a floor on the policy
// it was granted by, and a pause made locally; with granted (server clock,
// Unix ns) as the horizon of a key Redis has lost.
func (l *Limiter) giveBack(ctx context.Context, key string, h *handback, granted, seq int64) error {
	nowNS, _ := l.serverNow()
	s := keyOnly
	if h != nil && h.spec != nil {
		s = h.spec
	}
	if s == keyOnly {
		s = l.states.get(key).lastSpec()
	}
	if s != nil && s != keyOnly && (h.matters(nowNS) && (h.last != 0 || len(h.windows) > 0) || granted > nowNS) {
		lost := ""
		if granted > nowNS {
			lost = lostHorizon(granted, nowNS, seq)
		}
		if err := l.floorOnly(ctx, key, s, h.floorArg(nowNS), lost); err != nil {
			return err
		}
	}
	if h != nil && h.pause > nowNS {
		return l.pauseRedis(ctx, key, keyOnly, time.Duration(h.pause-nowNS))
	}
	return nil
}

// lastSpec is the policy the key was last called with, from its report;
// nil if unknown.
func (ks *keyState) lastSpec() *spec {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.report.s
}

var restoreScript = redis.NewScript(lua.Restore)

// restoreStored puts back key's stored limit, as this Limiter last saw it,
// if Redis lost it with everything else of the key (see restore.lua).
func (l *Limiter) restoreStored(ctx context.Context, key, stored string) {
	k := l.RedisKey(key)
	res, err := l.run(ctx, names.OpRestore, key, func(ctx context.Context) (any, error) {
		return restoreScript.Run(ctx, l.rdb, []string{k, k + ":limit", k + ":history"},
			stored, "pacer "+l.id, historyKeep).Int()
	}, nil)
	if err == nil && res == 1 {
		l.opts.Logger.Warn("pacer: redis had lost a key's stored limit (restarted empty?); put it back as this Limiter last saw it",
			"key", key, "stored", stored, "limiter", l.id)
	}
}
