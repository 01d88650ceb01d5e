package reserve

import (
	"context"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/redis/go-redis/v9"
)

// The hooks through which the packages built on reserve (adaptive, hold)
// reach a Limiter's path to Redis; see package internal/hook.
func init() {
	hook.CheckKey = checkKey
	hook.CalendarArg = func(policy any, now time.Time) (string, error) {
		s, err := policy.(Policy).compile()
		if err != nil {
			return "", err
		}
		return calendarArg(now, s, nil), nil
	}
	hook.Run = func(l any, ctx context.Context, op, key string, fn func(context.Context, redis.Scripter) (any, error)) (any, error) {
		if err := checkKey(key); err != nil {
			return nil, fmt.Errorf("reserve: %s %q: %w", op, key, err)
		}
		lim := l.(*Limiter)
		return lim.run(ctx, op, key, func(ctx context.Context) (any, error) { return fn(ctx, lim.scripts) }, nil)
	}
	hook.FailClosed = func(l any) bool { return l.(*Limiter).opts.FailClosed }
	hook.LateForSlot = func(r any) bool { return r.(*Reservation).lateForSlot() }
	hook.SeatsAsleep = func(r any) {
		res := r.(*Reservation)
		if t := res.seat; t != nil {
			ks := res.lim.states.get(t.key)
			ks.mu.Lock()
			t.asleep = true
			ks.mu.Unlock()
		}
	}
	hook.Claim = func(l any, ctx context.Context, id string, req any, maxWait, staleAfter, early time.Duration, mayKeep bool) (any, bool, int, error) {
		g, err := l.(*Limiter).claimHeld(ctx, id, req.(Request), maxWait, staleAfter, early, mayKeep)
		if err != nil {
			return nil, false, 0, err
		}
		return g.r, g.kept, g.source, nil
	}
	hook.Hold = func(l any, ctx context.Context, ids []string, reqs any, staleAfter, notBefore time.Duration) ([]any, []int, error) {
		gs, err := l.(*Limiter).holdHeld(ctx, ids, reqs.([]Request), staleAfter, notBefore)
		if err != nil {
			return nil, nil, err
		}
		rs, sources := make([]any, len(gs)), make([]int, len(gs))
		for i, g := range gs {
			rs[i], sources[i] = g.r, g.source
		}
		return rs, sources, nil
	}
}
