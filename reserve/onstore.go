package reserve

import (
	"context"
	"fmt"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/luastore"
)

// A Limiter on a store (package pacertest, through hook.OnStore) keeps its
// keys in an in-process keyspace (internal/luastore) instead of Redis: the
// scripts are the same, run by the same calls (l.scripts is the store), so
// its schedule is the one a Limiter on Redis with client time would have.
// What only a Redis has is left out: it is a fleet of one (no heartbeats,
// no presence, no events: the whole of every key), the store is never
// unavailable (no probes, no local fallback), and it starts no goroutine
// of its own, so that a test's synctest bubble can end without Close. It
// runs on client time (Options.ClientTime: the Clock, default time.Now,
// which a synctest bubble fakes) and sleeps on Go's timers only (no
// timerfd, which a bubble cannot fake).
func init() {
	hook.OnStore = func(store *luastore.Store, opts any) (any, error) {
		o, ok := opts.(Options)
		if !ok {
			return nil, fmt.Errorf("%w: options of type %T", ErrInvalidOptions, opts)
		}
		return newOnStore(store, o)
	}
}

// newOnStore returns a Limiter keeping its keys in store (see above).
func newOnStore(store *luastore.Store, opts Options) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: nil store", ErrInvalidOptions)
	}
	opts.ClientTime = true
	opts.PreciseWake = -1
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := newLimiter(opts, store)
	l.onStore = store
	l.loopCtx, l.loopCancel = context.WithCancel(context.Background())
	// No loop, no listener: Close finds them ended.
	close(l.done)
	close(l.listening)
	return l, nil
}
