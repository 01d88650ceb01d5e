package hold_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The Redis deployments the claim suite runs against, as package reserve's
// contract suite does.

// backend is a Redis the suite runs against.
type backend struct {
	client redis.UniversalClient
	// user, if set, is the client the Limiters get (a Redis user with only
	// the permissions pacer needs); else client.
	user redis.UniversalClient
	// elapse lets d of real time pass, as the server's key expiry sees it.
	elapse func(d time.Duration)
}

func (b backend) pacer() redis.UniversalClient {
	if b.user != nil {
		return b.user
	}
	return b.client
}

func redisBackend(t *testing.T) backend {
	s := redistest.New(t)
	return backend{client: s.Client, elapse: time.Sleep}
}

func clusterBackend(t *testing.T) backend {
	c := redistest.NewCluster(t, 3)
	return backend{client: c.Client, elapse: time.Sleep}
}

func miniredisBackend(t *testing.T) backend {
	mr, c := redistest.NewMiniredis(t)
	return backend{client: c, elapse: func(d time.Duration) {
		time.Sleep(d)
		mr.FastForward(d) // miniredis expires keys only when told time passed
	}}
}

// aclBackend is a throwaway redis-server on which the Limiters log in as a
// user with only the permissions pacer needs (docs/security.md).
func aclBackend(t *testing.T) backend {
	s := redistest.NewProcess(t)
	return backend{client: s.Client, user: redistest.ACLUser(t, s, redistest.ACLRules...), elapse: time.Sleep}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// epoch is where fake clocks start: not on a whole microsecond, on purpose.
var epoch = time.Date(2026, 11, 22, 1, 2, 3, 456789123, time.UTC)

// newLimiter is a Limiter on b whose buckets run on clk, failing closed (a
// slow call on a loaded machine fails the test rather than pacing locally).
func newLimiter(t *testing.T, b backend, clk reserve.Clock) *reserve.Limiter {
	t.Helper()
	l, err := reserve.New(b.pacer(), reserve.Options{Clock: clk, ClientTime: clk != nil, KeyPrefix: redistest.Prefix(t),
		FailClosed: true, CallTimeout: 10 * time.Second, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	return l
}

func closeLimiter(t *testing.T, l *reserve.Limiter) {
	t.Cleanup(func() { _ = l.Close() })
}

// snapshot returns the type and value of key's state in Redis.
func snapshot(t *testing.T, b backend, l *reserve.Limiter, key string) map[string]string {
	t.Helper()
	ctx := context.Background()
	rk := l.RedisKey(key)
	typ, err := b.client.Type(ctx, rk).Result()
	require.NoError(t, err)
	out := map[string]string{"type": typ}
	if typ == "string" {
		v, err := b.client.Get(ctx, rk).Result()
		require.NoError(t, err)
		out["value"] = v
	}
	return out
}

// tunedClient is a client set up as pacer needs it, so that New uses it as
// given (its hooks see pacer's calls).
func tunedClient(t *testing.T, s *redistest.Server) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(s.URL)
	require.NoError(t, err)
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	return c
}
