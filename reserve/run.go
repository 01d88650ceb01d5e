package reserve

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
)

// Stage 2 of a call's way (see wait.go): running a batch. One reserve.lua
// call grants every request of the batch, on the fleet's share of the key
// (fleet.go) and after what the local fallback granted that Redis has not
// seen; while Redis is unavailable the same script grants them on the
// Limiter's own store, at its own share (local.go).

// reserveBatch runs reserve.lua for reqs, all on key, and returns a result
// for each. When Redis is unavailable and the Limiter may pace locally,
// the batch is served by the local fallback instead.
func (l *Limiter) reserveBatch(ctx context.Context, key string, s *spec, reqs []*request) []result {
	return l.grantEither(ctx, key, s, reqs, nil)
}

// grantEither runs the batch on Redis, or on the local fallback while
// Redis is unavailable, and after a call that could not reach it. A call
// that only timed out goes to Redis again once a ping shows Redis slow,
// not gone (health.go), a few times at most.
func (l *Limiter) grantEither(ctx context.Context, key string, s *spec, reqs []*request, fairArgs []any) []result {
	if l.isDegraded() && !l.opts.FailClosed {
		if out, ok := l.grantLocal(ctx, key, s, reqs, fairArgs); ok {
			return out
		}
	}
	backoff := blipRetry
	for try := 0; ; try++ {
		out := l.grantBatch(ctx, key, s, reqs, fairArgs, false)
		if len(out) == 0 || out[0].err == nil || !errors.Is(out[0].err, ErrUnavailable) || l.opts.FailClosed {
			return out
		}
		var noShare *noShareError
		switch {
		case errors.As(out[0].err, &noShare):
			return out
		case isTimeout(out[0].err):
			if try == maxSlowTries || !l.slowNotGone(ctx) {
				if out, ok := l.grantLocal(ctx, key, s, reqs, fairArgs); ok {
					return out
				}
				continue
			}
		case !l.isDegraded() && l.opts.FailAfter > 1:
			// Redis refused (restarted, a connection reset): wait for it
			// a blip (blipBudget) before pacing locally.
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				for i := range out {
					out[i] = result{nil, fmt.Errorf("reserve: %s %q: %w", reqs[0].op, key, ctx.Err())}
				}
				return out
			}
			backoff = min(2*backoff, maxBlipRetry)
		default:
			if out, ok := l.grantLocal(ctx, key, s, reqs, fairArgs); ok {
				return out
			}
			continue
		}
		if l.isDegraded() {
			if out, ok := l.grantLocal(ctx, key, s, reqs, fairArgs); ok {
				return out
			}
		}
	}
}

// grantLocal runs the batch on the local fallback, unless the Limiter is
// handing back what it granted locally (recovered): then it waits until
// the Limiter is back on Redis (or ctx ends: the results say so), and ok
// is false: the batch goes to Redis. A slot granted locally during the
// handback would never reach Redis, which would grant its instant again
// to another member (TestNoLocalGrantDuringHandback).
func (l *Limiter) grantLocal(ctx context.Context, key string, s *spec, reqs []*request, fairArgs []any) (out []result, ok bool) {
	l.local.RLock()
	if !l.isRecovering() {
		defer l.local.RUnlock()
		return l.grantBatch(ctx, key, s, reqs, fairArgs, true), true
	}
	l.local.RUnlock()
	for l.isRecovering() {
		if err := l.awaitShare(ctx, -1); err != nil {
			out = make([]result, len(reqs))
			for i := range out {
				out[i] = result{nil, fmt.Errorf("reserve: %s %q: %w", reqs[0].op, key, err)}
			}
			return out, true
		}
	}
	return nil, false
}

// A batch that Redis refused is tried again after blipRetry, doubling up
// to maxBlipRetry, until Redis answers or the Limiter paces locally.
const (
	blipRetry    = 5 * time.Millisecond
	maxBlipRetry = 50 * time.Millisecond
)

// maxSlowTries bounds how many times a batch goes to Redis again after its
// call timed out, Redis being slow, not gone: then it is paced locally.
const maxSlowTries = 4

// grantBatch runs reserve.lua for reqs, all on key, or with fairArgs the
// fair script (fair.go), on Redis or (local) on the local fallback's
// store, and returns a result for each.
func (l *Limiter) grantBatch(ctx context.Context, key string, s *spec, reqs []*request, fairArgs []any, local bool) []result {
	out := make([]result, len(reqs))
	fail := func(err error) []result {
		for i := range out {
			out[i] = result{nil, err}
		}
		return out
	}
	now := l.clock.Now()
	var shareArg string
	var err error
	if local {
		shareArg, err = l.localShareArg(key)
	} else {
		var ok bool
		shareArg, ok = l.shareArg()
		if !ok {
			err = l.noShareErr(key)
		}
	}
	if err != nil {
		return fail(err)
	}
	args := l.argsWith(key, now, s, 3+len(fairArgs)+len(reqs)*(1+len(s.units)), shareArg, local)
	l.reportUse(key, s)
	args = append(args, fairArgs...)
	floorAt := len(args)
	args = append(args, "", strconv.Itoa(len(reqs)))
	for _, req := range reqs {
		maxWait := int64(-1)
		if req.maxWait >= 0 {
			mw := req.maxWait
			if !req.since.IsZero() {
				// Time spent queued counts against the maximum.
				mw = max(mw-l.clock.Now().Sub(req.since), 0)
			}
			maxWait = mw.Microseconds()
		}
		args = append(args, strconv.FormatInt(maxWait, 10))
		for _, a := range req.amounts {
			args = append(args, formatFloat(a))
		}
	}
	keys, script := l.keys(key, ":shadow"), reserveScript
	if fairArgs != nil {
		keys, script = l.keys(key, fairKeys...), l.fairScriptOf()
	}
	ks := l.states.get(key)
	if local {
		ks.mu.Lock()
		res, err := l.runLocal(ctx, reqs[0].op, ks, s, script, keys, args, shareArg)
		ks.mu.Unlock()
		if err == nil {
			base, berr := l.localBase(now, replyHead(res))
			if berr != nil {
				err = replyError(reqs[0].op, key, res)
			} else {
				err = l.parseReserve(base, time.Time{}, ks, s, reqs, res, out, true)
			}
		}
		if err != nil {
			return fail(err)
		}
		return out
	}

	// What the local fallback granted that Redis has not seen goes first,
	// exactly once: taken now, given back if the call fails.
	ks.mu.Lock()
	hb, hasFloor := l.takeHandback(ks)
	horizon, seq := ks.horizon(), ks.seenSeq
	ks.mu.Unlock()
	nowNS, _ := l.serverNow()
	switch {
	case hasFloor:
		args[floorAt] = hb.floorArg(nowNS, 0, 0)
	case horizon > nowNS:
		// Slots granted on the key still ahead: should Redis have lost it
		// (restarted empty), it grants nothing before them.
		args[floorAt] = lostFloor(horizon, nowNS, seq)
	}
	// With server time, the bounds on when the script ran are taken as
	// close to the call as can be (see MaxEarly); with a client clock, the
	// script counts from now.
	sent, recv := now, now
	var sentReal time.Time // for the pause reads a reply stands for (keyState.noteSeen)
	res, err := l.run(ctx, reqs[0].op, key, func(ctx context.Context) (any, error) {
		if l.serverTime {
			sent = l.clock.Now()
		}
		sentReal = time.Now()
		res, err := script.Run(ctx, l.scripts, keys, l.withDeadline(ctx, args)...).Result()
		if code, _ := layout.ErrorCode(err); code == "PACER_CALENDAR" && l.learnCalendar(key, err) {
			// A stored limit's calendar window this call had no table
			// for: the script changed nothing; again, with its table.
			args[2] = l.argsWith(key, now, s, 0, shareArg, false)[2]
			if l.serverTime {
				sent = l.clock.Now()
			}
			sentReal = time.Now()
			res, err = script.Run(ctx, l.scripts, keys, l.withDeadline(ctx, args)...).Result()
		}
		recv = l.clock.Now()
		return res, err
	}, func(res any) {
		// The caller left before the reply: give back what was granted.
		orphans := make([]result, len(reqs))
		if base, err := l.replyBaseAt(sent, recv, replyHead(res)); err == nil && l.parseReserve(base, sentReal, ks, s, reqs, res, orphans, false) == nil {
			for _, o := range orphans {
				if o.r != nil {
					o.r.cancelDetached()
				}
			}
		}
	})
	if hasFloor {
		// A call that failed may have run: the floor is then handed over
		// again, and its windows' units counted twice, which costs
		// capacity, never adds any.
		ks.mu.Lock()
		l.handbackDone(ks, hb, err == nil)
		ks.mu.Unlock()
	}
	if err == nil {
		var base replyTime
		base, err = l.replyBaseAt(sent, recv, replyHead(res))
		if err != nil {
			err = replyError(reqs[0].op, key, res)
		} else {
			err = l.parseReserve(base, sentReal, ks, s, reqs, res, out, false)
		}
	}
	if err != nil {
		return fail(err)
	}
	return out
}

// lostFloor is reserve.lua's floor (and lease.lua's last argument) of a
// key's horizon alone: applied only if Redis lost the key (it has no state,
// or one numbered before seq, the last reservation this Limiter saw).
func lostFloor(horizon, nowNS, seq int64) string {
	return "!" + strconv.FormatInt((horizon-nowNS+999)/1000, 10) + ":" + strconv.FormatInt(seq, 10)
}

// withDeadline returns a copy of args (a granting script's, built by
// argsWith) whose share argument carries the deadline of a call made under
// ctx (core.lua's "d<ms> " prefix): a call that Redis runs long after its
// caller gave up on it (Redis stalled: frozen, a long fork) grants nothing.
// Its caller has gone on by then, on a view of the fleet that may be stale:
// members may pace locally since, and the slots it would grant would not
// leave them their shares. The deadline is the call's timeout twice over,
// plus the clock estimate's error, so that a call Redis runs in time is
// never refused. Without server time or an estimate, args as they are.
func (l *Limiter) withDeadline(ctx context.Context, args []any) []any {
	d, ok := ctx.Deadline()
	if !ok || !l.serverTime || len(args) < 3 {
		return args
	}
	now := l.clock.Now()
	ns, rtt, ok := l.sync.bestServer(now)
	if !ok {
		return args
	}
	left := time.Until(d)
	ms := (ns + int64(2*left+rtt) + int64(time.Millisecond) - 1) / int64(time.Millisecond)
	out := slices.Clone(args)
	out[2] = "d" + strconv.FormatInt(ms, 10) + " " + args[2].(string)
	return out
}

// replyHead returns a reply as a list, nil if it is not one.
func replyHead(res any) []any {
	reply, _ := res.([]any)
	return reply
}

// floorOnly hands a floor to Redis for key, reserving nothing.
func (l *Limiter) floorOnly(ctx context.Context, key string, s *spec, floor string) error {
	args := l.args(key, l.clock.Now(), s, 2)
	args = append(args, floor, "0")
	keys := l.keys(key, ":shadow")
	var sent time.Time
	res, err := l.run(ctx, names.OpReserve, key, func(ctx context.Context) (any, error) {
		sent = time.Now()
		return reserveScript.Run(ctx, l.scripts, keys, args...).Result()
	}, nil)
	if err != nil {
		return err
	}
	if reply, ok := res.([]any); ok && len(reply) == 5 {
		state, _ := reply[2].(string)
		stored, _ := reply[3].(string)
		ks := l.states.get(key)
		ks.mu.Lock()
		ks.noteSeen(state, stored, sent)
		ks.mu.Unlock()
	}
	return nil
}

// args returns the scripts' ARGV up to the operation's own arguments (see
// core.lua), with room for extra more, for a script on Redis that grants
// no slot.
func (l *Limiter) args(key string, now time.Time, s *spec, extra int) []any {
	share, _ := l.shareArg()
	return l.argsWith(key, now, s, extra, share, false)
}

// grantArgs is args for a script that grants slots on key on Redis; it
// fails with noShareErr when this Limiter may take nothing on Redis now
// (shut).
func (l *Limiter) grantArgs(key string, now time.Time, s *spec, extra int) ([]any, error) {
	share, ok := l.shareArg()
	if !ok {
		return nil, l.noShareErr(key)
	}
	return l.argsWith(key, now, s, extra, share, false), nil
}

// argsWith returns the scripts' ARGV up to the operation's own, at share,
// for Redis or (local) for the local fallback's store, which always
// writes format 2 (its states are its own).
func (l *Limiter) argsWith(key string, now time.Time, s *spec, extra int, share string, local bool) []any {
	args := make([]any, 0, 4+len(s.args)+extra)
	if l.serverTime {
		args = append(args, "", "0")
	} else {
		args = append(args, strconv.FormatInt(now.UnixMicro(), 10), strconv.Itoa(now.Nanosecond()%1000))
	}
	share = calendarArg(now, s, l.learnedCalendars(key)) + share
	if !local && !l.format2.Load() {
		// Format 1 (core.lua's ARGV[3]).
		share = "f1 " + share
	}
	args = append(args, share, s.unitsArg)
	return append(args, s.args...)
}
