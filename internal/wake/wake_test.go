package wake

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNeverEarly: sleeps of every length around the margin, from many
// goroutines at once, never end before their deadline. Lateness is logged,
// not asserted (cmd/pacerbench measures it): a loaded machine moves it.
func TestNeverEarly(t *testing.T) {
	s := Sleeper{Margin: DefaultMargin}
	var (
		mu   sync.Mutex
		late []time.Duration
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				deadline := time.Now().Add(time.Duration(rand.Int64N(int64(5 * time.Millisecond))))
				require.NoError(t, s.Sleep(context.Background(), deadline))
				now := time.Now()
				assert.False(t, now.Before(deadline), "woke early")
				mu.Lock()
				late = append(late, now.Sub(deadline))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(late)
	t.Logf("%d sleeps: late p50 %v, p99 %v, max %v", len(late), late[len(late)/2], late[len(late)*99/100], late[len(late)-1])
}

// TestPreciseSleep: the precise sleep works (on Linux, the timerfd calls
// succeed) and sleeps at least as long as asked.
func TestPreciseSleep(t *testing.T) {
	for _, d := range []time.Duration{time.Microsecond, 300 * time.Microsecond, 2 * time.Millisecond} {
		start := time.Now()
		deadline := start.Add(d)
		require.True(t, preciseUntil(deadline), "preciseUntil(now + %v) failed", d)
		assert.False(t, time.Now().Before(deadline), "preciseUntil(now + %v) returned early", d)
	}
}

// TestContext: a sleep ends with ctx's error when ctx ends before the last
// margin, well before its deadline.
func TestContext(t *testing.T) {
	s := Sleeper{Margin: 20 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	deadline := time.Now().Add(time.Minute)
	err := s.Sleep(ctx, deadline)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, time.Now().Before(deadline), "returned at the deadline, not when ctx ended")
}

// TestTimerOnly: with a negative margin the timer does it all, never early.
func TestTimerOnly(t *testing.T) {
	s := Sleeper{Margin: -1}
	deadline := time.Now().Add(3 * time.Millisecond)
	require.NoError(t, s.Sleep(context.Background(), deadline))
	assert.False(t, time.Now().Before(deadline))
}
