package reserve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer-go/pacer/internal/engine"
	"github.com/pacer-go/pacer/lua"
)

// historyKeep is how many entries a key's history keeps when a Limiter
// writes one (Admin's default).
const historyKeep = 50

// The local fallback: while Redis is unavailable, a Limiter paces each key
// with the same engine as Redis's scripts (internal/engine), on a Store of
// its own, at its own share of the fleet (engine.Share: its rank's part of
// every band), on the server's clock as it estimates it. The two form one
// schedule per key:
//
//   - Redis to local: a key's local state starts from the state Redis last
//     showed this Limiter (every reserve.lua reply carries it, with the
//     stored limit), and no earlier than the latest slot Redis granted it
//     (horizons: leases and holds too). The local schedule so continues
//     the fleet's queue, windows, stored limit and pause as it knew them.
//   - Local to Redis: what the Store granted (its latest slot, each window
//     band's units in its latest window, a pause made locally) is handed
//     back as reserve.lua's floor: at once for every key when Redis answers
//     again, and with a key's next call after a single failed one.
//     Reservations made on Redis and cancelled or settled while it was
//     unavailable are adjusted on Redis then too.
type fallback struct {
	store *engine.Store

	mu       sync.Mutex
	seeds    map[string]seed            // the state Redis last showed, per key
	hand     map[string]engine.Handback // granted locally, not yet on Redis
	inflight map[string]engine.Handback // handed back by a call in flight
	specs    map[string]*spec           // the policy each key was paced by locally
	pending  []pendingAdjust            // adjustments Redis has not seen
	dropped  int                        // pending adjustments dropped (over maxPending)

	ids atomic.Uint64 // local reservations' numbers
}

type seed struct {
	state, stored string
	at            time.Time
}

// A pendingAdjust is a cancel or settle of a reservation Redis granted,
// made while Redis was unavailable.
type pendingAdjust struct {
	key     string
	spec    *spec
	slotNS  int64
	id      string
	amounts []float64
	actual  []float64 // nil: cancel
}

// maxAssumedQueue bounds the queue a Limiter assumes the others kept (see
// prepare).
const maxAssumedQueue = 10 * time.Second

const (
	maxSeeds   = 100_000
	seedAge    = 10 * time.Minute
	maxPending = 10_000
)

func newFallback() *fallback {
	return &fallback{
		store:    engine.NewStore(),
		seeds:    make(map[string]seed),
		hand:     make(map[string]engine.Handback),
		inflight: make(map[string]engine.Handback),
		specs:    make(map[string]*spec),
	}
}

// noteState records the state (and stored limit) a reply showed for key.
func (f *fallback) noteState(key, state, stored string) {
	if state == "" && stored == "" {
		return
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seeds) >= maxSeeds {
		for k, s := range f.seeds {
			if now.Sub(s.at) > seedAge || len(f.seeds) >= maxSeeds {
				delete(f.seeds, k)
			}
		}
	}
	f.seeds[key] = seed{state, stored, now}
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

// noShareErr is the refusal of a Limiter that joined the fleet after
// members that pace locally without it (fleetView.alsoN, redisShareOK).
func (l *Limiter) noShareErr(key string) error {
	return fmt.Errorf("reserve: %q: %w: this Limiter joined the fleet after members that may pace locally without it (Redis failed just after it joined, or they lost Redis before): it has no share to pace on until they are back on Redis", key, l.unavailableErr())
}

// localCall returns the engine call for key paced by s, now.
func (l *Limiter) localCall(key string, s *spec) (engine.Call, time.Time, error) {
	share, ok := l.fleet.localShare()
	if !ok && l.fleet.newcomer() {
		return engine.Call{}, time.Time{}, l.noShareErr(key)
	}
	if !ok {
		return engine.Call{}, time.Time{}, fmt.Errorf("reserve: %q: %w: Redis has never answered this Limiter, so it does not know how many share the limit (set Options.FleetSize to pace locally meanwhile)", key, l.unavailableErr())
	}
	nowNS, local := l.serverNow()
	return engine.Call{Key: key, Now: nowNS, Share: share, Units: s.units, Bands: s.ebands}, local, nil
}

// prepare seeds key's local state if the Store does not hold it yet: the
// state Redis last showed, no bucket slot before the latest Redis granted
// this Limiter, and what the Store granted before that Redis has not taken
// yet (a call in flight, or one that failed). f.mu is held, and stays held
// over the Store call that follows, so that no handback (takeFloor) comes
// between them.
func (l *Limiter) prepare(c engine.Call, s *spec) {
	f := l.local
	f.specs[c.Key] = s
	if f.store.Held(c.Key) {
		return
	}
	sd := f.seeds[c.Key]
	f.store.Seed(c.Key, sd.state, sd.stored, sd.stored != "")
	h := engine.Handback{LastSlot: l.horizons.get(c.Key)}.Merge(f.hand[c.Key]).Merge(f.inflight[c.Key])
	// The others went on reserving after the state this Limiter last saw
	// (its reply's), and it cannot see those slots: assume the queue it saw
	// stayed as long (the fleet's demand went on), and start after it. A
	// queue that drained costs at most its length; one that grew may still
	// overlap its first slots.
	if q := min(engine.Queue(sd.state), int64(maxAssumedQueue)); q > 0 {
		h = h.Merge(engine.Handback{LastSlot: c.Now + q})
	}
	if h.LastSlot > c.Now || len(h.Windows) > 0 {
		f.store.Absorb(c, h)
	}
}

// reserveLocal reserves on the local fallback: Redis is unavailable.
func (l *Limiter) reserveLocal(key string, s *spec, amounts []float64, maxWait time.Duration) (*Reservation, error) {
	c, local, err := l.localCall(key, s)
	if err != nil {
		return nil, err
	}
	mw := int64(-1)
	if maxWait >= 0 {
		mw = maxWait.Microseconds()
	}
	l.local.mu.Lock()
	l.prepare(c, s)
	grants, _, _, err := l.local.store.Reserve(c, nil, []engine.Request{{MaxWaitUS: mw, Cost: amounts}})
	l.local.mu.Unlock()
	if err != nil {
		return nil, l.engineError("reserve", key, err)
	}
	g := grants[0]
	switch {
	case g.Seq == -1:
		return nil, fmt.Errorf("reserve: reserve %q: %w", key, ErrQueueTooLong)
	case g.Seq == -2:
		return nil, l.shareError(key)
	}
	band, _, _ := nextBinding(g.Band)
	if g.Seq == 0 {
		return nil, &WaitTooLongError{Wait: time.Duration(g.WaitNS), MaxWait: maxWait, Band: band}
	}
	r := &Reservation{lim: l, key: key, spec: s, amounts: amounts, at: local.Add(time.Duration(g.WaitNS)),
		slotNS: c.Now + g.WaitNS, localID: "l" + l.id + "." + strconv.FormatUint(l.local.ids.Add(1), 10),
		source: SourceLocal, band: band}
	l.granted(r, time.Duration(g.WaitNS))
	return r, nil
}

// shareError is the error of a request a window band can never take at
// this Limiter's share (its N_k is below the cost in every window).
func (l *Limiter) shareError(key string) error {
	return fmt.Errorf("reserve: %q: %w: while the fleet paces locally, this Limiter's share of a window band is below the cost in every window", key, l.unavailableErr())
}

// engineError maps an engine error.
func (l *Limiter) engineError(op, key string, err error) error {
	switch {
	case errors.Is(err, engine.ErrExceeds), errors.Is(err, engine.ErrConfig):
		return fmt.Errorf("reserve: %s %q: %w: %w", op, key, ErrStoredLimit, err)
	case errors.Is(err, engine.ErrWrongType):
		return fmt.Errorf("reserve: %s %q: %w: %w", op, key, ErrWrongType, err)
	}
	return fmt.Errorf("reserve: %s %q: %w", op, key, err)
}

// pauseLocal pauses key on the local fallback.
func (l *Limiter) pauseLocal(key string, s *spec, d time.Duration) error {
	c, _, err := l.localCall(key, s)
	if err != nil {
		return err
	}
	l.local.mu.Lock()
	l.prepare(c, s)
	end, err := l.local.store.Pause(c, (d + time.Microsecond - 1).Microseconds())
	l.local.mu.Unlock()
	if err != nil {
		return l.engineError("pause", key, err)
	}
	l.pauses.learn(key, c.Now+end)
	l.pauses.mine(key, c.Now+end, -1, s)
	return nil
}

// peekLocal reads key on the local fallback.
func (l *Limiter) peekLocal(key string, s *spec, amounts []float64) (Snapshot, error) {
	c, local, err := l.localCall(key, s)
	if err != nil {
		return Snapshot{}, err
	}
	l.local.mu.Lock()
	l.prepare(c, s)
	wait, pause, bands, err := l.local.store.Peek(c, amounts)
	l.local.mu.Unlock()
	if err != nil {
		return Snapshot{}, l.engineError("peek", key, err)
	}
	return snapshotOf(local, wait, pause, bands, true, s.slowest(amounts)), nil
}

// adjustLocal cancels or settles a local reservation on the Store.
func (l *Limiter) adjustLocal(r *Reservation, actual []float64) error {
	c, _, err := l.localCall(r.key, r.spec)
	if err != nil {
		return err
	}
	l.local.mu.Lock()
	l.prepare(c, r.spec)
	_, err = l.local.store.Adjust(c, r.localID, r.slotNS/1000, r.slotNS%1000, r.amounts, actual)
	l.local.mu.Unlock()
	if err != nil {
		return l.engineError("adjust", r.key, err)
	}
	return nil
}

// localPauseEnd returns the end of key's pause on the Store (server clock,
// Unix ns; 0: none).
func (l *Limiter) localPauseEnd(key string) int64 {
	if !l.local.store.Held(key) {
		return 0
	}
	now, _ := l.serverNow()
	return l.local.store.PauseEnd(key, now)
}

// takeFloor takes what must go to Redis with a call on key: what the Store
// granted and what earlier calls could not hand back. The caller gives it
// back (giveBack) if the call fails.
func (l *Limiter) takeFloor(key string) (engine.Handback, bool) {
	f := l.local
	now, _ := l.serverNow()
	f.mu.Lock()
	defer f.mu.Unlock()
	h, ok := f.hand[key]
	delete(f.hand, key)
	if g, ok2 := f.store.Handback(key, now); ok2 {
		h, ok = h.Merge(g), true
	}
	if !ok || !h.Matters(now) {
		return engine.Handback{}, false
	}
	f.inflight[key] = f.inflight[key].Merge(h)
	return h, true
}

// floorDone ends a call that carried h: Redis has it (ok), or it goes back
// to be handed over by a later call.
func (l *Limiter) floorDone(key string, h engine.Handback, ok bool) {
	f := l.local
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inflight, key)
	if !ok {
		f.hand[key] = f.hand[key].Merge(h)
	}
}

// hasLocal reports whether key has local grants Redis has not seen.
func (l *Limiter) hasLocal(key string) bool {
	f := l.local
	f.mu.Lock()
	_, h := f.hand[key]
	_, in := f.inflight[key]
	f.mu.Unlock()
	return h || in || f.store.Held(key)
}

// addPending queues a cancel or settle of a Redis reservation made while
// Redis was unavailable.
func (l *Limiter) addPending(p pendingAdjust) {
	f := l.local
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pending) >= maxPending {
		f.dropped++
		return
	}
	f.pending = append(f.pending, p)
}

// handBack runs when Redis answers again: every key the Store holds, every
// handback a failed call left, and every key with a slot Redis granted this
// Limiter still ahead (a Redis restarted empty has forgotten it) goes to
// Redis as a floor (one call per key, with no reservation), a pause made
// locally goes with it, and the adjustments Redis has not seen are made.
// Keys whose call fails stay for their next call.
func (l *Limiter) handBack(ctx context.Context) {
	f := l.local
	f.mu.Lock()
	keys := map[string]*spec{}
	for _, k := range f.store.Keys() {
		keys[k] = f.specs[k]
	}
	for k := range f.hand {
		keys[k] = f.specs[k]
	}
	nowNS, _ := l.serverNow()
	ahead := l.horizons.ahead(nowNS)
	for k, s := range ahead {
		if keys[k] == nil {
			keys[k] = s
		}
	}
	pending := f.pending
	f.pending = nil
	dropped := f.dropped
	f.dropped = 0
	stored := map[string]string{}
	for k, sd := range f.seeds {
		if sd.stored != "" {
			stored[k] = sd.stored
		}
	}
	f.mu.Unlock()
	// The stored limits first: a Redis restarted empty lost them, and the
	// members still pacing locally pace by them (their lattice is theirs).
	for _, k := range slicesSorted(stored) {
		l.restoreStored(ctx, k, stored[k])
	}
	for _, k := range slicesSorted(keys) {
		s := keys[k]
		if s == nil {
			continue
		}
		h, ok := l.takeFloor(k)
		if ah := l.horizons.get(k); ah > 0 {
			h, ok = h.Merge(engine.Handback{LastSlot: ah}), true
		}
		if !ok {
			continue
		}
		now, _ := l.serverNow()
		err := l.floorOnly(ctx, k, s, h.Floor(now))
		if err == nil && h.Pause > now {
			err = l.pauseRedis(ctx, k, s, time.Duration(h.Pause-now))
		}
		l.floorDone(k, h, err == nil)
	}
	for _, p := range pending {
		r := &Reservation{lim: l, key: p.key, spec: p.spec, amounts: p.amounts, slotNS: p.slotNS}
		if err := r.adjustRedis(ctx, p.id, p.actual); err != nil && errors.Is(err, ErrUnavailable) {
			l.addPending(p)
		}
	}
	if dropped > 0 {
		l.opts.Logger.Warn("pacer: cancels and settles made while Redis was unavailable were too many to keep; some were not applied",
			"dropped", dropped, "limiter", l.id)
	}
}

var restoreScript = redis.NewScript(lua.Restore)

// restoreStored puts back key's stored limit, as this Limiter last saw it,
// if Redis lost it with everything else of the key (see restore.lua).
func (l *Limiter) restoreStored(ctx context.Context, key, stored string) {
	k := l.RedisKey(key)
	res, err := l.run(ctx, "restore", key, func(ctx context.Context) (any, error) {
		return restoreScript.Run(ctx, l.rdb, []string{k, k + ":limit", k + ":history"},
			stored, "pacer "+l.id, historyKeep).Int()
	}, nil)
	if err == nil && res == 1 {
		l.opts.Logger.Warn("pacer: redis had lost a key's stored limit (restarted empty?); put it back as this Limiter last saw it",
			"key", key, "stored", stored, "limiter", l.id)
	}
}

// slicesSorted returns m's keys, sorted.
func slicesSorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}

// sweepLocal forgets seeds too old to matter and Store keys whose state has
// expired.
func (l *Limiter) sweepLocal() {
	f := l.local
	now := time.Now()
	f.mu.Lock()
	for k, s := range f.seeds {
		if now.Sub(s.at) > seedAge {
			delete(f.seeds, k)
		}
	}
	f.mu.Unlock()
	n, _ := l.serverNow()
	f.store.Sweep(n)
}
