// Package keyvalues bounds how many distinct values a metrics attribute
// (otelpacer's pacer.key, prommetrics' key label) takes: the first Max
// values seen keep their own, later ones become Other. Each value is a
// series in each instrument that has the attribute (a histogram's buckets
// with it), so a mapping that makes one value per key of a crawler would
// make millions.
package keyvalues

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// Default is the bound's default: the most distinct values with series of
// their own.
const Default = 100

// Other is the value of a key whose value came after the bound's others.
const Other = "(other)"

// Set holds the values admitted. Its zero value admits none: make one
// with New.
type Set struct {
	shards [shards]shard
	seed   maphash.Seed
	n      atomic.Int64 // values admitted
	max    int64        // < 0: no bound
}

const shards = 64

type shard struct {
	mu sync.RWMutex
	m  map[string]struct{}
	_  [32]byte // apart from the next shard's lock
}

// New returns a Set that admits max values (-1: every value). It does not
// check max: callers check their option's range.
func New(max int) *Set {
	s := &Set{seed: maphash.MakeSeed(), max: int64(max)}
	for i := range s.shards {
		s.shards[i].m = map[string]struct{}{}
	}
	return s
}

// Admit returns v if it has series of its own, admitting it while fewer
// than the bound have; else Other. A value found is one read of one shard
// of a map by value; a new one, one insert: O(1).
func (s *Set) Admit(v string) string {
	if s.max < 0 {
		return v
	}
	sh := &s.shards[maphash.String(s.seed, v)%shards]
	sh.mu.RLock()
	_, ok := sh.m[v]
	sh.mu.RUnlock()
	if ok {
		return v
	}
	if s.n.Load() >= s.max {
		return Other
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[v]; ok {
		return v
	}
	if s.n.Add(1) > s.max {
		s.n.Add(-1) // another value took the last place meanwhile
		return Other
	}
	sh.m[v] = struct{}{}
	return v
}
