package reserve

// FleetSize exposes the fleet size last learned, for tests.
func (l *Limiter) FleetSize() int { return l.fleetSize() }

// Degraded exposes whether the Limiter paces locally, for tests.
func (l *Limiter) Degraded() bool { return l.isDegraded() }
