package hook

import "github.com/pacer-go/pacer/internal/luastore"

// OnStore returns a *reserve.Limiter that keeps its keys in store, an
// in-process keyspace that runs the scripts, instead of Redis: package
// pacertest's Limiter. opts is a reserve.Options. The Limiter is a fleet of
// one (no heartbeats), takes its keys' time from its Clock (client time,
// Go's timers only, no precise timer) and starts no background goroutine.
var OnStore func(store *luastore.Store, opts any) (any, error)
