package redistest

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rtt returns the fastest of a few PINGs through c.
func rtt(t *testing.T, c *redis.Client) time.Duration {
	t.Helper()
	best := time.Hour
	for range 3 {
		start := time.Now()
		require.NoError(t, c.Ping(ctx(t)).Err())
		best = min(best, time.Since(start))
	}
	return best
}

func TestProxy(t *testing.T) {
	s := NewProcess(t)
	p := NewProxy(t, s.Addr)
	assert.Regexp(t, `^127\.0\.0\.1:\d+$`, p.Addr())
	assert.NotEqual(t, s.Addr, p.Addr())
	assert.Equal(t, s.Addr, p.Upstream)

	// Fail fast: no retries, and timeouts short enough for a test.
	opts := &redis.Options{Addr: p.Addr(), ReadTimeout: 300 * time.Millisecond, MaxRetries: -1}
	c := redis.NewClient(opts)
	defer c.Close()
	require.NoError(t, c.Set(ctx(t), "k", "v", 0).Err())
	base := rtt(t, c)
	t.Logf("round trip through the proxy: %v", base)

	t.Run("latency", func(t *testing.T) {
		const d = 100 * time.Millisecond
		p.AddLatency(t, d)
		got := rtt(t, c) // on the connection opened before
		assert.GreaterOrEqual(t, got, d)
		fresh := redis.NewClient(opts)
		defer fresh.Close()
		assert.GreaterOrEqual(t, rtt(t, fresh), d, "a new connection")
		t.Logf("round trip with %v latency: %v", d, got)

		p.AddLatency(t, 2*d) // replaces
		assert.GreaterOrEqual(t, rtt(t, c), 2*d)

		p.Clear(t)
		assert.Less(t, rtt(t, c), d)
	})

	t.Run("command latency", func(t *testing.T) {
		// The command runs late: Redis's clock, read by the command,
		// is d or more past its sending (one machine, one clock).
		const d = 100 * time.Millisecond
		p.AddCommandLatency(t, d)
		sent := time.Now()
		now, err := c.Time(ctx(t)).Result()
		require.NoError(t, err)
		assert.GreaterOrEqual(t, now.Sub(sent), d-time.Millisecond, "TIME ran %v after it was sent", now.Sub(sent))
		p.Clear(t)
	})

	t.Run("timeout", func(t *testing.T) {
		p.AddTimeout(t)
		start := time.Now()
		err := c.Get(ctx(t), "k").Err()
		assert.True(t, isTimeout(err), "a timeout: %v", err)
		assert.Less(t, time.Since(start), 2*time.Second)
		err = c.Ping(ctx(t)).Err() // a new connection: accepted, never answered
		assert.True(t, isTimeout(err), "a timeout on a new connection: %v", err)
		p.AddTimeout(t) // a second call is harmless

		p.Clear(t)
		got, err := retry(2*time.Second, func() (string, error) { return c.Get(ctx(t), "k").Result() })
		require.NoError(t, err)
		assert.Equal(t, "v", got)
	})

	t.Run("reset", func(t *testing.T) {
		require.NoError(t, c.Ping(ctx(t)).Err()) // a connection open before
		p.ResetPeer(t)
		err := c.Ping(ctx(t)).Err()
		assert.Error(t, err)
		t.Logf("PING on an open connection after ResetPeer: %v", err)
		fresh := redis.NewClient(opts)
		defer fresh.Close()
		err = fresh.Ping(ctx(t)).Err()
		assert.Error(t, err)
		t.Logf("PING on a new connection after ResetPeer: %v", err)

		// A new connection is reset (go-redis may report EOF instead, when
		// it hides HELLO's error behind its RESP2 fallback).
		conn, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		require.NoError(t, err)
		defer conn.Close()
		_, err = conn.Write([]byte("PING\r\n"))
		require.NoError(t, err)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(2*time.Second)))
		_, err = conn.Read(make([]byte, 16))
		assert.ErrorIs(t, err, syscall.ECONNRESET)
		// The command never reached the server.
		assert.Equal(t, "v", s.Client.Get(ctx(t), "k").Val())

		p.Clear(t)
		require.NoError(t, c.Ping(ctx(t)).Err())
	})

	t.Run("disable", func(t *testing.T) {
		require.NoError(t, c.Ping(ctx(t)).Err())
		p.Disable(t)
		assert.Error(t, c.Ping(ctx(t)).Err(), "the open connection is closed")
		_, err := net.DialTimeout("tcp", p.Addr(), time.Second)
		assert.ErrorContains(t, err, "connection refused")
		p.Disable(t) // a no-op

		p.Enable(t)
		p.Enable(t) // a no-op
		require.NoError(t, c.Ping(ctx(t)).Err())

		p.Disable(t)
		p.Clear(t) // enables too
		require.NoError(t, c.Ping(ctx(t)).Err())
	})
}

func TestProxyCleanup(t *testing.T) {
	s := NewProcess(t)
	var addr string
	t.Run("proxy", func(t *testing.T) {
		p := NewProxy(t, s.Addr)
		addr = p.Addr()
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		require.NoError(t, c.Ping(ctx(t)).Err())
		p.AddTimeout(t) // left in place
	})
	_, err := net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the proxy no longer listens")
}
