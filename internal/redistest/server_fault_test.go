package redistest

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStopRestart(t *testing.T) {
	var s *Server
	var first *redisproc.Process
	t.Run("server", func(t *testing.T) {
		s = NewProcess(t)
		first = s.proc.Process()
		require.NoError(t, s.Client.Set(ctx(t), "k", "v", 0).Err())

		s.Stop(t)
		_, err := net.DialTimeout("tcp", s.Addr, time.Second)
		require.Error(t, err, "a stopped server refuses connections")
		noRetry := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
		defer noRetry.Close()
		assert.ErrorContains(t, noRetry.Ping(ctx(t)).Err(), "connection refused")
		s.Stop(t) // a no-op

		start := time.Now()
		s.Restart(t)
		t.Logf("restarted %s in %v", s.Addr, time.Since(start).Round(time.Millisecond))
		assert.NotSame(t, first, s.proc.Process())
		require.NoError(t, s.Client.Ping(ctx(t)).Err(), "the old client reconnects")
		assert.ErrorIs(t, s.Client.Get(ctx(t), "k").Err(), redis.Nil, "the new server is empty")
		require.NoError(t, s.Client.Set(ctx(t), "k", "v2", 0).Err())

		// Restart without Stop, with a client that holds a connection.
		start = time.Now()
		s.Restart(t)
		t.Logf("restarted a running %s in %v", s.Addr, time.Since(start).Round(time.Millisecond))
		require.NoError(t, s.Client.Ping(ctx(t)).Err())
		assert.ErrorIs(t, s.Client.Get(ctx(t), "k").Err(), redis.Nil)
		assert.True(t, redisproc.Reserved(s.proc.Port()), "the port stays reserved")
	})
	if s == nil {
		t.Skip("the sub-test got no server")
	}
	assertStopped(t, s.Addr, first)
	assertStopped(t, s.Addr, s.proc.Process())
}

func TestFreezeThaw(t *testing.T) {
	var s *Server
	t.Run("server", func(t *testing.T) {
		s = NewProcess(t)
		c := s.NewClient(t)
		require.NoError(t, c.Ping(ctx(t)).Err())

		s.Freeze(t)
		state, ok := s.proc.Process().State()
		if ok {
			assert.Equal(t, byte('T'), state, "process state")
		}

		// go-redis applies a context's deadline to socket reads only with
		// ContextTimeoutEnabled; without it, it waits for ReadTimeout.
		withCtx := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer withCtx.Close()
		short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := withCtx.Ping(short).Err()
		took := time.Since(start)
		assert.True(t, isTimeout(err), "a timeout: %v", err)
		assert.Less(t, took, 2*time.Second)
		t.Logf("PING with a 300ms context on a frozen server: %v after %v", err, took.Round(time.Millisecond))

		timeouts := redis.NewClient(&redis.Options{Addr: s.Addr, ReadTimeout: 300 * time.Millisecond, MaxRetries: -1})
		defer timeouts.Close()
		start = time.Now()
		err = timeouts.Ping(ctx(t)).Err()
		took = time.Since(start)
		assert.True(t, isTimeout(err), "a timeout: %v", err)
		assert.Less(t, took, 2*time.Second)
		t.Logf("PING with a 300ms ReadTimeout on a frozen server: %v after %v", err, took.Round(time.Millisecond))

		s.Thaw(t)
		require.NoError(t, c.Ping(ctx(t)).Err())
		require.NoError(t, timeouts.Ping(ctx(t)).Err())
		s.Thaw(t) // a no-op

		s.Freeze(t) // left frozen: the cleanup must still end it
	})
	if s == nil {
		t.Skip("the sub-test got no server")
	}
	assertStopped(t, s.Addr, s.proc.Process())
}

func TestFaultsNeedAProcess(t *testing.T) {
	s := &Server{Addr: "127.0.0.1:1", Source: SourceURL}
	t.Setenv("CI", "")
	for name, fault := range map[string]func(testing.TB){
		"Stop": s.Stop, "Restart": s.Restart, "Freeze": s.Freeze, "Thaw": s.Thaw,
	} {
		t.Run(name, func(t *testing.T) {
			ran := false
			t.Run("inner", func(t *testing.T) {
				defer func() { ran = true }()
				fault(t)
				t.Error("unreachable: a fault on a REDIS_URL server did not skip")
			})
			assert.True(t, ran)
		})
	}
}

// isTimeout reports whether err is a network timeout or a context deadline.
func isTimeout(err error) bool {
	var netErr net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout())
}
