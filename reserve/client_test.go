package reserve_test

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestNewTunesTheQuickStartClient: New talks to Redis through a client that
// never resends a script (MaxRetries -1), reads until each call's deadline
// (ContextTimeoutEnabled) and dials once per attempt, whatever client it is
// given: the quick start's redis.NewClient with go-redis's defaults gets a
// tuned clone, and the user's client is left as it was. A client already
// tuned is used as it is. Other client types are refused.
func TestNewTunesTheQuickStartClient(t *testing.T) {
	s := redistest.New(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tuned := func(t *testing.T, c any) {
		t.Helper()
		var max, dials int
		var ctxTimeout bool
		switch c := c.(type) {
		case *redis.Client:
			o := c.Options()
			max, ctxTimeout, dials = o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries
		case *redis.ClusterClient:
			o := c.Options()
			max, ctxTimeout, dials = o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries
		case *redis.Ring:
			o := c.Options()
			max, ctxTimeout, dials = o.MaxRetries, o.ContextTimeoutEnabled, o.DialerRetries
		default:
			t.Fatalf("client %T", c)
		}
		require.LessOrEqual(t, max, 0, "MaxRetries (go-redis stores -1, no retries, as 0)")
		require.True(t, ctxTimeout, "ContextTimeoutEnabled")
		require.Equal(t, 1, dials, "DialerRetries")
	}
	opts, err := redis.ParseURL(s.URL)
	require.NoError(t, err)

	t.Run("Client", func(t *testing.T) {
		user := redis.NewClient(&redis.Options{Addr: opts.Addr, DB: opts.DB, Username: opts.Username, Password: opts.Password})
		t.Cleanup(func() { user.Close() })
		l, err := reserve.New(user, reserve.Options{Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		tuned(t, l.Client())
		require.NotSame(t, user, l.Client())
		require.Equal(t, 3, user.Options().MaxRetries, "the user's client is left as it was")
		require.False(t, user.Options().ContextTimeoutEnabled)
		_, err = l.Reserve(context.Background(), "k", reserve.Limit{Rate: 1, Burst: 1})
		require.NoError(t, err)
		require.NoError(t, l.Close())
		require.NoError(t, user.Ping(context.Background()).Err(), "Close closes pacer's clone, not the user's client")
	})
	t.Run("AlreadyTuned", func(t *testing.T) {
		user := redis.NewClient(&redis.Options{Addr: opts.Addr, DB: opts.DB, Username: opts.Username, Password: opts.Password,
			MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
		t.Cleanup(func() { user.Close() })
		l, err := reserve.New(user, reserve.Options{Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		require.Same(t, user, l.Client())
	})
	t.Run("Ring", func(t *testing.T) {
		user := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": opts.Addr}, DB: opts.DB, Username: opts.Username, Password: opts.Password})
		t.Cleanup(func() { user.Close() })
		l, err := reserve.New(user, reserve.Options{Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		tuned(t, l.Client())
	})
	t.Run("Cluster", func(t *testing.T) {
		// Options only: no cluster needs to answer for the clone to be made.
		user := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
		t.Cleanup(func() { user.Close() })
		l, err := reserve.New(user, reserve.Options{Logger: quiet, FailClosed: true})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		tuned(t, l.Client())
	})
	t.Run("Refused", func(t *testing.T) {
		_, err := reserve.New(nil, reserve.Options{Logger: quiet})
		require.ErrorIs(t, err, reserve.ErrInvalidOptions)
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		// A type of the user's own, whose settings pacer cannot see or copy.
		_, err = reserve.New(wrappedClient{c}, reserve.Options{Logger: quiet})
		require.ErrorIs(t, err, reserve.ErrInvalidOptions)
	})
}

type wrappedClient struct{ *redis.Client }
