package reserve_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSlowWatch: the one timer that watches a Limiter's calls in flight
// (slowcall.go, in place of two timers per call) lets go of every call
// that returned, stops once none is left, and sees a call that passes its
// timeout (Redis frozen) as slow; that call still ends without an error.
func TestSlowWatch(t *testing.T) {
	s := redistest.NewProcess(t)
	ctx := context.Background()
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: redistest.Prefix(t), CallTimeout: 100 * time.Millisecond, HeartbeatInterval: time.Hour, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	lim := reserve.Limit{Rate: 1e6, Burst: 1000}

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				_, err := l.Reserve(ctx, "k"+string(rune('a'+(g+i)%4)), lim)
				assert.NoError(t, err)
			}
		})
	}
	wg.Wait()
	calls, _, slow0 := l.SlowWatch()
	assert.Equal(t, 0, calls, "calls still watched after every one returned")
	require.Eventually(t, func() bool { _, armed, _ := l.SlowWatch(); return !armed }, 10*time.Second, 10*time.Millisecond,
		"the watch's timer is still armed with no call in flight")

	s.Freeze(t)
	done := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, "ka", lim)
		done <- err
	}()
	require.Eventually(t, func() bool { _, _, slow := l.SlowWatch(); return slow > slow0 }, 10*time.Second, time.Millisecond,
		"a call to a frozen Redis never seen slow")
	s.Thaw(t)
	require.NoError(t, <-done)
	calls, _, _ = l.SlowWatch()
	assert.Equal(t, 0, calls, "calls still watched after every one returned")
}
