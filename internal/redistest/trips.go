package redistest

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTrips is a go-redis hook that counts the round trips a client makes:
// each command, and each pipeline, adds one to N.
//
//	var trips atomic.Int64
//	client.AddHook(redistest.RoundTrips{N: &trips})
type RoundTrips struct{ N *atomic.Int64 }

// DialHook implements redis.Hook.
func (h RoundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h RoundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h RoundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.N.Add(1)
		return next(ctx, cmds)
	}
}
