package luastore

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Store is an in-memory Redis keyspace that runs Redis scripts on itself
// as Redis 7.0 would, for the commands and libraries the project's
// scripts use (see the package documentation). It implements go-redis's
// redis.Scripter, so a *redis.Script runs on it with Run, Eval or EvalSha
// exactly as on a client.
//
// A script runs alone: the Store's lock is held from the first command to
// the reply, as Redis runs one script at a time, and the Go-side methods
// (Get, Set, ...) take the same lock. A Store is safe for concurrent use.
//
// Time comes from the clock given to New, read once when a script starts
// (or a method is called): TIME inside the script returns it, and keys
// expire by it, with Redis's millisecond precision. An expired key is
// absent to every command and method, and dropped when touched; Sweep
// drops them all.
//
// Scripts are compiled once, by their SHA1, and run on one Lua state that
// the Store keeps; KEYS and ARGV are set for each call.
type Store struct {
	clock func() time.Time

	mu      sync.Mutex
	keys    map[string]*entry
	n       atomic.Int64 // len(keys) as the last holder of mu left it (Empty)
	now     time.Time    // the time of the script or method in progress
	nowMs   int64        // now in Unix ms, for expiry
	scripts map[string]*lua.FunctionProto
	vm      *vm // created by the first script
}

// New returns an empty Store whose time is clock's (time.Now if nil).
func New(clock func() time.Time) *Store {
	if clock == nil {
		clock = time.Now
	}
	return &Store{clock: clock, keys: map[string]*entry{}, scripts: map[string]*lua.FunctionProto{}}
}

// unlock releases the Store's lock, noting how many keys it holds.
func (s *Store) unlock() {
	s.n.Store(int64(len(s.keys)))
	s.mu.Unlock()
}

// Empty reports whether the Store holds no key (expired ones included),
// without its lock: a caller that finds it empty needs no Get.
func (s *Store) Empty() bool { return s.n.Load() == 0 }

// tick reads the clock for the operation that holds the lock.
func (s *Store) tick() {
	s.now = s.clock()
	s.nowMs = s.now.UnixMilli()
}

// Get returns the string value of key, and whether it holds one (false
// when it is missing, expired or of another type).
func (s *Store) Get(key string) (string, bool) {
	s.mu.Lock()
	defer s.unlock()
	if s.keys[key] == nil {
		return "", false // no need of the clock (a sleeper's check asks every time)
	}
	s.tick()
	e := s.lookup(key)
	if e == nil || e.kind != kindString {
		return "", false
	}
	return e.str, true
}

// Set stores value under key as a string, replacing whatever the key
// held, to expire after ttl (rounded up to a whole millisecond); a ttl of
// zero or less: no expiry.
func (s *Store) Set(key, value string, ttl time.Duration) {
	s.mu.Lock()
	defer s.unlock()
	s.tick()
	e := &entry{kind: kindString, str: value}
	if ttl > 0 {
		e.expire = s.nowMs + int64((ttl+time.Millisecond-1)/time.Millisecond)
	}
	s.keys[key] = e
}

// PTTL returns how long key has to live, in whole milliseconds, as Redis's
// PTTL and go-redis's PTTL give it: -2 (time.Duration(-2), that is -2ns)
// when the key is missing, -1 (-1ns) when it has no expiry.
func (s *Store) PTTL(key string) time.Duration {
	s.mu.Lock()
	defer s.unlock()
	s.tick()
	t := s.ttl(key)
	if t < 0 {
		return time.Duration(t)
	}
	return time.Duration(t) * time.Millisecond
}

// Del deletes keys and returns how many of them existed.
func (s *Store) Del(keys ...string) int {
	s.mu.Lock()
	defer s.unlock()
	s.tick()
	n := 0
	for _, k := range keys {
		if s.lookup(k) != nil {
			delete(s.keys, k)
			n++
		}
	}
	return n
}

// Keys returns the live keys that start with prefix, sorted.
func (s *Store) Keys(prefix string) []string {
	s.mu.Lock()
	defer s.unlock()
	s.tick()
	var out []string
	for k, e := range s.keys {
		if strings.HasPrefix(k, prefix) && (e.expire == 0 || s.nowMs <= e.expire) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

// Sweep deletes every expired key and returns how many it deleted. Keys
// expire without it (they are absent once expired); it frees their memory.
func (s *Store) Sweep() int {
	s.mu.Lock()
	defer s.unlock()
	s.tick()
	n := 0
	for k, e := range s.keys {
		if e.expire != 0 && s.nowMs > e.expire {
			delete(s.keys, k)
			n++
		}
	}
	return n
}
