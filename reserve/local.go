package reserve

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// local paces keys within this process while Redis is unavailable: one
// golang.org/x/time/rate Limiter per key, at the key's rate divided by the
// number of live Limiters in the fleet, with a burst of the key's burst
// divided the same way (at least 1, and at least the permits asked for), so
// the fleet as a whole stays near the shared limit instead of multiplying it.
type local struct {
	mu   sync.Mutex
	keys map[string]*localKey
}

type localKey struct {
	lim         *rate.Limiter
	limit       Limit // the shared Limit it was made for
	fleet       int   // the fleet size it was divided by
	pausedUntil time.Time
}

func newLocal() *local { return &local{keys: make(map[string]*localKey)} }

// share returns the local rate and burst for lim in a fleet of the given size.
func share(lim Limit, fleet int) (rate.Limit, int) {
	f := float64(max(fleet, 1))
	return rate.Limit(lim.Rate / f), max(1, int(math.Floor(float64(lim.Burst)/f)))
}

// get returns key's local limiter, made or updated for lim and fleet, with a
// burst of at least n. l.mu must be held.
func (lo *local) get(now time.Time, key string, lim Limit, fleet, n int) *localKey {
	r, b := share(lim, fleet)
	k := lo.keys[key]
	if k == nil {
		k = &localKey{lim: rate.NewLimiter(r, b), limit: lim, fleet: fleet}
		lo.keys[key] = k
	} else if k.limit != lim || k.fleet != fleet {
		k.lim.SetLimitAt(now, r)
		k.lim.SetBurstAt(now, b)
		k.limit, k.fleet = lim, fleet
	}
	if k.lim.Burst() < n {
		k.lim.SetBurstAt(now, n)
	}
	return k
}

// at is the time reservations on k are made at: now, or the end of a pause.
func (k *localKey) at(now time.Time) time.Time {
	if k.pausedUntil.After(now) {
		return k.pausedUntil
	}
	return now
}

// waitAt returns how long after now n permits reserved on k would wait.
func (k *localKey) waitAt(now time.Time, n int) time.Duration {
	t := k.at(now)
	wait := t.Sub(now)
	if short := float64(n) - k.lim.TokensAt(t); short > 0 {
		wait += time.Duration(short / float64(k.lim.Limit()) * float64(time.Second))
	}
	return wait
}

// reserve reserves n permits on key, unless the wait would exceed maxWait
// (when maxWait >= 0); it then returns the wait and no reservation.
func (lo *local) reserve(now time.Time, key string, lim Limit, fleet, n int, maxWait time.Duration) (*rate.Reservation, time.Duration) {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	k := lo.get(now, key, lim, fleet, n)
	if maxWait >= 0 {
		if wait := k.waitAt(now, n); wait > maxWait {
			return nil, wait
		}
	}
	r := k.lim.ReserveN(k.at(now), n)
	return r, r.DelayFrom(now)
}

// peek returns what Peek would: the wait for n permits and the balance.
func (lo *local) peek(now time.Time, key string, lim Limit, fleet, n int) Status {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	k := lo.get(now, key, lim, fleet, n)
	return Status{Wait: k.waitAt(now, n), Tokens: k.lim.TokensAt(k.at(now))}
}

// pause grants no local slot on key before now+d and leaves it empty then.
func (lo *local) pause(now time.Time, key string, lim Limit, fleet int, d time.Duration) {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	k := lo.get(now, key, lim, fleet, 1)
	if until := now.Add(d); until.After(k.pausedUntil) {
		k.pausedUntil = until
	}
	r, b := share(lim, fleet)
	k.lim = rate.NewLimiter(r, b)
	k.lim.ReserveN(k.pausedUntil, b)
}

// drain forgets every key and returns the pauses still in force, to be
// passed on to Redis.
func (lo *local) drain(now time.Time) map[string]pausedKey {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	paused := make(map[string]pausedKey)
	for key, k := range lo.keys {
		if k.pausedUntil.After(now) {
			paused[key] = pausedKey{limit: k.limit, left: k.pausedUntil.Sub(now)}
		}
	}
	lo.keys = make(map[string]*localKey)
	return paused
}

type pausedKey struct {
	limit Limit
	left  time.Duration
}

// sweep forgets keys whose local bucket is full again and not paused: they
// read the same as keys never seen. It keeps a crawler's millions of keys
// from piling up during a long outage.
func (lo *local) sweep(now time.Time) {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	for key, k := range lo.keys {
		if !k.pausedUntil.After(now) && k.lim.TokensAt(now) >= float64(k.lim.Burst()) {
			delete(lo.keys, key)
		}
	}
}

// pausedAfter reports whether a local pause on key lasts beyond at.
func (lo *local) pausedAfter(key string, at time.Time) bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	k := lo.keys[key]
	return k != nil && k.pausedUntil.After(at)
}
