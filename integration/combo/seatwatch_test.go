package combo

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadSeats: the watcher reads the seats Redis counts, in the layout
// seats.lua writes (the tickets' hash, KEYS[4]). Before, it read the
// holders' hash, where no ticket is: every snapshot of every run was
// empty, and the judges reading them (a stopped holder's seats, the
// tickets left at the end) had nothing to judge.
func TestReadSeats(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	pol := reserve.Policy{{Name: seatBand, Unit: unitRequests, InFlight: 2}}
	req := reserve.Request{Key: KeySeats, Policy: pol, Cost: reserve.Cost{unitRequests: 1}}
	a, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	b, err := l.Acquire(ctx, req)
	require.NoError(t, err)
	waiting, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l.Acquire(waiting, req); done <- err }()
	require.Eventually(t, func() bool { return len(readSeats(ctx, s.Client, prefix).Waiting) == 1 }, 10*time.Second, 5*time.Millisecond,
		"the third call waits in Redis's queue")
	snap := readSeats(ctx, s.Client, prefix)
	require.Empty(t, snap.Err)
	require.Len(t, snap.Held, 2, "two tickets hold a seat each: %v", snap.Held)
	require.Len(t, snap.Holders, 1, "one holder: %v", snap.Holders)
	assert.Equal(t, "2", strings.Fields(snap.Holders[0])[3], "its seats: %v", snap.Holders)
	for _, h := range snap.Held {
		f := strings.Fields(h)
		require.Len(t, f, 3, h)
		assert.Equal(t, 1, heldBy(SeatSnap{Held: []string{h}}, ticketLimiter(f[0])), h)
	}
	cancel()
	require.Error(t, <-done)
	a.Done()
	b.Done()
	require.Eventually(t, func() bool { return len(readSeats(ctx, s.Client, prefix).Held) == 0 }, 10*time.Second, 5*time.Millisecond,
		"given back")
}
