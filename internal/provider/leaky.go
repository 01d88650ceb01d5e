package provider

import "time"

// Leaky is a leaky-bucket admission rule as common reverse-proxy limiters
// apply it (nginx's limit_req without burst, and its many copies): calls
// are admitted at most Rate per second, evenly spaced, on a clock of whole
// milliseconds, with one call of tolerance: a call may come up to one
// interval (1/Rate) before its turn. A call refused does not count. Its zero
// value is unusable; set Rate.
type Leaky struct {
	Rate float64 // calls per second; > 0

	tat     int64 // µs: the theoretical arrival time of the next call
	started bool
}

// Admit reports whether a call at t is admitted, and counts it if so.
func (l *Leaky) Admit(t time.Time) bool {
	now := t.UnixMilli() * 1000 // the millisecond clock, in µs
	interval := int64(1e6 / l.Rate)
	if !l.started {
		l.started, l.tat = true, now
	}
	if now < l.tat-interval {
		return false
	}
	l.tat = max(l.tat, now) + interval
	return true
}

// LeakyRejections returns how many of the calls at times (in any order) a
// Leaky at rate would refuse.
func LeakyRejections(times []time.Time, rate float64) int {
	sorted := sortedCopy(times)
	l := Leaky{Rate: rate}
	n := 0
	for _, t := range sorted {
		if !l.Admit(t) {
			n++
		}
	}
	return n
}
