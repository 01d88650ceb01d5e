package redistest

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// ScriptOp reports whether cmd is a script call (EVALSHA, or the EVAL
// go-redis sends after NOSCRIPT) whose first argument, ARGV[1], is op:
// pacer's scripts name their operation there (seats.lua's "renew").
func ScriptOp(cmd redis.Cmder, op string) bool {
	args := cmd.Args()
	if name := strings.ToLower(cmd.Name()); (name == "evalsha" || name == "eval") && len(args) > 3 {
		nk, ok := args[2].(int)
		return ok && len(args) > 3+nk && args[3+nk] == op
	}
	return false
}

// Refuser is a go-redis hook that, while On, answers the script calls
// whose ARGV[1] is Op with an error reply, as Redis's own (a redis.Error):
// the client reached Redis, and Redis refused that one call. Alone or in
// a pipeline; the other commands pass. Refused counts them.
type Refuser struct {
	Op      string
	On      atomic.Bool
	Refused atomic.Int64
}

// refusedError is an error reply, as Redis's own.
type refusedError string

func (e refusedError) Error() string { return string(e) }
func (refusedError) RedisError()     {}

func (h *Refuser) refuse(cmd redis.Cmder) bool {
	if !h.On.Load() || !ScriptOp(cmd, h.Op) {
		return false
	}
	h.Refused.Add(1)
	cmd.SetErr(refusedError("ERR " + h.Op + " refused by the test"))
	return true
}

func (h *Refuser) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *Refuser) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.refuse(cmd) {
			return cmd.Err()
		}
		return next(ctx, cmd)
	}
}

func (h *Refuser) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		pass := cmds[:0:0]
		for _, cmd := range cmds {
			if !h.refuse(cmd) {
				pass = append(pass, cmd)
			}
		}
		if len(pass) == 0 {
			return nil
		}
		return next(ctx, pass)
	}
}
