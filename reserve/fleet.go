package reserve

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/local"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// fleetView is what a Limiter knows of the fleet sharing its KeyPrefix,
// learned from the heartbeats:
//
//   - live: the Limiters heard from in the last two heartbeat intervals,
//     this one included. They reserve on Redis.
//   - held: those silent for longer but less than Options.SilentHold. They
//     may have lost Redis and be pacing locally on their share, so the live
//     ones take only their own shares of each key's rate meanwhile (share).
//
// When this Limiter comes back from an outage, a Redis restarted empty may
// have forgotten the Limiters that are still pacing locally: for SilentHold
// it keeps back the shares of the fleet it knew before the outage that the
// heartbeat does not show yet.
type fleetView struct {
	mu         sync.Mutex
	hold       time.Duration
	hint       int // Options.FleetSize
	learned    bool
	live, held int
	remembered int       // live + held when this Limiter last lost Redis
	backAt     time.Time // when it came back
}

// size returns the fleet size the local fallback divides by: the number
// learned (known true), or Options.FleetSize before anything was learned (0:
// none).
func (f *fleetView) size() (n int, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.learned {
		return f.hint, false
	}
	return max(1, f.live+f.held), true
}

// share returns the fraction of each key's rate this Limiter takes from
// Redis: its own and the other live Limiters' shares, not those of the
// Limiters that may be pacing locally.
func (f *fleetView) share() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.learned || f.live < 1 {
		return 1
	}
	held := f.held
	if !f.backAt.IsZero() && time.Since(f.backAt) < f.hold {
		held = max(held, f.remembered-(f.live+f.held))
	}
	return float64(f.live) / float64(f.live+held)
}

// leaving records the fleet as known when this Limiter loses Redis.
func (f *fleetView) leaving() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.learned {
		f.remembered = max(f.remembered, f.live+f.held)
	}
}

// recovered starts the time during which shares the heartbeat does not
// show are kept back.
func (f *fleetView) recovered() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backAt = time.Now()
}

func (f *fleetView) update(live, held int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.learned = true
	f.live, f.held = live, held
	if !f.backAt.IsZero() && time.Since(f.backAt) >= f.hold {
		f.backAt, f.remembered = time.Time{}, 0
	}
}

// shareArg is share() as the scripts take it.
func (l *Limiter) shareArg() string {
	s := l.fleet.share()
	if s >= 1 {
		return "1"
	}
	return strconv.FormatFloat(s, 'f', -1, 64)
}

var heartbeatScript = redis.NewScript(lua.Heartbeat)

// fleetKeys are the heartbeat set, the fleet's details and the policies
// reported, in one hash tag.
func (l *Limiter) fleetKeys() []string {
	k := l.opts.KeyPrefix + "{limiters}"
	return []string{k, k + ":info", k + ":policies"}
}

// reports are the policies this Limiter's code passes, per key, for the
// heartbeat to report to operators (Admin.Status shows them as the limit
// in force when none is stored). Each is reported when first used or
// changed, and again every reportEvery; at most maxReports keys are
// tracked, reportBatch reported per heartbeat.
type reports struct {
	mu sync.Mutex
	m  map[string]*report
}

type report struct {
	s    *spec
	sent time.Time
}

const (
	maxReports  = 10_000
	reportBatch = 500
	reportEvery = time.Minute
)

func (r *reports) note(key string, s *spec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.m[key]; ok {
		if e.s != s && e.s.sig != s.sig {
			e.s, e.sent = s, time.Time{}
		}
		return
	}
	if r.m == nil {
		r.m = make(map[string]*report)
	}
	if len(r.m) < maxReports {
		r.m[key] = &report{s: s}
	}
}

// due returns the heartbeat's arguments for the reports due now (key,
// "<ms> <policy>" pairs), and marks them sent.
func (r *reports) due(now time.Time) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []any
	for key, e := range r.m {
		if len(out) >= 2*reportBatch {
			break
		}
		if now.Sub(e.sent) >= reportEvery {
			out = append(out, key, strconv.FormatInt(now.UnixMilli(), 10)+" "+e.s.storedText())
			e.sent = now
		}
	}
	return out
}

// heartbeat records this Limiter as live, with its mode, and learns the
// fleet. While degraded it is the probe.
func (l *Limiter) heartbeat(ctx context.Context) error {
	l.health.mu.Lock()
	mode, since, outage := "redis", l.health.since, l.health.outage
	if l.health.degraded {
		mode = "local"
	}
	l.health.mu.Unlock()
	// A Limiter is live if heard from within two intervals. But right after
	// an outage of this Limiter's own, one that has not been heard from
	// since the outage began most likely lost Redis too and may still pace
	// locally on its share: it counts as held (the shares of the Limiters
	// on Redis leave room for it) until it is heard from again. Without
	// this, the first Limiter back would take the whole rate from Redis
	// while the others still paced locally.
	live := 2 * l.opts.HeartbeatInterval
	if !outage.IsZero() {
		live = min(live, max(time.Since(outage), time.Millisecond))
	}
	args := []any{l.id, mode, strconv.FormatInt(since.UnixMilli(), 10),
		strconv.FormatInt(live.Milliseconds(), 10),
		strconv.FormatInt(l.opts.SilentHold.Milliseconds(), 10)}
	args = append(args, l.reports.due(time.Now())...)
	res, err := l.run(ctx, "heartbeat", "", func(ctx context.Context) (any, error) {
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), args...).Result()
	}, nil)
	if err != nil {
		return err
	}
	if r, ok := res.([]any); ok && len(r) == 3 {
		live, ok1 := r[1].(int64)
		held, ok2 := r[2].(int64)
		if ok1 && ok2 && live >= 1 {
			l.fleet.update(int(live), int(held))
		}
	}
	return nil
}

// leave removes this Limiter from the heartbeat set (Close).
func (l *Limiter) leave(ctx context.Context) error {
	_, err := l.run(ctx, "heartbeat", "", func(ctx context.Context) (any, error) {
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), l.id, "leave", "0", "1", "1").Result()
	}, nil)
	return err
}

// horizons remembers, per key, the latest slot Redis granted this Limiter:
// if Redis fails, the key's local fallback starts there, empty, so local
// slots never come on top of Redis slots still to be used.
type horizons struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (h *horizons) note(key string, at time.Time) {
	h.mu.Lock()
	if h.at == nil {
		h.at = make(map[string]time.Time)
	}
	if at.After(h.at[key]) {
		h.at[key] = at
	}
	h.mu.Unlock()
}

func (h *horizons) get(key string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at[key]
}

// sweep forgets slots that have passed.
func (h *horizons) sweep(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, at := range h.at {
		if !at.After(now) {
			delete(h.at, k)
		}
	}
}

// floors holds, per key, what the local fallback granted while Redis was
// unavailable, until the key's next reservation on Redis passes it on
// (reserve.lua's floor).
type floors struct {
	mu sync.Mutex
	m  map[string]local.Floor
}

func (f *floors) add(m map[string]local.Floor) {
	if len(m) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = make(map[string]local.Floor)
	}
	for k, v := range m {
		f.m[k] = v
	}
}

// peek returns key's floor.
func (f *floors) peek(key string) (local.Floor, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.m[key]
	return v, ok
}

// drop forgets key's floor.
func (f *floors) drop(key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, key)
}

// specOf returns the policy a key's floor was granted under.
func (f *floors) specOf(key string) *spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, _ := f.m[key].Tag.(*spec)
	return s
}

// sweep forgets floors that no longer matter.
func (f *floors) sweep(now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, v := range f.m {
		if v.Horizon.Before(now) && v.Pause.Before(now) && len(v.Windows) == 0 {
			delete(f.m, k)
		}
	}
}

// floorArg formats a floor for reserve.lua at now: the horizon in µs from
// now and the windows' units.
func floorArg(f local.Floor, now time.Time) string {
	h := f.Horizon.Sub(now)
	if h < 0 {
		h = 0
	}
	s := strconv.FormatInt((h + time.Microsecond - 1).Microseconds(), 10)
	for _, w := range f.Windows {
		s += " " + w.Band + ":" + strconv.FormatInt(w.Index, 10) + ":" + formatFloat(w.Units)
	}
	return s
}
