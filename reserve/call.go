package reserve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
)

// timeoutError is the error of a Redis call that took longer than its
// timeout (Options.CallTimeout, or longer learned: Limiter.callTimeout). It
// wraps what the client reported.
type timeoutError struct {
	after time.Duration
	err   error
}

func (e *timeoutError) Error() string {
	return fmt.Sprintf("redis call took longer than %v: %v", e.after, e.err)
}

func (e *timeoutError) Unwrap() error { return e.err }

// run is the one path to Redis: every script and every read a Limiter makes
// goes through it, with the same guarantees. It refuses calls after Close,
// with a context that has ended, and while the Limiter is degraded (unless
// probing); bounds the call by Options.CallTimeout; records the outcome for
// health tracking and Metrics; and maps errors: the scripts' codes to
// sentinels, a Redis that could not be reached to ErrUnavailable (wrapping
// the cause), the caller's context to its error. Errors name op and key.
//
// A caller whose deadline comes before CallTimeout does not cut the call
// short: it runs on, bounded by CallTimeout alone, so that a hung Redis is
// still seen as a failure, and the caller returns at its deadline. A result
// that arrives after the caller left goes to orphan (if set), which gives
// back whatever it granted.
//
// A call that changes state is not cut at its timeout: it may have run,
// and sent again it would be charged twice (a window band's unit is then
// lost for the whole window: TestTimedOutCallChargedOnce). It waits on for
// its reply while the ping a timeout starts decides (confirm), and ends
// when that ping finds Redis gone; see call.
func (l *Limiter) run(ctx context.Context, op, key string, fn func(context.Context) (any, error), orphan func(any)) (any, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, err)
	}
	probe := op == names.OpHeartbeat || op == names.OpProbe || ctx.Value(recoveryKey{}) != nil
	if !probe && l.isDegraded() {
		return nil, fmt.Errorf("reserve: %s %q: %w (pacing locally until a probe finds it again)", op, key, l.unavailableErr())
	}
	var (
		res  any
		err  error
		left bool
	)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < l.callTimeout() {
		res, err, left = l.callDetached(ctx, op, key, fn, orphan)
	} else {
		res, err = l.call(ctx, op, key, fn)
		left = err != nil && ctx.Err() != nil
	}
	if left {
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
	}
	if err == nil {
		l.succeeded()
		return res, nil
	}
	return nil, l.mapError(op, key, err)
}

// mapError maps an error from Redis and records it for health tracking.
func (l *Limiter) mapError(op, key string, err error) error {
	if code, ok := layout.ErrorCode(err); ok {
		if unavailableCodes[code] {
			l.failed(key, err)
			return fmt.Errorf("reserve: %s %q: %w: %w", op, key, ErrUnavailable, err)
		}
		// Redis answered: it is up, whatever the answer.
		l.succeeded()
		if code == "PACER_CALENDAR" {
			l.learnCalendar(key, err)
		}
		if sentinel := scriptCodes[code]; sentinel != nil {
			return fmt.Errorf("reserve: %s %q: %w: %w", op, key, sentinel, err)
		}
		return fmt.Errorf("reserve: %s %q: %w", op, key, err)
	}
	if l.onStore != nil {
		// The store is in-process: it cannot be unavailable.
		return fmt.Errorf("reserve: %s %q (store): %w", op, key, err)
	}
	l.failed(key, err)
	return fmt.Errorf("reserve: %s %q: %w: %w", op, key, ErrUnavailable, err)
}

// call runs fn, one call to Redis, bounded by the call timeout (CallTimeout,
// or longer on a slow machine: callTimeout), and reports it to Metrics.
//
// A call that changes state (patient) runs on past its timeout: the
// timeout starts the ping that tells slow from gone (confirm), as a
// timed-out call's error would, and the call ends when that ping fails
// (the Limiter has switched to local pacing) or after probeBudget. Its
// reply, when Redis was only slow, is the outcome: sent again instead, a
// call that ran would take its units twice.
func (l *Limiter) call(ctx context.Context, op, key string, fn func(context.Context) (any, error)) (any, error) {
	start := time.Now()
	timeout := l.callTimeout()
	var (
		res any
		err error
	)
	switch {
	case l.onStore != nil:
		// The store is in-process: a call to it is never lost and never
		// an outage, however slow the machine (no timeout, no ping: there
		// is no Redis to ping; TestOnStoreSlowCallIsNotAnOutage).
		res, err = fn(ctx)
	case cutOps[op]:
		cctx, cancel := context.WithTimeout(ctx, timeout)
		res, err = fn(cctx)
		if err != nil && ctx.Err() == nil && cctx.Err() != nil {
			err = &timeoutError{after: timeout, err: err}
		}
		cancel()
	default:
		// The script's own deadline (withDeadline) stays the timeout's: a
		// call Redis runs after a stall changes nothing (PACER_STALE), its
		// caller's view of the fleet may be stale by then.
		c := l.startCall(ctx, key, start, timeout, l.probeBudget())
		res, err = fn(c)
		if err != nil && ctx.Err() == nil && (c.Err() != nil || !time.Now().Before(c.bound)) {
			err = &timeoutError{after: timeout, err: err}
		}
		l.endCall(c)
	}
	took := time.Since(start)
	if err == nil {
		l.roundTrip(took)
	}
	l.opts.Metrics.RedisCall(op, took, err)
	return res, err
}

// callEndKey is the context key of a patient call's timeout (a
// time.Time), which the scripts' deadline counts from (withDeadline).
type callEndKey struct{}

// callEnd returns when the call made under ctx times out: its timeout's end
// for a patient call, else its context's deadline.
func callEnd(ctx context.Context) (time.Time, bool) {
	if c, ok := ctx.(*callCtx); ok {
		return c.end, true // (the common case, without Value's interface)
	}
	if end, ok := ctx.Value(callEndKey{}).(time.Time); ok {
		return end, true
	}
	return ctx.Deadline()
}

// cutOps are the calls cut at their timeout, whose error starts the ping
// that decides (failed): those that change nothing on Redis; heartbeats
// and probes, which decide Redis's health themselves; and an in-flight
// band's seats, which are sent again at no cost: seats.lua knows each
// call by its ticket (an acquire of a ticket that holds its seats is
// granted them again, a release or cancel of one that holds none changes
// nothing, a renew lists them all).
var cutOps = map[string]bool{
	names.OpHeartbeat: true, names.OpProbe: true, names.OpConfirm: true, names.OpConfig: true,
	names.OpPeek: true, names.OpCheck: true, names.OpSeats: true,
}

// callDetached runs fn on a goroutine of its own, bounded by CallTimeout
// only, and waits for it or for ctx (left reports that ctx ended first).
// After the caller left, the call's outcome is still recorded (health,
// Metrics) and its result handed to orphan.
func (l *Limiter) callDetached(ctx context.Context, op, key string, fn func(context.Context) (any, error), orphan func(any)) (res any, err error, left bool) {
	type result struct {
		v   any
		err error
	}
	ch := make(chan result, 1)
	gone := make(chan struct{})
	go func() {
		v, err := l.call(context.WithoutCancel(ctx), op, key, fn)
		ch <- result{v, err}
		<-gone // closed by the caller once it has taken the result or left
		select {
		case <-ch:
			// Still here: the caller left without it.
			if err != nil {
				_ = l.mapError(op, key, err)
				return
			}
			l.succeeded()
			if orphan != nil {
				orphan(v)
			}
		default:
		}
	}()
	defer close(gone)
	select {
	case r := <-ch:
		return r.v, r.err, false
	case <-ctx.Done():
		return nil, nil, true
	}
}

// isStale reports whether err is a script's refusal of a call Redis ran
// after its deadline (withDeadline): Redis stalled, and the call changed
// nothing; or a grant given back for that reason (errStaleView).
func isStale(err error) bool {
	code, ok := layout.ErrorCode(err)
	return ok && code == "PACER_STALE" || errors.Is(err, errStaleView)
}

// errStaleView is a grant given back because the reply came after a stall
// that moved the share it was made on (grantBatch).
var errStaleView = errors.New("granted on a share a stall has moved since; given back")

// unavailableCodes are the error replies of a Redis that is there but
// cannot serve now (loading, failing over, read-only replica, busy script,
// or at its maxmemory with noeviction: OOM refuses the script's write, so
// nothing was granted), or that ran a heartbeat after its deadline
// (PACER_STALE: it stalled; the heartbeat changed nothing). MOVED and ASK
// reach pacer only after the Cluster client has spent its redirects
// (ClusterOptions.MaxRedirects): the masters disagree on who owns the
// key's slot while a failover or a resharding settles, and none serves it
// (TestClusterMovedIsNotAnError).
var unavailableCodes = map[string]bool{
	"LOADING": true, "READONLY": true, "CLUSTERDOWN": true, "MASTERDOWN": true,
	"TRYAGAIN": true, "NOREPLICAS": true, "BUSY": true, "OOM": true, "PACER_STALE": true,
	"MOVED": true, "ASK": true,
}
