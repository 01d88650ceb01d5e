package reserve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// timeoutError is the error of a Redis call that took longer than
// Options.CallTimeout.
type timeoutError struct{ after time.Duration }

func (e *timeoutError) Error() string {
	return fmt.Sprintf("redis call took longer than %v", e.after)
}

// call runs fn, one call to Redis, bounded by CallTimeout, and reports it to
// Metrics. The error is ctx's if ctx ended first.
func (l *Limiter) call(ctx context.Context, op string, fn func(context.Context) (any, error)) (any, error) {
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, l.opts.CallTimeout)
	defer cancel()
	var (
		res any
		err error
	)
	if l.ctxTimeouts {
		// The client honours context deadlines on the socket.
		res, err = fn(cctx)
	} else {
		// The client would wait for its own read timeout (3 s by default):
		// stop waiting at ours. The call ends by itself later.
		type result struct {
			v   any
			err error
		}
		ch := make(chan result, 1)
		go func() {
			v, err := fn(cctx)
			ch <- result{v, err}
		}()
		select {
		case r := <-ch:
			res, err = r.v, r.err
		case <-cctx.Done():
			err = cctx.Err()
		}
	}
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			err = cerr
		} else if cctx.Err() != nil {
			err = &timeoutError{after: l.opts.CallTimeout}
		}
	}
	l.opts.Metrics.RedisCall(op, time.Since(start), err)
	return res, err
}

// unavailableReplies are the error replies of a Redis that is there but
// cannot serve now (loading, failing over, read-only replica, busy script).
var unavailableReplies = []string{"LOADING", "READONLY", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "NOREPLICAS", "BUSY"}

// unavailable reports whether err means Redis could not serve the call, as
// opposed to refusing it (a wrong type, a script error).
func unavailable(err error) bool {
	var reply redis.Error
	if errors.As(err, &reply) {
		for _, p := range unavailableReplies {
			if strings.HasPrefix(reply.Error(), p) {
				return true
			}
		}
		return false
	}
	// Refused or reset connections, timeouts, a closed pool.
	return true
}

// run runs a script on key's bucket. Errors are wrapped with the operation
// and key; they match ErrUnavailable when Redis could not be reached, and
// calls are not even tried while the Limiter is degraded.
func (l *Limiter) run(ctx context.Context, op string, s *redis.Script, key string, args []any) (any, error) {
	return l.runKeys(ctx, op, s, key, []string{l.RedisKey(key)}, args)
}

// runKeys is run for a script that touches more keys than key's bucket (all
// in its hash tag).
func (l *Limiter) runKeys(ctx context.Context, op string, s *redis.Script, key string, keys []string, args []any) (any, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, err)
	}
	if l.isDegraded() {
		return nil, fmt.Errorf("reserve: %s %q: %w (waiting for a probe to find it)", op, key, ErrUnavailable)
	}
	res, err := l.call(ctx, op, func(ctx context.Context) (any, error) {
		return s.Run(ctx, l.rdb, keys, args...).Result()
	})
	switch {
	case err == nil:
		l.succeeded()
		return res, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
	case strings.Contains(err.Error(), "WRONGTYPE"):
		l.succeeded()
		return nil, fmt.Errorf("reserve: %s %q: %w (Redis key %q): %w", op, key, ErrWrongType, l.RedisKey(key), err)
	case strings.Contains(err.Error(), "pacer: queue too long"):
		l.succeeded()
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ErrQueueTooLong)
	case unavailable(err):
		l.failed(key, err)
		return nil, fmt.Errorf("reserve: %s %q: %w: %w", op, key, ErrUnavailable, err)
	default:
		l.succeeded()
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, err)
	}
}
