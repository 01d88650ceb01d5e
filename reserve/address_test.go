package reserve_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkAdvice ends New's error for a Redis it cannot reach.
const checkAdvice = "; check the address, that Redis is running there and that this host can reach it (Options.RequireRedis is set)"

// TestWrongAddress: with RequireRedis (the quick start's choice), New on an
// address where nothing listens fails with an error that matches
// ErrUnavailable, wraps the dial error, names the address and says what to
// check; without it New returns a Limiter and its warning names the address.
func TestWrongAddress(t *testing.T) {
	addr := deadAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()

	l, err := reserve.New(c, reserve.Options{RequireRedis: true, Logger: quiet})
	require.Nil(t, l)
	require.ErrorIs(t, err, reserve.ErrUnavailable)
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr, "the dial error: %v", err)
	assert.Equal(t, "reserve: new: cannot reach redis at "+addr+": reserve: redis unavailable: "+opErr.Error()+checkAdvice, err.Error())
	assert.Contains(t, opErr.Error(), addr)

	var logged lockedBuffer
	l, err = reserve.New(c, reserve.Options{Logger: slog.New(slog.NewTextHandler(&logged, nil)), HeartbeatInterval: time.Hour, ProbeInterval: time.Hour})
	require.NoError(t, err)
	closeLimiter(t, l)
	first, _, _ := strings.Cut(logged.String(), "\n")
	assert.Contains(t, first, `level=WARN msg="pacer: redis unavailable at start (a wrong address? Options.RequireRedis makes New fail instead)" redis="redis at `+addr+`"`)
}

// TestWrongAddressNamesIt: New's error names where each kind of client
// points.
func TestWrongAddressNamesIt(t *testing.T) {
	// Mostly waiting on addresses that do not answer: beside the other
	// parallel tests (the package's time in CI).
	t.Parallel()
	a, b := deadAddr(t), deadAddr(t)
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		name  string
		rdb   redis.UniversalClient
		where string
	}{
		{"unix", redis.NewClient(&redis.Options{Network: "unix", Addr: sock}), "redis at unix socket " + sock},
		{"cluster", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{a, b}}), "redis cluster at " + a + ", " + b},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"two": b, "one": a}}), "redis ring at one=" + a + ", two=" + b},
		{"sentinel", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{a}}),
			"redis through Sentinel (check FailoverOptions.SentinelAddrs and MasterName)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.rdb.Close()
			_, err := reserve.New(tc.rdb, reserve.Options{RequireRedis: true, Logger: quiet})
			require.ErrorIs(t, err, reserve.ErrUnavailable)
			msg := err.Error()
			prefix := "reserve: new: cannot reach " + tc.where + ": reserve: redis unavailable: "
			assert.True(t, strings.HasPrefix(msg, prefix) && strings.HasSuffix(msg, checkAdvice),
				"New(%s) = %q, want %q...%q", tc.name, msg, prefix, checkAdvice)
		})
	}
}

// TestQuickStartRoutesRedisLog: the quick start's
// redis.SetLogger(reserve.RedisLogger(logger)) brings go-redis's own line
// about a failed dial to the slog handler, at Debug level.
func TestQuickStartRoutesRedisLog(t *testing.T) {
	var logged lockedBuffer
	redis.SetLogger(reserve.RedisLogger(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	t.Cleanup(logging.Enable) // go-redis's default logger again
	addr := deadAddr(t)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	_, err := reserve.New(c, reserve.Options{RequireRedis: true, Logger: quiet})
	require.ErrorIs(t, err, reserve.ErrUnavailable)
	var lines []string
	for _, line := range strings.Split(logged.String(), "\n") {
		if strings.Contains(line, "dial tcp "+addr) {
			lines = append(lines, line)
		}
	}
	require.NotEmpty(t, lines, "no go-redis line about %s reached slog: %q", addr, logged.String())
	for _, line := range lines {
		assert.Contains(t, line, `level=DEBUG msg="go-redis: `)
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writes: go-redis logs
// from its own goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// slowFirst is a go-redis hook that holds the first heartbeat script call
// for a while (a loaded machine, a first call that dials and loads the
// script); later calls and pings go at once.
type slowFirst struct {
	passHook
	delay time.Duration
	once  sync.Once
}

func (h *slowFirst) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if key, ok := scriptKey(cmd); ok && strings.Contains(key, "{limiters}") {
			h.once.Do(func() {
				select {
				case <-time.After(h.delay):
				case <-ctx.Done():
				}
			})
		}
		return next(ctx, cmd)
	}
}

// TestSlowStart: a first heartbeat that times out on a Redis that answers
// a ping is a slow machine, not an outage: New (with RequireRedis or not)
// returns a Limiter on Redis, not an error nor one pacing locally. Before,
// a worker of examples/seats beside a CPU hog failed to start ("cannot
// reach redis ... took longer than 250ms").
func TestSlowStart(t *testing.T) {
	for _, require_ := range []bool{true, false} {
		t.Run(fmt.Sprintf("RequireRedis=%v", require_), func(t *testing.T) {
			c := tunedClient(t, redistest.New(t))
			c.AddHook(&slowFirst{delay: 300 * time.Millisecond})
			l, err := reserve.New(c, reserve.Options{KeyPrefix: redistest.Prefix(t), RequireRedis: require_,
				CallTimeout: 50 * time.Millisecond, HeartbeatInterval: time.Hour, ProbeInterval: time.Hour, Logger: quiet})
			require.NoError(t, err)
			closeLimiter(t, l)
			assert.False(t, l.Degraded(), "a slow first heartbeat taken for an outage")
			r, err := l.Reserve(context.Background(), "slow-start", reserve.Limit{Rate: 10, Burst: 1})
			require.NoError(t, err)
			assert.Equal(t, reserve.SourceRedis, r.Source())
		})
	}
}
