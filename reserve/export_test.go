package reserve

// FleetSize exposes the fleet size last learned, for tests.
func (l *Limiter) FleetSize() int { return l.fleetSize() }

// Degraded exposes whether the Limiter paces locally, for tests.
func (l *Limiter) Degraded() bool { return l.isDegraded() }

// Queued returns how many callers wait on key and lim for a call in flight to
// return, for tests.
func (l *Limiter) Queued(key string, lim Limit) int {
	c := &l.coalescer
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[batchKey{key, lim}]; q != nil {
		return len(q.pending)
	}
	return 0
}
