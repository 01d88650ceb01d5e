package reserve

import (
	"testing"
)

// TestGetKeepsTheKeyItFinds: a key found in the table is not swept before
// its use counts, so the caller never works on a keyState the table has
// dropped while the next caller makes another: one key, one state. (Before,
// get marked the key used after releasing the table's lock: a sweep in
// between dropped a key idle for keyIdle that a caller had just found.)
func TestGetKeepsTheKeyItFinds(t *testing.T) {
	l := &Limiter{clock: systemClockValue}
	old := l.states.get("k")
	old.used.Store(monoNow() - int64(2*keyIdle)) // idle long enough to be swept
	swept := false
	l.states.gotHook = func(*keyState) {
		if !swept {
			swept = true
			l.sweepKeys() // the loop's sweep, between the lookup and the use
		}
	}
	got := l.states.get("k")
	l.states.gotHook = nil
	if got != old {
		t.Fatal("get made a new keyState for a key the table held")
	}
	if now := l.states.peek("k"); now != got {
		t.Fatalf("the table holds %p for the key, get returned %p: the caller works on a state the table dropped", now, got)
	}
}
