package reserve

import (
	"math"
	"sync"
	"time"
)

// localTurns is the fair rule of lua/fair.lua for the local fallback: while
// Redis is unavailable, this process's fair queues on a key take turns by
// the same rule (horizon, priority, turn), on the key's share the local
// engine paces. Times are µs on the Limiter's clock.
type localTurns struct {
	mu   sync.Mutex
	keys map[string]*turnKey
}

// turnKey is one key's lanes, indexed by Lane.index (1 to 3).
type turnKey struct {
	lanes [4]turnLane
	used  float64 // the last call, µs
}

type turnLane struct {
	v        float64            // virtual time
	share    bool               // the lane has a minimum share (as its last batch said)
	entitled float64            // when the minimum share may next be used
	pass     map[string]float64 // tenants ahead of v
	waiting  map[string]turnWait
}

type turnWait struct{ start, until float64 }

// turnIdle is how long a key's turns are kept without a call, as the fair
// keys' expiry in Redis.
const turnIdle = 10 * time.Second

// turn is one fair batch's use of a key's turns (fair.lua's fair table).
type turn struct {
	k                       *turnKey
	now                     float64
	lane                    int
	tenant                  string
	weight, hmin, minshare  float64
	d, start, m             float64
	hasM, byShare, deferred bool
	kept                    bool // a deferred request outlives its retry (fair.lua's outlives)
	retry                   float64
}

// begin starts a batch of fk's on key at now.
func (lt *localTurns) begin(fk fairKey, now time.Time, hmin time.Duration, minshare float64) *turn {
	t := float64(now.UnixNano()) / 1e3
	if lt.keys == nil {
		lt.keys = map[string]*turnKey{}
	}
	k := lt.keys[fk.key]
	if k == nil || t-k.used > float64(turnIdle.Microseconds()) {
		if len(lt.keys) > 1000 {
			for name, o := range lt.keys {
				if t-o.used > float64(turnIdle.Microseconds()) {
					delete(lt.keys, name)
				}
			}
		}
		k = &turnKey{}
		for i := range k.lanes {
			k.lanes[i] = turnLane{pass: map[string]float64{}, waiting: map[string]turnWait{}}
		}
		lt.keys[fk.key] = k
	}
	k.used = t
	return &turn{k: k, now: t, lane: fk.lane.index(), tenant: fk.tenant, weight: fk.weight,
		hmin: float64(hmin.Microseconds()), minshare: minshare}
}

// leastWaiting is the least start of a tenant other than skip waiting in
// lane l; lapsed waiting is dropped.
func (t *turn) leastWaiting(l int, skip string) (float64, bool) {
	ln := &t.k.lanes[l]
	least, ok := 0.0, false
	for who, w := range ln.waiting {
		if w.until < t.now {
			delete(ln.waiting, who)
			continue
		}
		if who != skip && (!ok || w.start < least) {
			least, ok = w.start, true
		}
	}
	return least, ok
}

// gate is fair.gate: true and the most the request may wait (µs), or false
// and how long to wait before asking again.
func (t *turn) gate(d float64) (bool, float64) {
	ln := &t.k.lanes[t.lane]
	horizon := 0.0
	if t.lane < 3 {
		horizon = math.Max(d, t.hmin)
	}
	retry := math.Max(math.Max(d, t.hmin), 1)
	t.byShare = false
	for l := 1; l < t.lane; l++ {
		if _, ok := t.leastWaiting(l, ""); ok {
			if t.minshare > 0 && ln.entitled <= t.now {
				t.byShare = true
				horizon = math.Max(d, t.hmin)
				break
			}
			return false, retry
		}
	}
	for l := t.lane + 1; l <= 3; l++ {
		o := &t.k.lanes[l]
		if _, ok := t.leastWaiting(l, ""); ok && o.share && o.entitled <= t.now {
			return false, retry
		}
	}
	pass, ok := ln.pass[t.tenant]
	if !ok {
		pass = ln.v
	}
	start := math.Max(pass, ln.v)
	m, hasM := t.leastWaiting(t.lane, t.tenant)
	if hasM && start > m+1e-6 {
		return false, retry
	}
	t.d, t.start, t.m, t.hasM = d, start, m, hasM
	return true, horizon
}

// booked is fair.booked.
func (t *turn) booked() {
	ln := &t.k.lanes[t.lane]
	pass := t.start + t.d/t.weight
	ln.pass[t.tenant] = pass
	n := len(ln.waiting)
	target := ln.v + t.d/(t.weight*math.Max(float64(n), 1))
	if t.hasM && t.m < target {
		target = t.m
	}
	target = math.Min(target, t.start)
	ln.v = math.Max(ln.v, target)
	if t.byShare {
		period := t.d / t.minshare
		ln.entitled = math.Max(ln.entitled, t.now-period) + period
	}
}

// finish is fair.finish: the tenant waits on when deferred or more of its
// requests are queued (not last).
func (t *turn) finish(last bool) {
	ln := &t.k.lanes[t.lane]
	pass, ok := ln.pass[t.tenant]
	if !ok {
		pass = ln.v
	}
	waiting := (t.deferred && t.kept) || !last
	if !waiting {
		target := pass
		if m, ok := t.leastWaiting(t.lane, t.tenant); ok && m < target {
			target = m
		}
		ln.v = math.Max(ln.v, target)
	}
	ln.share = t.minshare > 0
	if !ln.share {
		ln.entitled = 0
	}
	for who, p := range ln.pass {
		if p <= ln.v {
			delete(ln.pass, who)
		}
	}
	if waiting {
		ln.waiting[t.tenant] = turnWait{start: math.Max(pass, ln.v), until: t.now + t.retry + float64(fairGrace.Microseconds())}
	} else {
		delete(ln.waiting, t.tenant)
	}
}
