package redistest

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// NewMiniredis starts an in-process miniredis server on 127.0.0.1 and a
// client to it, both closed on t.Cleanup.
//
// miniredis is not Redis: its Lua, its error texts and many edge cases differ.
// Use it only where a test must move time with FastForward, and New
// everywhere else.
func NewMiniredis(t testing.TB) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("redistest: start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	return m, newClient(t, &redis.Options{Addr: m.Addr()}, "miniredis")
}
