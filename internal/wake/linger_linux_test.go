package wake

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSharedTimerLingers: a sleeper that comes after the last one left,
// within Linger, sleeps on the same timerfd (before, the goroutine closed
// it as the last sleeper left, and a sleeper alone in its process made
// and closed one of its own each time: six system calls a sleep); the
// linger counts from the last sleeper's wake (a sleeper every few hundred
// ms keeps the timer for good); once no sleeper has come for Linger, the
// goroutine closes it and ends. Each sleep still ends at or after its
// deadline.
func TestSharedTimerLingers(t *testing.T) {
	current := func() *os.File {
		shared.mu.Lock()
		defer shared.mu.Unlock()
		return shared.f
	}
	// Whatever an earlier test left lingering ends first.
	require.Eventually(t, func() bool { return current() == nil }, 10*time.Second+Linger, time.Millisecond)

	deadline := time.Now().Add(time.Millisecond)
	require.True(t, preciseUntil(deadline))
	assert.False(t, time.Now().Before(deadline), "woke early")
	first := current()
	require.NotNil(t, first, "the timer ended as its last sleeper left")
	renewed := 0
	for i := range 20 {
		deadline := time.Now().Add(200 * time.Microsecond)
		require.True(t, preciseUntil(deadline))
		require.False(t, time.Now().Before(deadline), "sleep %d woke early", i)
		f := current()
		require.NotNil(t, f, "sleep %d: the timer ended as its last sleeper left", i)
		// The linger counts from this sleeper's wake, not from when the
		// timer first found itself idle: a sleeper every few hundred ms
		// keeps it for good.
		shared.mu.Lock()
		idle := shared.idleSince
		shared.mu.Unlock()
		require.False(t, idle.Before(deadline), "sleep %d: the timer lingers from %v, before this sleeper's deadline %v", i, idle, deadline)
		if f != first {
			// Only a test left off the CPU for Linger between two sleeps
			// sees the timer end and a new one made.
			renewed++
			first = f
		}
	}
	t.Logf("a new timer %d times in 20 sleeps", renewed)
	require.Eventually(t, func() bool { return current() == nil }, 10*time.Second+Linger, time.Millisecond,
		"the timer outlived its last sleeper by more than Linger")
}
