package reserve

import (
	"testing"
	"time"
)

// TestAnsweredOnlyMovesForward: when Redis last answered the Limiter only
// moves forward. Two answers noted out of order (the first caller read the
// clock, then lost the CPU while the second noted a later answer) leave
// the later one, which the check of a slow call compares with when its
// ping was sent: set back to before the ping, that answer no longer showed
// Redis slow rather than gone.
func TestAnsweredOnlyMovesForward(t *testing.T) {
	l := &Limiter{}
	base := time.Now()
	l.health.failures = 2
	l.answeredAt(base.Add(30 * time.Millisecond))
	l.health.failures = 1
	l.answeredAt(base) // read first, noted second
	if got := l.health.answered; !got.Equal(base.Add(30 * time.Millisecond)) {
		t.Errorf("answered %v after base+30ms, then base: want base+30ms", got.Sub(base))
	}
	if l.health.failures != 0 {
		t.Errorf("failures %d after an answer, want 0", l.health.failures)
	}
	l.answeredAt(base.Add(40 * time.Millisecond))
	if got := l.health.answered; !got.Equal(base.Add(40 * time.Millisecond)) {
		t.Errorf("answered %v after a later answer, want base+40ms", got.Sub(base))
	}
}
