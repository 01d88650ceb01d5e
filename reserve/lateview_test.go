package reserve_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateFleetReply delays the reply of the next heartbeat it is armed for:
// the script runs on Redis at once, then meanwhile runs, then the reply
// waits delay, as through a network that delays replies.
type lateFleetReply struct {
	key       string
	delay     time.Duration
	armed     atomic.Bool
	meanwhile func()
}

func (h *lateFleetReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lateFleetReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		name := strings.ToLower(cmd.Name())
		if (name == "evalsha" || name == "eval") && len(args) >= 4 && args[3] == h.key && h.armed.CompareAndSwap(true, false) {
			err := next(ctx, cmd)
			h.meanwhile()
			time.Sleep(h.delay)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h *lateFleetReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLateHeartbeatViewDoubted: a heartbeat whose reply comes back late
// tells the fleet as it was when the script ran, and a member may have
// lost Redis meanwhile and paced locally on its share. The late view is
// doubted, and the next heartbeat, made at once, counts as held every
// member not heard from since the reply arrived, and those that said
// "local" meanwhile. Before, a member took the whole rate on a view that
// had left Redis 1.8 s before it arrived (a proxy delayed replies by a
// second), beside a member pacing locally since: 301 calls in a second
// under a bound of 221 (TestFaultLatency, 1 run in 6).
func TestLateHeartbeatViewDoubted(t *testing.T) {
	for _, told := range []bool{true, false} {
		name := map[bool]string{true: "told", false: "silent"}[told]
		t.Run(name, func(t *testing.T) {
			s := redistest.New(t)
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			keys := reserve.FleetKeysOf(prefix)
			member := func(mode string, since time.Time) {
				t.Helper()
				require.NoError(t, redis.NewScript(lua.Heartbeat).Run(ctx, s.Client, keys, "other", mode,
					fmt.Sprint(since.UnixMilli(), " 0 2"), 7_200_000, 10_800_000, 3_960_000, 60_000, "").Err())
			}
			late := &lateFleetReply{key: keys[0], delay: 1200 * time.Millisecond, meanwhile: func() {}}
			c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
			t.Cleanup(func() { c.Close() })
			c.AddHook(late)
			// Hour-long intervals: the test runs the heartbeats. A call
			// timeout of 1 s, which a slow network's round trips raise to
			// 2 s: the late heartbeat does not time out.
			a := manualLimiter(t, c, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: time.Hour,
				SilentHold: 3 * time.Hour, CallTimeout: time.Second})
			start := time.Now()
			member("redis", start)
			require.NoError(t, a.Beat(ctx))
			require.Equal(t, 2, a.FleetSize())
			require.Equal(t, 1.0, a.Share(), "the other member is live on Redis")

			a.SawRoundTrip(600 * time.Millisecond)
			if told {
				// The other member loses Redis after a's heartbeat ran, and
				// its "local" lands before a's reply does.
				late.meanwhile = func() { member("local", start.Add(time.Millisecond)) }
			}
			late.armed.Store(true)
			err := a.Beat(ctx)
			require.False(t, late.armed.Load(), "the heartbeat never ran")
			t.Logf("the late heartbeat: %v (a heartbeat that timed out, on a loaded machine, is doubted too)", err)
			assert.Equal(t, 0.5, a.Share(), "a takes the whole rate on a view that left Redis before the other member could be held")

			// The other member heard from on Redis since: the whole again.
			member("redis", start.Add(2*time.Millisecond))
			require.NoError(t, a.Beat(ctx))
			assert.Equal(t, 1.0, a.Share(), "the other member, heard from since, is still held")
		})
	}
}
