package reserve

import (
	"context"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/redis/go-redis/v9"
)

// The hooks through which the packages built on reserve (adaptive, hold)
// reach a Limiter's path to Redis; see package internal/hook.
func init() {
	hook.Run = func(l any, ctx context.Context, op, key string, fn func(context.Context, redis.UniversalClient) (any, error)) (any, error) {
		lim := l.(*Limiter)
		return lim.run(ctx, op, key, func(ctx context.Context) (any, error) { return fn(ctx, lim.rdb) }, nil)
	}
	hook.FailClosed = func(l any) bool { return l.(*Limiter).opts.FailClosed }
}
