package otelpacer

import (
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/pacer-go/pacer/reserve"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// MaxCachedSets is how many attribute sets a Telemetry caches at most (see
// "Cost" in docs/otel.md). A KeyAttribute value has a set for each of its
// grants' source and band, its units, and pacer.key alone: a KeyAttribute
// with more values than the cache holds still counts every measurement,
// under its own pacer.key, but the sets beyond are built for each
// measurement, a few small allocations each.
const MaxCachedSets = 8192

// setKey names one attribute set: the instrument's kind and the values of
// its attributes ("" for those it does not have).
type setKey struct {
	kind            setKind
	source          reserve.Source
	band, key, unit string
	hasKey          bool
}

type setKind uint8

const (
	grantSet setKind = iota
	unitSet
	keySet
)

// shape is a setKey but its pacer.key.
type shape struct {
	kind       setKind
	source     reserve.Source
	band, unit string
}

// setCache caches the attribute sets of the hot paths (a reservation, its
// units, a queued Wait): building a set allocates. It finds a pacer.key
// value's sets in one shard of a map by value, and among them the set of a
// shape in a short list (a value has a few: its sources, bands and units).
// A new value is one insert into one shard: O(1), whatever the cache
// holds. (Until issue 43 the cache was one map, copied whole under a lock
// for every new set, on the way from a Wait's grant to its sleep: 2,000
// new values took seconds, and most of their Waits woke late and took a
// second slot.)
type setCache struct {
	noKey  valueSets // the sets without pacer.key
	shards [setShards]setShard
	seed   maphash.Seed
	n      atomic.Int64 // sets cached
	max    int64
}

// setShards is the number of shards of the map by value.
const setShards = 64

type setShard struct {
	mu sync.RWMutex
	m  map[string]*valueSets
	_  [32]byte // apart from the next shard's lock
}

// valueSets are the sets of one pacer.key value (or of none).
type valueSets struct {
	mu     sync.Mutex                  // held to add a set
	shapes atomic.Pointer[[]shapedSet] // copied on write: a few sets
}

type shapedSet struct {
	shape shape
	o     metric.MeasurementOption
}

func (c *setCache) init(maxSets int) {
	c.seed, c.max = maphash.MakeSeed(), int64(maxSets)
	for i := range c.shards {
		c.shards[i].m = map[string]*valueSets{}
	}
}

// get returns the measurement option of k's attribute set, made once and
// cached (up to c.max sets; beyond, made for each call).
func (c *setCache) get(k setKey) metric.MeasurementOption {
	vs := &c.noKey
	if k.hasKey {
		if vs = c.value(k.key); vs == nil {
			return k.build() // the cache is full
		}
	}
	sp := shape{kind: k.kind, source: k.source, band: k.band, unit: k.unit}
	if o, ok := vs.find(sp); ok {
		return o
	}
	o := k.build()
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if got, ok := vs.find(sp); ok {
		return got // another goroutine made it first
	}
	if c.n.Add(1) > c.max {
		c.n.Add(-1) // full: not cached
		return o
	}
	var old []shapedSet
	if p := vs.shapes.Load(); p != nil {
		old = *p
	}
	sets := append(slices.Clip(old), shapedSet{shape: sp, o: o})
	vs.shapes.Store(&sets)
	return o
}

// value returns the sets of pacer.key value v, added if need be; nil when
// v has none and the cache is full.
func (c *setCache) value(v string) *valueSets {
	sh := &c.shards[maphash.String(c.seed, v)%setShards]
	sh.mu.RLock()
	vs := sh.m[v]
	sh.mu.RUnlock()
	if vs != nil {
		return vs
	}
	if c.n.Load() >= c.max {
		return nil
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if vs = sh.m[v]; vs == nil {
		vs = &valueSets{}
		sh.m[v] = vs
	}
	return vs
}

// find returns the set of shape sp, if cached.
func (vs *valueSets) find(sp shape) (metric.MeasurementOption, bool) {
	if p := vs.shapes.Load(); p != nil {
		for _, s := range *p {
			if s.shape == sp {
				return s.o, true
			}
		}
	}
	return nil, false
}

// build makes k's attribute set.
func (k setKey) build() metric.MeasurementOption {
	kv := make([]attribute.KeyValue, 0, 3)
	switch k.kind {
	case grantSet:
		kv = append(kv, attrSource.String(k.source.String()), attrBand.String(k.band))
	case unitSet:
		kv = append(kv, attrSource.String(k.source.String()), attrUnit.String(k.unit))
	}
	if k.hasKey {
		kv = append(kv, attrKey.String(k.key))
	}
	return metric.WithAttributeSet(attribute.NewSet(kv...))
}
