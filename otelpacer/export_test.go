package otelpacer

// SetMaxCachedSets sets t's bound on its cache of attribute sets
// (MaxCachedSets), for the tests of what lies beyond it.
func (t *Telemetry) SetMaxCachedSets(n int) { t.sets.max = int64(n) }

// CachedSets returns how many attribute sets t caches.
func (t *Telemetry) CachedSets() int {
	count := func(vs *valueSets) int {
		if p := vs.shapes.Load(); p != nil {
			return len(*p)
		}
		return 0
	}
	n := count(&t.sets.noKey)
	for i := range t.sets.shards {
		sh := &t.sets.shards[i]
		sh.mu.RLock()
		for _, vs := range sh.m {
			n += count(vs)
		}
		sh.mu.RUnlock()
	}
	return n
}
