package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/redis/go-redis/v9"
)

// Miniredis is a miniredis server (github.com/alicebob/miniredis/v2) that
// internal/testkit's cmd/miniredis runs in a child process (see package
// internal/launcher), so that this module's go.mod does not list miniredis.
type Miniredis struct {
	Addr string // host:port on 127.0.0.1

	t     testing.TB
	child *launcher.Child
}

// NewMiniredis starts a miniredis server on 127.0.0.1 and a client to it,
// both closed on t.Cleanup.
//
// miniredis is not Redis: its Lua, its error texts and many edge cases differ.
// Use it only where a test must move time with FastForward, or runs on what
// the examples embed, and New everywhere else.
func NewMiniredis(t testing.TB) (*Miniredis, *redis.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), launchTimeout)
	defer cancel()
	child, err := launcher.Start(ctx, "miniredis")
	if err != nil {
		t.Fatalf("redistest: start miniredis: %v", err)
	}
	t.Cleanup(func() {
		if err := child.Close(); err != nil {
			t.Errorf("redistest: miniredis: %v", err)
		}
	})
	m := &Miniredis{Addr: child.First, t: t, child: child}
	report(t, SourceMiniredis, "server", m.Addr)
	return m, newClient(t, &redis.Options{Addr: m.Addr}, "miniredis")
}

// FastForward tells miniredis that d has passed, for key expiry (miniredis
// expires keys only when told). It may be called from any goroutine of the
// test; an error fails the test with t.Errorf.
func (m *Miniredis) FastForward(d time.Duration) {
	if err := m.child.Do("fastforward " + d.String()); err != nil {
		m.t.Errorf("redistest: miniredis: %v", err)
	}
}
