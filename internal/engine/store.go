package engine

import (
	"strings"
	"sync"
)

// A Store holds key groups in memory, as Redis holds them for the scripts:
// each key's state (with its expiry), its stored limit, and the list of
// reservations already adjusted. Its methods are the scripts, run on it at
// an instant on the caller's clock (Unix ns). It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	keys     map[string]*entry
	noExpiry bool // tests: Redis expires keys on its own clock, not the test's
}

type entry struct {
	state     string
	expire    int64 // Unix ns when the state expires; 0: never
	stored    string
	hasStored bool
	done      string
	doneUntil int64

	// The handoff (handoff.go).
	seeded      bool
	seedWindows map[string]windowUse // the seed's window records
	lastSlot    int64                // the latest slot granted here, Unix ns
	pauseEnd    int64                // the end of a pause made here, Unix ns
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{keys: make(map[string]*entry)} }

// A Call is what a script call needs: the key, the instant, the share, and
// the caller's policy (its units and bands).
type Call struct {
	Key        string
	Now        int64 // Unix ns
	ServerTime bool  // now is the server's clock (a state written later reads as written now)
	Share      Share
	Units      []string
	Bands      []Band
}

// state returns key's state and whether it has one at now.
func (s *Store) state(key string, now int64) (*entry, bool) {
	e := s.keys[key]
	if e == nil {
		return nil, false
	}
	if e.state != "" && e.expire != 0 && now >= e.expire && !s.noExpiry {
		e.state, e.expire = "", 0
	}
	return e, e.state != ""
}

// load loads c's key group.
func (s *Store) load(c Call) (*Group, *entry, error) {
	e, has := s.state(c.Key, c.Now)
	var state, stored string
	var hasStored bool
	if e != nil {
		state, stored, hasStored = e.state, e.stored, e.hasStored
	}
	g, err := Load(c.Now/1000, c.Now%1000, c.ServerTime, c.Share, c.Units, c.Bands, state, has, stored, hasStored)
	return g, e, err
}

// save writes g's state back for c's key.
func (s *Store) save(c Call, e *entry, g *Group) string {
	v, x := g.Save()
	if e == nil {
		e = &entry{}
		s.keys[c.Key] = e
	}
	e.state = v
	if !x.Keep {
		e.expire = c.Now + x.MS*1_000_000
	}
	return v
}

// Reserve runs reserve.lua (floor nil: none) on c's key. It returns the
// grants, the state as written (or read) and the stored limit's text.
func (s *Store) Reserve(c Call, floor *Floor, reqs []Request) ([]Grant, string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, e, err := s.load(c)
	if err != nil {
		return nil, "", "", err
	}
	grants, wrote, err := g.Reserve(floor, reqs)
	if err != nil {
		return nil, "", "", err
	}
	state := g.raw
	if wrote {
		state = s.save(c, e, g)
		e = s.keys[c.Key]
		for _, gr := range grants {
			if gr.Seq > 0 {
				e.lastSlot = max(e.lastSlot, (c.Now/1000)*1000+c.Now%1000+gr.WaitNS)
			}
		}
	}
	return grants, state, g.stored, nil
}

// Adjust runs adjust.lua on c's key: a cancel (actual nil) or a settle of
// the reservation id at slot (Unix µs and ns beyond) reserved at cost. It
// returns false when id was adjusted before (nothing changes).
func (s *Store) Adjust(c Call, id string, slotUS, slotNS int64, reserved, actual []float64) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, e, err := s.load(c)
	if err != nil {
		return false, err
	}
	var done []string
	if e != nil && (e.doneUntil > c.Now || s.noExpiry) {
		done = strings.Fields(e.done)
	}
	for _, d := range done {
		if d == id {
			return false, nil
		}
	}
	if g.Adjust(id, slotUS, slotNS, reserved, actual) {
		s.save(c, e, g)
		e = s.keys[c.Key]
	}
	done = append(done, id)
	if len(done) > 32 {
		done = done[len(done)-32:]
	}
	if e == nil {
		e = &entry{}
		s.keys[c.Key] = e
	}
	ttl := int64(1000) * 1_000_000
	if e.expire != 0 && e.expire-c.Now > ttl {
		ttl = e.expire - c.Now
	}
	e.done, e.doneUntil = strings.Join(done, " "), c.Now+ttl
	return true, nil
}

// Pause runs pause.lua on c's key; it returns the ns from now until the
// pause in force ends.
func (s *Store) Pause(c Call, dUS int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, e, err := s.load(c)
	if err != nil {
		return 0, err
	}
	end := g.Pause(dUS)
	s.save(c, e, g)
	e = s.keys[c.Key]
	e.pauseEnd = max(e.pauseEnd, c.Now+end)
	return end, nil
}

// Peek runs peek.lua on c's key.
func (s *Store) Peek(c Call, cost []float64) (wait, pause int64, bands []BandPeek, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, _, err := s.load(c)
	if err != nil {
		return 0, 0, nil, err
	}
	return g.Peek(cost)
}

// Set installs key's state (its expiry at Unix ns expire; 0: none) and its
// stored limit (hasStored false: none), as Redis last showed them.
func (s *Store) Set(key, state string, expire int64, stored string, hasStored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[key] = &entry{state: state, expire: expire, stored: stored, hasStored: hasStored}
}

// Get returns key's state at now ("" if none) and its stored limit.
func (s *Store) Get(key string, now int64) (state, stored string, hasStored bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, has := s.state(key, now)
	if e == nil {
		return "", "", false
	}
	if !has {
		return "", e.stored, e.hasStored
	}
	return e.state, e.stored, e.hasStored
}

// Delete forgets key.
func (s *Store) Delete(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, key)
}

// Keys returns the keys the Store holds.
func (s *Store) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.keys))
	for k := range s.keys {
		out = append(out, k)
	}
	return out
}

// Resume runs resume.lua on c's key: it returns the ns from now until the
// pause that was in force would have ended, and how far (ns) the
// reservations granted during it moved earlier.
func (s *Store) Resume(c Call) (was, moved int64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g, e, err := s.load(c)
	if err != nil {
		return 0, 0, err
	}
	was, moved = g.Resume()
	s.save(c, e, g)
	return was, moved, nil
}

// SetStored stores key's limit ("<mode> <text>"; "" removes it), and marks
// its state as one whose stored limit must be read, as admin.lua does.
func (s *Store) SetStored(key, stored string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.keys[key]
	if e == nil {
		e = &entry{}
		s.keys[key] = e
	}
	e.stored, e.hasStored = stored, stored != ""
	if stored != "" && e.state != "" {
		e.state = markStored(e.state)
	}
}

// markStored sets a state's flag "a stored limit may exist" (admin.lua).
func markStored(state string) string {
	if m := format2Re.FindStringSubmatch(state); m != nil {
		if strings.HasPrefix(m[4], "c") {
			return state
		}
		return m[1] + " " + m[2] + " " + m[3] + " c" + m[4] + m[5]
	}
	if m := format1Re.FindStringSubmatch(state); m != nil {
		return "1 " + m[2] + " " + m[3] + " " + m[4] + " " + m[5] + " 1" + m[7]
	}
	return state
}

// Sweep forgets the keys whose state has expired at now and that have no
// stored limit.
func (s *Store) Sweep(now int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, e := range s.keys {
		if _, has := s.state(k, now); !has && !e.hasStored {
			delete(s.keys, k)
		}
	}
}
