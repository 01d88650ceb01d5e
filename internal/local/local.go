// Package local paces keys within one process while Redis is unavailable:
// the same engine as pacer's Lua scripts (token buckets kept as the time
// their balance is zero, fixed windows kept as the latest window and its
// units), in memory, on the process's clock.
//
// The fallback and Redis form one schedule per key: a key's local state
// starts where the process's last Redis grants left it (Start), and what the
// process granted locally is handed back to Redis when it answers again
// (Drain), so neither side grants slots the other has already given out.
package local

import (
	"math"
	"sync"
	"time"
)

// A Band is one band of a policy as the fallback paces it: its share of the
// fleet's limit, not the whole.
type Band struct {
	Name   string
	Unit   int  // index of the cost it charges
	Bucket bool // a token bucket; else a fixed window
	// Bucket: Rate units per second, Burst units.
	Rate, Burst float64
	// Window: at most N units per window of Len, aligned to Origin.
	N      float64
	Len    time.Duration
	Origin time.Time
}

// A Start is where a key's local state begins: Horizon is the latest slot
// Redis granted this process on the key (every bucket is empty then; zero:
// now), and every window's current window counts as used (the fleet may
// have used it: the fallback waits for the next one).
type Start struct {
	Horizon time.Time
}

// A Grant is one local reservation.
type Grant struct {
	Slot time.Time
	Seq  int64
	Cost []float64
}

// WindowUse is what the fallback granted in a window band's window.
type WindowUse struct {
	Band  string
	Index int64
	Units float64
}

// A Floor is what a key's fallback granted, for Redis to take into account
// when it answers again: no bucket slot before Horizon, and the windows'
// units.
type Floor struct {
	Horizon time.Time
	Windows []WindowUse
	Pause   time.Time // a Pause made while Redis was unavailable; zero if none
	Tag     any       // what the caller tagged the key's state with
}

// Limiter holds the local state of every key. Safe for concurrent use.
type Limiter struct {
	mu    sync.Mutex
	keys  map[string]*state
	epoch time.Time // times are kept as float µs since epoch
}

type state struct {
	sig   string // the policy the state is for; another policy starts over
	tag   any
	spec  []Band
	bands []bandState
	pause float64
	seq   int64
	last  float64 // the latest slot granted
}

type bandState struct {
	z, e float64 // bucket: zero-balance time, last event
	w    int64   // window: latest window holding reservations
	u    float64 // units in it
	// seeded: u is Start's (the fleet's window, counted as full), not
	// this process's grants.
	seeded bool
}

// New returns an empty Limiter.
func New(now time.Time) *Limiter {
	return &Limiter{keys: make(map[string]*state), epoch: now}
}

func (l *Limiter) us(t time.Time) float64 { return float64(t.Sub(l.epoch)) / 1e3 }

func (l *Limiter) time(us float64) time.Time {
	return l.epoch.Add(time.Duration(math.Ceil(us * 1e3)))
}

func windowIndex(b Band, at time.Time) int64 {
	d := at.Sub(b.Origin)
	i := int64(d / b.Len)
	if d%b.Len < 0 {
		i--
	}
	return i
}

// get returns key's state for the policy sig, creating it from start.
func (l *Limiter) get(now time.Time, key, sig string, bands []Band, tag any, start func() Start) *state {
	st := l.keys[key]
	if st != nil && st.sig == sig && len(st.bands) == len(bands) {
		return st
	}
	var s Start
	if start != nil {
		s = start()
	}
	n := l.us(now)
	h := max(l.us(s.Horizon), n)
	st = &state{sig: sig, tag: tag, spec: append([]Band(nil), bands...), bands: make([]bandState, len(bands)), last: h}
	for i, b := range bands {
		if b.Bucket {
			st.bands[i] = bandState{z: h, e: h}
		} else {
			st.bands[i] = bandState{w: windowIndex(b, now), u: b.N, seeded: true}
		}
	}
	l.keys[key] = st
	return st
}

// earliest is core.lua's: the earliest slot at or after s at which every
// band takes cost, and the window each window band would use.
func (l *Limiter) earliest(st *state, bands []Band, s float64, cost []float64) (float64, []int64) {
	idx := make([]int64, len(bands))
	for range 4 {
		moved := false
		for i, b := range bands {
			c := cost[b.Unit]
			if c <= 0 {
				continue
			}
			bs := &st.bands[i]
			if b.Bucket {
				if t := bs.z + c*1e6/b.Rate; t > s {
					s, moved = t, true
				}
				continue
			}
			w := windowIndex(b, l.time(s))
			w = max(w, bs.w)
			if w == bs.w && bs.u+c > b.N*(1+1e-9) { // a part in 1e9 is rounding (as lua/core.lua)
				w++
			}
			if ws := l.us(b.Origin.Add(time.Duration(w) * b.Len)); ws > s {
				s, moved = ws, true
			}
			idx[i] = w
		}
		if !moved {
			break
		}
	}
	return s, idx
}

// Reserve reserves cost on key at now, unless the wait would exceed maxWait
// (when maxWait >= 0): then it returns ok false and the wait.
func (l *Limiter) Reserve(now time.Time, key, sig string, bands []Band, tag any, cost []float64, maxWait time.Duration, start func() Start) (g Grant, wait time.Duration, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.get(now, key, sig, bands, tag, start)
	n := l.us(now)
	s, idx := l.earliest(st, bands, max(n, st.pause), cost)
	slot := l.time(s)
	wait = max(0, slot.Sub(now))
	if maxWait >= 0 && wait > maxWait {
		return Grant{}, wait, false
	}
	for i, b := range bands {
		c := cost[b.Unit]
		if c <= 0 {
			continue
		}
		bs := &st.bands[i]
		if b.Bucket {
			fill := b.Burst * 1e6 / b.Rate
			bs.z = max(bs.z, s-fill) + c*1e6/b.Rate
			bs.e = max(bs.e, s)
			continue
		}
		if idx[i] > bs.w {
			bs.w, bs.u, bs.seeded = idx[i], 0, false
		}
		bs.u += c
	}
	st.seq++
	st.last = max(st.last, s)
	return Grant{Slot: slot, Seq: st.seq, Cost: append([]float64(nil), cost...)}, wait, true
}

// Adjust cancels g (actual nil) or settles it at its actual costs, under the
// rules of adjust.lua.
func (l *Limiter) Adjust(now time.Time, key, sig string, bands []Band, g Grant, actual []float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil || st.sig != sig {
		return
	}
	n, slot := l.us(now), l.us(g.Slot)
	for i, b := range bands {
		c := g.Cost[b.Unit]
		var d float64
		switch {
		case actual == nil && slot >= n:
			d = -c
		case actual != nil:
			d = actual[b.Unit] - c
		}
		if d == 0 {
			continue
		}
		bs := &st.bands[i]
		if !b.Bucket {
			if windowIndex(b, g.Slot) == bs.w {
				bs.u = max(0, bs.u+d)
			}
			continue
		}
		upp := 1e6 / b.Rate
		if d > 0 {
			bs.z += d * upp
			continue
		}
		back := min(c-(bs.e-slot)/upp, -d)
		if back <= 0 {
			continue
		}
		tokens := min((n-bs.z)/upp+back, b.Burst)
		bs.z = n - tokens*upp
		if st.pause > n {
			bs.z = max(bs.z, st.pause) // never into a pause
		}
	}
}

// Pause grants no slot on key before now + d and leaves its buckets empty
// then.
func (l *Limiter) Pause(now time.Time, key, sig string, bands []Band, tag any, d time.Duration, start func() Start) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.get(now, key, sig, bands, tag, start)
	st.pause = max(st.pause, l.us(now.Add(d)))
	for i, b := range bands {
		if b.Bucket {
			st.bands[i].z = max(st.bands[i].z, st.pause)
		}
	}
}

// Paused returns the end of key's pause (zero if none).
func (l *Limiter) Paused(key string) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if st := l.keys[key]; st != nil && st.pause > 0 {
		return l.time(st.pause)
	}
	return time.Time{}
}

// BandState is one band as Peek reads it.
type BandState struct {
	Value float64       // a bucket's balance, or a window's units used
	Wait  time.Duration // the band's own wait for its cost
	End   time.Time     // a window's latest window end
}

// Peek returns the wait cost would have on key now, the end of its pause,
// and each band's state, without changing anything (a key the fallback has
// not seen reads as start would make it).
func (l *Limiter) Peek(now time.Time, key, sig string, bands []Band, cost []float64, start func() Start) (time.Duration, time.Time, []BandState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil || st.sig != sig {
		saved := l.keys[key]
		st = l.get(now, key, sig, bands, nil, start)
		if saved != nil {
			l.keys[key] = saved
		} else {
			delete(l.keys, key)
		}
	}
	n := l.us(now)
	from := max(n, st.pause)
	s, _ := l.earliest(st, bands, from, cost)
	out := make([]BandState, len(bands))
	for i, b := range bands {
		one := &state{bands: []bandState{st.bands[i]}, pause: st.pause}
		bs, _ := l.earliest(one, []Band{b}, from, cost)
		out[i].Wait = max(0, l.time(bs).Sub(now))
		if b.Bucket {
			upp := 1e6 / b.Rate
			out[i].Value = min((n-st.bands[i].z)/upp, b.Burst)
		} else {
			out[i].Value = st.bands[i].u
			out[i].End = b.Origin.Add(time.Duration(st.bands[i].w+1) * b.Len)
		}
	}
	var pause time.Time
	if st.pause > n {
		pause = l.time(st.pause)
	}
	return max(0, l.time(s).Sub(now)), pause, out
}

// Drain forgets every key and returns, for those whose grants still matter
// (a bucket slot or a pause still ahead, units in a window not yet over),
// the Floor Redis should take into account.
func (l *Limiter) Drain(now time.Time) map[string]Floor {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]Floor)
	for key, st := range l.keys {
		if f, ok := l.floor(now, st); ok {
			out[key] = f
		}
	}
	l.keys = make(map[string]*state)
	return out
}

// FloorOf is what Drain would return for key, without forgetting it; ok is
// false when nothing of it matters.
func (l *Limiter) FloorOf(now time.Time, key string) (f Floor, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := l.keys[key]
	if st == nil {
		return Floor{}, false
	}
	return l.floor(now, st)
}

// Forget drops key's state.
func (l *Limiter) Forget(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.keys, key)
}

func (l *Limiter) floor(now time.Time, st *state) (Floor, bool) {
	n := l.us(now)
	f := Floor{Tag: st.tag}
	if st.last > n {
		f.Horizon = l.time(st.last)
	}
	if st.pause > n {
		f.Pause = l.time(st.pause)
	}
	for i, b := range st.spec {
		bs := st.bands[i]
		if !b.Bucket && !bs.seeded && bs.u > 0 && bs.w >= windowIndex(b, now) {
			f.Windows = append(f.Windows, WindowUse{Band: b.Name, Index: bs.w, Units: bs.u})
		}
	}
	return f, !f.Horizon.IsZero() || !f.Pause.IsZero() || len(f.Windows) > 0
}

// Has reports whether key holds local state.
func (l *Limiter) Has(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.keys[key] != nil
}

// Sweep forgets keys whose state reads the same as a key never seen: no
// pause or slot ahead, every bucket full again, every window used over. It
// keeps a crawler's millions of keys from piling up during a long outage.
func (l *Limiter) Sweep(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.us(now)
	for key, st := range l.keys {
		if st.pause > n || st.last > n {
			continue
		}
		idle := true
		for i, b := range st.spec {
			bs := st.bands[i]
			if b.Bucket && bs.z+b.Burst*1e6/b.Rate > n {
				idle = false
			}
			if !b.Bucket && bs.u > 0 && bs.w >= windowIndex(b, now) {
				idle = false
			}
		}
		if idle {
			delete(l.keys, key)
		}
	}
}

// Keys returns how many keys hold local state.
func (l *Limiter) Keys() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
