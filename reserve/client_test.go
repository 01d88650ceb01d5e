package reserve_test

import (
	"context"
	"io"
	"log/slog"
	"sync/atomic"
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
// tuned is used as it is, so its hooks see pacer's calls; a replaced one's
// do not. Other client types are refused.
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
	t.Run("Hooks", func(t *testing.T) {
		// No retries and deadlines honoured, but go-redis's DialerRetries
		// (5 when 0): New replaces the client all the same, and the hooks
		// added to the user's client do not see pacer's calls; with
		// DialerRetries 1 too, New uses it, and they do.
		for _, dials := range []int{0, 1} {
			user := redis.NewClient(&redis.Options{Addr: opts.Addr, DB: opts.DB, Username: opts.Username, Password: opts.Password,
				MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: dials})
			t.Cleanup(func() { user.Close() })
			h := &countHook{}
			user.AddHook(h)
			l, err := reserve.New(user, reserve.Options{Logger: quiet})
			require.NoError(t, err)
			t.Cleanup(func() { l.Close() })
			before := h.n.Load()
			_, err = l.Reserve(context.Background(), "k", reserve.Limit{Rate: 1, Burst: 1})
			require.NoError(t, err)
			if dials == 1 {
				require.Same(t, user, l.Client(), "DialerRetries 1: the user's client")
				require.Greater(t, h.n.Load(), before, "DialerRetries 1: the user's hook sees the reservation")
			} else {
				require.NotSame(t, user, l.Client(), "DialerRetries %d: replaced", dials)
				require.Equal(t, before, h.n.Load(), "DialerRetries %d: the user's hook sees nothing of pacer's", dials)
			}
		}
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

// countHook counts the commands a client processes.
type countHook struct {
	passHook
	n atomic.Int64
}

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
