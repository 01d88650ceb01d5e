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

// Commands is a go-redis hook that counts the commands a client sends for
// which Match reports true, alone or in a pipeline (each command of a
// pipeline counts).
type Commands struct {
	N     *atomic.Int64
	Match func(args []any) bool
}

// DialHook implements redis.Hook.
func (h Commands) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (h Commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (h Commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}

func (h Commands) count(cmd redis.Cmder) {
	if h.Match(cmd.Args()) {
		h.N.Add(1)
	}
}
