package hook

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Run runs fn as one call on a Limiter's path to Redis (package reserve's
// Limiter.run: refused after Close and while the Limiter paces locally;
// bounded by Options.CallTimeout; recorded for health and Metrics; errors
// mapped to reserve's sentinels, ErrUnavailable wrapping the cause). l is a
// *reserve.Limiter; fn gets where the Limiter runs its scripts: its own
// client, or the in-process store of a Limiter made by package pacertest.
// op and key name the call in errors and metrics.
var Run func(l any, ctx context.Context, op, key string, fn func(ctx context.Context, sc redis.Scripter) (any, error)) (any, error)

// FailClosed reports whether the Limiter l (a *reserve.Limiter) was made
// with Options.FailClosed: whether a call that cannot reach Redis fails
// rather than goes on locally.
var FailClosed func(l any) bool
