package reserve

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

// TestWakerNeverEarly: sleeps of every length around the margin, from many
// goroutines at once, never end before their deadline. Lateness is logged, not asserted (BENCHMARKS.md
// measures it): shared test machines are noisy.
func TestWakerNeverEarly(t *testing.T) {
	w := newWaker(DefaultPreciseWake)
	var (
		mu   sync.Mutex
		late []time.Duration
		wg   sync.WaitGroup
	)
	for range 8 {
		wg.Go(func() {
			for range 50 {
				d := time.Duration(rand.Int64N(int64(5 * time.Millisecond)))
				start := time.Now()
				require.NoError(t, w.sleep(context.Background(), d))
				got := time.Since(start)
				assert.GreaterOrEqual(t, got, d, "woke early")
				mu.Lock()
				late = append(late, got-d)
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
		require.True(t, preciseSleep(d), "preciseSleep(%v) failed", d)
		assert.GreaterOrEqual(t, time.Since(start), d, "preciseSleep(%v) returned early", d)
	}
}

// TestWakerContext: a sleep ends with ctx's error when ctx ends before the
// last margin.
func TestWakerContext(t *testing.T) {
	w := newWaker(20 * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := w.sleep(ctx, 100*time.Millisecond)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 100*time.Millisecond, "returned at the deadline, not when ctx ended")
}

// TestWakerOff: with a negative margin the timer does it all.
func TestWakerOff(t *testing.T) {
	w := newWaker(-1)
	start := time.Now()
	require.NoError(t, w.sleep(context.Background(), 3*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 3*time.Millisecond)
}
