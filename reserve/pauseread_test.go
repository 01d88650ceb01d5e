package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReplyIsPauseRead: a reservation's reply shows the key's state as a
// pause check's GET would, so it stands for one; but only a reply to a call
// sent after the last read arrived replaces that read: one that may have
// run before it would hide a pause the read showed, and a sleeper would
// fire into it.
func TestReplyIsPauseRead(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, FailClosed: true, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1000, Burst: 1}

	_, err = l.Reserve(ctx, "p", lim)
	require.NoError(t, err)
	assert.Zero(t, l.KnownPause("p"), "pause known after a reply showing none")

	// A pause made by another Limiter shows in this one's next reply.
	other, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, FailClosed: true, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, other)
	require.NoError(t, other.Pause(ctx, "p", time.Minute))
	_, err = l.Reserve(ctx, "p", lim)
	require.NoError(t, err)
	end := l.KnownPause("p")
	assert.Greater(t, end, time.Now().Add(50*time.Second).UnixNano(), "pause end known from the reply")

	// A reply showing an older state (written before, its call sent
	// before the last one arrived) does not replace it; one sent after
	// does, whatever its write time (a server clock that stepped back).
	older := "1700000000000000 5000 1 0 0 0"
	l.ObserveState("p", older, time.Now().Add(-time.Second))
	assert.Equal(t, end, l.KnownPause("p"), "an older state replaced a newer one")
	l.ObserveState("p", older, time.Now().Add(time.Millisecond))
	assert.Zero(t, l.KnownPause("p"), "a state shown by a call sent after the last one arrived was not taken")
	l.ObserveState("p", "", time.Time{}) // an event's
	assert.Zero(t, l.KnownPause("p"))

	// A lease's reply carries the state too.
	hot := reserve.Limit{Rate: 1e6, Burst: 1}
	require.NoError(t, other.Pause(ctx, "h", time.Minute))
	slots, _, ok, err := l.LeaseSlots(ctx, "h", hot, 10, false)
	require.NoError(t, err)
	require.True(t, ok, "not leasable")
	end = l.KnownPause("h")
	assert.Greater(t, end, time.Now().Add(50*time.Second).UnixNano(), "pause end known from the lease's reply")
	assert.GreaterOrEqual(t, slots[0], end, "a leased slot inside the pause")
}
