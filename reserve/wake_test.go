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
// goroutines at once, never end before their deadline. Lateness is logged,
// not asserted (BENCHMARKS.md measures it): shared test machines are noisy.
func TestWakerNeverEarly(t *testing.T) {
	w := newWaker(DefaultPreciseWake)
	defer w.close()
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

// TestWakerContext: a sleep ends with ctx's error when ctx ends, in either
// part of the sleep.
func TestWakerContext(t *testing.T) {
	w := newWaker(50 * time.Millisecond)
	defer w.close()
	for _, after := range []time.Duration{10 * time.Millisecond, 80 * time.Millisecond} { // on the timer; on the waker
		ctx, cancel := context.WithTimeout(context.Background(), after)
		start := time.Now()
		err := w.sleep(ctx, 100*time.Millisecond)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "ctx ending after %v", after)
		assert.Less(t, time.Since(start), 100*time.Millisecond, "returned at the deadline, not when ctx ended")
	}
}

// TestWakerClose: close wakes the sleepers already handed over, on time, and
// stops the goroutine; later sleeps still sleep, on timers.
func TestWakerClose(t *testing.T) {
	w := newWaker(20 * time.Millisecond)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			start := time.Now()
			assert.NoError(t, w.sleep(context.Background(), 10*time.Millisecond))
			assert.GreaterOrEqual(t, time.Since(start), 10*time.Millisecond)
		})
	}
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		return len(w.q) == 4
	}, 5*time.Second, 100*time.Microsecond)
	w.close()
	select {
	case <-w.done:
	default:
		t.Fatal("close returned before the loop ended")
	}
	wg.Wait()
	start := time.Now()
	require.NoError(t, w.sleep(context.Background(), 5*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 5*time.Millisecond)
}

// TestWakerOff: a negative margin never starts the goroutine.
func TestWakerOff(t *testing.T) {
	w := newWaker(-1)
	start := time.Now()
	require.NoError(t, w.sleep(context.Background(), 3*time.Millisecond))
	assert.GreaterOrEqual(t, time.Since(start), 3*time.Millisecond)
	w.mu.Lock()
	assert.False(t, w.running)
	w.mu.Unlock()
	w.close()
}
