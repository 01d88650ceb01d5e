package reserve_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestGather: a caller whose key's queue is deep (the latest slot granted
// lies 2 ms or more ahead) holds its call for up to an eighth of that, at
// most 500 µs, so that callers who come meanwhile share it; a caller on a
// key with no queue, or whose maximum wait is shorter than the queue, calls
// at once. Gathered callers get exactly the slots calls of their own would
// have given, in order, and one whose context ends while held leaves with
// nothing reserved.
func TestGather(t *testing.T) {
	c := tunedClient(t, redistest.New(t))
	g := &gate{}
	c.AddHook(g)
	sent := &sentScripts{}
	c.AddHook(sent)
	l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t), FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 10, Burst: 1} // 100 ms apart

	assert.Zero(t, l.GatherFor("g", -1), "GatherFor on a key never reserved")
	first, err := l.Reserve(ctx, "g", lim)
	require.NoError(t, err)
	assert.Zero(t, l.GatherFor("g", -1), "GatherFor with the only slot now")
	_, err = l.Reserve(ctx, "g", lim) // the queue is now 100 ms deep
	require.NoError(t, err)
	d := l.GatherFor("g", -1)
	assert.Greater(t, d, time.Duration(0), "GatherFor on a 100 ms queue")
	assert.LessOrEqual(t, d, 500*time.Microsecond, "GatherFor on a 100 ms queue")
	assert.Zero(t, l.GatherFor("g", 10*time.Millisecond), "GatherFor with a maximum wait shorter than the queue")

	// Eight callers at once: each its own slot, 100 ms apart after the two
	// granted before, in some order; fewer script calls than callers.
	calls0 := g.scripts.Load()
	slots := make([]int64, 8)
	var wg sync.WaitGroup
	for i := range slots {
		wg.Go(func() {
			r, err := l.Reserve(ctx, "g", lim)
			if !assert.NoError(t, err) {
				return
			}
			slots[i], _ = reserve.ServerSlot(r)
		})
	}
	wg.Wait()
	base, _ := reserve.ServerSlot(first)
	seen := map[int64]bool{}
	for _, s := range slots {
		k := (s - base + int64(50*time.Millisecond)) / int64(100*time.Millisecond)
		assert.Equal(t, base+k*int64(100*time.Millisecond), s, "slot %d is not on the 100 ms grid from %d", s, base)
		assert.False(t, seen[k], "slot %d granted twice", k)
		assert.True(t, k >= 2 && k <= 9, "slot %d outside 2..9", k)
		seen[k] = true
	}
	assert.Less(t, g.scripts.Load()-calls0, int64(len(slots)), "script calls for %d gathered callers", len(slots))

	// A caller whose context ends while its call is held leaves the queue;
	// when no script call went meanwhile, nothing was reserved, and the
	// next caller gets the slot it would have had. Either way the key
	// serves the next caller.
	calls1 := sent.n.Load()
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := l.Reserve(cctx, "g", lim); done <- err }()
	cancel()
	err = <-done
	left := errors.Is(err, context.Canceled) && sent.n.Load() == calls1
	next, err := l.Reserve(ctx, "g", lim)
	require.NoError(t, err)
	if left {
		s, _ := reserve.ServerSlot(next)
		assert.Equal(t, base+10*int64(100*time.Millisecond), s, "the slot after a caller that left while held")
	}
	assert.Zero(t, l.Queued("g", lim), "callers queued at the end")
}

// sentScripts counts the script calls on buckets as they are sent.
type sentScripts struct {
	passHook
	n atomic.Int64
}

func (h *sentScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if onBucket(cmd) {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
