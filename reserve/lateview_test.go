package reserve_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// waits delay, as through a network that delays replies. Every heartbeat
// waits outbound (nanoseconds) before it is sent.
type lateFleetReply struct {
	passHook
	key       string
	delay     time.Duration
	armed     atomic.Bool
	meanwhile func()
	outbound  atomic.Int64
}

func (h *lateFleetReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k, ok := scriptKey(cmd)
		if !ok || k != h.key {
			return next(ctx, cmd)
		}
		time.Sleep(time.Duration(h.outbound.Load()))
		if h.armed.CompareAndSwap(true, false) {
			err := next(ctx, cmd)
			h.meanwhile()
			time.Sleep(h.delay)
			return err
		}
		return next(ctx, cmd)
	}
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

			// The other member heard from on Redis since: the whole again,
			// once it was heard from after the reply arrived by more than
			// a's next heartbeat takes to reach Redis. The window a
			// heartbeat sends (how recently a member must have been heard
			// from) is counted back from when the script runs, and a
			// heartbeat that reached Redis late (here 50 ms) finds a
			// member heard from just after the reply still silent: it is
			// held, the safe side. (Without the 50 ms, one run of the
			// README's test command found it held at once: a loaded
			// machine delays the heartbeat the same way.)
			late.outbound.Store(int64(50 * time.Millisecond))
			var shares []float64
			for range 20 {
				member("redis", start.Add(2*time.Millisecond))
				require.NoError(t, a.Beat(ctx))
				if shares = append(shares, a.Share()); a.Share() == 1.0 {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("a's shares, a heartbeat after each of the other's: %v", shares)
			assert.Equal(t, 1.0, shares[len(shares)-1], "the other member, heard from since, is still held: shares %v", shares)
		})
	}
}

// heartbeatSent closes sent when the client sends a heartbeat on key
// while armed.
type heartbeatSent struct {
	passHook
	key   string
	armed atomic.Bool
	once  sync.Once
	sent  chan struct{}
}

func (h *heartbeatSent) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k, ok := scriptKey(cmd); ok && k == h.key && h.armed.Load() {
			h.once.Do(func() { close(h.sent) })
		}
		return next(ctx, cmd)
	}
}

// TestLateRedisBeatHoldsLocalSlots: a Limiter that switches to local
// pacing while a heartbeat of its saying "redis" is under way, or after
// one it gave up on whose deadline is still ahead, takes no local slot
// until the fleet has heard it say "local" (settle: two heartbeat
// intervals after a "local" reached Redis), or has held it by its silence
// since that heartbeat could last run. Such a heartbeat, run late (a
// frozen Redis holds it, a CLIENT PAUSE queues it), marks the Limiter
// heard from on Redis after its switch, and a member back from the same
// outage stops holding it. Before, the combination runner's seed 28 saw
// two grants at one instant on a band of burst 1, 0.6 s after a CLIENT
// PAUSE of 2.35 s: one member's local slot, and another's on Redis, whose
// view the late "redis" had just changed. A heartbeat answered is Redis
// answering: the Limiter probes at once.
func TestLateRedisBeatHoldsLocalSlots(t *testing.T) {
	for _, givenUp := range []bool{false, true} {
		t.Run(map[bool]string{false: "answered", true: "given up"}[givenUp], func(t *testing.T) {
			t.Parallel()
			s := redistest.NewProcess(t)
			ctx := context.Background()
			prefix := redistest.Prefix(t)
			keys := reserve.FleetKeysOf(prefix)
			c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
			t.Cleanup(func() { c.Close() })
			// Hour-long intervals: the test runs the heartbeats, and no
			// probe comes but the one an answer starts. A call timeout
			// of 3 s: the heartbeat's deadline comes after the thaw, and
			// the presence's check before it ends at its timeout.
			l := manualLimiter(t, c, reserve.Options{KeyPrefix: prefix, Logger: quiet, HeartbeatInterval: time.Hour,
				ProbeInterval: time.Hour, SilentHold: 3 * time.Hour, CallTimeout: 3 * time.Second})
			require.NoError(t, l.Beat(ctx))
			hourMember(t, s.Client, keys, "other") // joins after this Limiter: the newcomer is the other
			require.NoError(t, l.Beat(ctx))
			require.Equal(t, 2, l.FleetSize())
			// A reservation on Redis: an estimate of its clock, which
			// heartbeats' deadlines need.
			_, err := l.Reserve(ctx, "warm", reserve.Limit{Rate: 10, Burst: 1})
			require.NoError(t, err)
			try := func() error {
				_, err := l.TryReserveN(ctx, reserve.Single("api", reserve.Limit{Rate: 10, Burst: 1}, 1), 0)
				return err
			}
			refused := func(when string) {
				t.Helper()
				var tooLong *reserve.WaitTooLongError
				err := try()
				require.ErrorAs(t, err, &tooLong, "%s: a local slot while the fleet may count this Limiter on Redis", when)
				assert.Equal(t, reserve.OutageBinding, tooLong.Band, "%s: %v", when, err)
			}

			hook := &heartbeatSent{key: keys[0], sent: make(chan struct{})}
			c.AddHook(hook)
			s.Freeze(t)
			thawed := false
			t.Cleanup(func() {
				if !thawed {
					s.Thaw(t)
				}
			})
			hook.armed.Store(true)
			bctx, cancel := context.WithCancel(ctx)
			defer cancel()
			beat := make(chan error, 1)
			go func() { beat <- l.Beat(bctx) }()
			<-hook.sent // "redis", held by the frozen Redis
			if givenUp {
				cancel()
				require.Error(t, <-beat)
			}
			l.Degrade(errors.New("the test: a call failed and a ping confirmed it"))
			require.True(t, l.Degraded())
			refused("frozen")

			s.Thaw(t)
			thawed = true
			if !givenUp {
				// The heartbeat's answer brings the Limiter back.
				require.NoError(t, <-beat)
				require.Eventually(t, func() bool { return !l.Degraded() }, 20*time.Second, 10*time.Millisecond,
					"back on Redis after the heartbeat's answer")
				return
			}
			// Nobody heard the late "redis" run. The "local" told at the
			// switch reached Redis after it, and the fleet hears it within
			// settle (two hours here): until then, no local slot.
			require.NoError(t, l.Beat(ctx)) // "local", answered
			refused("thawed, told")
			assert.True(t, l.Degraded(), "no probe brought the Limiter back")
		})
	}
}
