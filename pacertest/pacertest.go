package pacertest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/reserve"
)

// A Store keeps pacer's keys in memory and runs pacer's scripts on them,
// in-process, as Redis runs them: it stands in for the Redis server the
// Limiters of a fleet share. Its time is time.Now (a synctest bubble's, in
// one). A Store is safe for concurrent use.
type Store struct {
	s *luastore.Store
}

// NewStore returns an empty Store.
func NewStore() *Store { return &Store{s: luastore.New(nil)} }

// ErrClock is returned by NewLimiter (and fails New) when Options.Clock is
// set: a Store's Limiter runs on time.Now, which testing/synctest fakes.
var ErrClock = errors.New("pacertest: Options.Clock must be nil: the Limiter runs on time.Now; run the test in a testing/synctest bubble to make time fake")

// NewLimiter returns a Limiter (a real *reserve.Limiter) that keeps its
// keys in s instead of Redis. Several Limiters on one Store share its keys,
// as processes share a Redis.
//
// The Limiter is reserve's own, with its scripts and its code from the
// call to the slot; what differs is what only a Redis has. It uses client
// time (as Options.ClientTime): time.Now, for the keys and for sleeping,
// on Go's timers (Options.PreciseWake is ignored). It is a fleet of one:
// it sends no heartbeats and takes the whole of every key, and the Store is
// never unavailable, so the options about Redis and the fleet
// (CallTimeout, FailAfter, FailClosed, FleetSize, RequireRedis,
// ProbeInterval, HeartbeatInterval, SilentHold) have no effect. It starts
// no goroutine of its own: Close is good manners, not needed to end a
// synctest bubble. Options are otherwise checked as reserve.New checks
// them; Options.Clock must be nil (ErrClock).
func (s *Store) NewLimiter(opts reserve.Options) (*reserve.Limiter, error) {
	if s == nil || s.s == nil {
		return nil, errors.New("pacertest: NewLimiter on a Store not made by NewStore")
	}
	if opts.Clock != nil {
		return nil, ErrClock
	}
	l, err := hook.OnStore(s.s, opts)
	if err != nil {
		return nil, fmt.Errorf("pacertest: %w", err)
	}
	return l.(*reserve.Limiter), nil
}

// New returns a Limiter on a Store of its own (see Store.NewLimiter), to
// be closed when the test ends; it fails the test if opts are invalid.
// Call it inside the synctest bubble the Limiter is to run in.
func New(t testing.TB, opts reserve.Options) *reserve.Limiter {
	t.Helper()
	l, err := NewStore().NewLimiter(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}
