package reserve_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// failNamed is a go-redis hook that fails, as a lost connection would,
// every command that names a string containing key: a key on a Cluster
// shard that is down, while the fleet's keys answer.
type failNamed struct {
	passHook
	key string
}

func (h failNamed) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		for _, a := range cmd.Args() {
			if s, ok := a.(string); ok && strings.Contains(s, h.key) {
				err := errors.New("injected: connection reset by peer")
				cmd.SetErr(err)
				return err
			}
		}
		return next(ctx, cmd)
	}
}

// TestOneKeyDownOnNewcomer: a Limiter that joins a fleet and at once finds
// one key's commands failing (its heartbeats answer) paces that key
// locally on its share once the fleet knows it: a caller who can wait
// gets a slot, not a wait with no end. Before, it joined as a newcomer with
// no share, and every probe that succeeded brought it back to Redis, where
// the key failed again: the integration/web test hung on its first Reserve.
func TestOneKeyDownOnNewcomer(t *testing.T) {
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	opts := reserve.Options{KeyPrefix: prefix, HeartbeatInterval: 200 * time.Millisecond, ProbeInterval: 200 * time.Millisecond,
		FailAfter: 1, CallTimeout: 10 * time.Second, Logger: quiet}
	if os.Getenv("PACER_DEBUG") != "" {
		opts.Logger = slog.Default()
	}
	a, err := reserve.New(s.Client, opts)
	require.NoError(t, err)
	closeLimiter(t, a)
	b, err := reserve.New(s.NewClient(t), opts)
	require.NoError(t, err)
	closeLimiter(t, b)
	ctx := t.Context()
	_, err = a.Reserve(ctx, "steady", reserve.Limit{Rate: 1, Burst: 1})
	require.NoError(t, err)
	_, err = b.Reserve(ctx, "steady", reserve.Limit{Rate: 1, Burst: 1})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.FleetSize() == 2 && b.FleetSize() == 2 }, 30*time.Second, 5*time.Millisecond)

	broken := tunedClient(t, s)
	broken.AddHook(failNamed{key: prefix + "{flaky}"})
	c, err := reserve.New(broken, opts)
	require.NoError(t, err)
	closeLimiter(t, c)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Reserve(cctx, "flaky", reserve.Limit{Rate: 1, Burst: 1})
	require.NoError(t, err, "after %v", time.Since(start))
	t.Logf("granted after %v", time.Since(start))
}

// TestPauseAfterResume: an operator pauses a key for long, calls queue
// behind the pause, the operator resumes it, and a 429 pauses it again for
// a moment. A call granted then gets a slot after the short pause and the
// queue, not at the long pause's end. (The combination runner's seed 23
// showed calls granted after a resume and a 429's pause at the resumed
// pause's end; this simplest form of it holds.)
func TestPauseAfterResume(t *testing.T) {
	s := redistest.New(t)
	ctx := t.Context()
	prefix := redistest.Prefix(t)
	l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	pol := reserve.Policy{{Name: "rps", Limit: reserve.Limit{Rate: 20, Burst: 2}}}
	cost := reserve.Cost{"rps": 1}
	_, err = l.ReserveN(ctx, reserve.Request{Key: "api", Policy: pol, Cost: cost})
	require.NoError(t, err)
	require.NoError(t, a.Pause(ctx, "api", 10*time.Second, "ops", "the provider is down"))
	for range 5 {
		r, err := l.ReserveN(ctx, reserve.Request{Key: "api", Policy: pol, Cost: cost})
		require.NoError(t, err)
		require.Greater(t, r.Delay(), 9*time.Second, "a slot behind the pause")
	}
	require.NoError(t, a.Resume(ctx, "api", "ops", "the provider is back"))
	require.NoError(t, l.Pause(ctx, "api", 1300*time.Millisecond))
	r, err := l.ReserveN(ctx, reserve.Request{Key: "api", Policy: pol, Cost: cost})
	require.NoError(t, err)
	require.Less(t, r.Delay(), 2*time.Second, "a call after the resume and a short pause")
}
