package engine

import (
	"github.com/pacer-go/pacer/internal/layout"
)

// The handoff between Redis and a Store paced locally. When Redis fails, a
// key's local state starts from the state Redis last showed the process
// (Seed), so that the local schedule continues the fleet's: after the
// queue it knew of, in the windows it knew of, under the stored limit and
// the pause it knew of. When Redis answers again, what the Store granted
// goes back to Redis (Handback): no bucket slot before the latest local one,
// each window band's local units in its latest window, and a pause made
// locally.

// Seed makes key's local state start from state and stored (as Redis last
// showed them; "" for none), unless the Store already holds key. Its window
// units are remembered, so that Handback returns only the Store's own.
func (s *Store) Seed(key, state, stored string, hasStored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys[key] != nil {
		return
	}
	s.keys[key] = &entry{state: state, expire: expiryOf(state), stored: stored, hasStored: hasStored, seeded: true, seedWindows: windowsOf(state)}
}

// expiryOf returns when a state expires, Unix ns (layout.Expiry).
func expiryOf(state string) int64 { return layout.Expiry(state) }

// Absorb applies h, local grants Redis has not taken yet, to key's state at
// c.Now (a floor, and a pause), and counts its windows as the seed's, so
// that Handback returns only what the Store grants after.
func (s *Store) Absorb(c Call, h Handback) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, e, err := s.load(c)
	if err != nil {
		return err
	}
	if _, _, err := g.Reserve(h.Floor(c.Now), nil); err != nil {
		return err
	}
	if h.Pause > c.Now {
		g.Pause((h.Pause - c.Now + 999) / 1000)
	}
	s.save(c, e, g)
	e = s.keys[c.Key]
	e.seedWindows = windowsOf(e.state)
	return nil
}

// Held reports whether the Store holds key.
func (s *Store) Held(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[key] != nil
}

// A Handback is what a Store granted on a key, for Redis to take into
// account when it answers again.
type Handback struct {
	LastSlot int64         // the latest slot the Store granted, Unix ns; 0: none
	Windows  []WindowUnits // each window band's units the Store granted in its latest window
	Pause    int64         // the end of a pause made on the Store, Unix ns; 0: none
}

// Matters reports whether h has anything Redis must know at now (Unix ns):
// a local grant (even one whose slot has passed: the bucket may not have
// refilled since), a pause still in force, or window units.
func (h Handback) Matters(now int64) bool {
	return h.LastSlot != 0 || h.Pause > now || len(h.Windows) > 0
}

// Floor returns h as reserve.lua's floor at now (Unix ns).
func (h Handback) Floor(now int64) *Floor {
	us := int64(0)
	if h.LastSlot > now {
		us = (h.LastSlot - now + 999) / 1000
	}
	return &Floor{HorizonUS: us, Windows: h.Windows}
}

// Merge adds o to h.
func (h Handback) Merge(o Handback) Handback {
	h.LastSlot = max(h.LastSlot, o.LastSlot)
	h.Pause = max(h.Pause, o.Pause)
	for _, w := range o.Windows {
		found := false
		for i, x := range h.Windows {
			if x.Band != w.Band {
				continue
			}
			found = true
			switch {
			case w.W > x.W:
				h.Windows[i] = w
			case w.W == x.W:
				h.Windows[i].Units += w.Units
			}
		}
		if !found {
			h.Windows = append(h.Windows, w)
		}
	}
	return h
}

// Handback returns what the Store granted on key, at now (Unix ns), and
// forgets the key.
func (s *Store) Handback(key string, now int64) (Handback, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		return Handback{}, false
	}
	delete(s.keys, key)
	h := Handback{LastSlot: e.lastSlot, Pause: e.pauseEnd}
	if e.state != "" && (e.expire == 0 || now < e.expire) {
		for name, w := range windowsOf(e.state) {
			units := w.U
			if seed, ok := e.seedWindows[name]; ok && seed.W == w.W {
				units -= seed.U
			} else if ok && seed.W > w.W {
				units = 0
			}
			if units > 1e-9 {
				h.Windows = append(h.Windows, WindowUnits{Band: name, W: int64(w.W), Units: units})
			}
		}
	}
	return h, h.LastSlot != 0 || h.Pause != 0 || len(h.Windows) > 0
}

// PauseEnd returns the end of the pause on key's state, Unix ns (0: none).
func (s *Store) PauseEnd(key string, now int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, has := s.state(key, now)
	if !has {
		return 0
	}
	return PauseEnd(e.state)
}

// PauseEnd returns the end of a state's pause, Unix ns (layout.PauseEnd).
func PauseEnd(state string) int64 { return layout.PauseEnd(state) }

// Queue returns how far ahead of its write a state's buckets were queued
// (layout.Queue).
func Queue(state string) int64 { return layout.Queue(state) }

// windowUse is a window record: the latest window and its units.
type windowUse = layout.WindowUse

// windowsOf returns a state's window records by band name.
func windowsOf(state string) map[string]windowUse { return layout.Windows(state) }
