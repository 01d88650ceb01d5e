package reserve

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/engine"
)

// Stage 2 of a call's way (see wait.go): running a batch. One reserve.lua
// call grants every request of the batch, on the fleet's share of the key
// (fleet.go) and after what the local fallback granted that Redis has not
// seen; while Redis is unavailable the local engine grants them instead
// (fallback.go).

// reserveBatch runs reserve.lua for reqs, all on key, and returns a result
// for each. When Redis is unavailable and the Limiter may pace locally,
// each request is served by the local fallback instead.
func (l *Limiter) reserveBatch(ctx context.Context, key string, s *spec, reqs []*request) []result {
	if l.isDegraded() && !l.opts.FailClosed {
		return l.reserveAllLocal(key, s, reqs)
	}
	out := l.grantBatch(ctx, key, s, reqs, nil)
	if len(out) > 0 && out[0].err != nil && errors.Is(out[0].err, ErrUnavailable) && !l.opts.FailClosed {
		return l.reserveAllLocal(key, s, reqs)
	}
	return out
}

// grantBatch runs reserve.lua for reqs, all on key, or with fairArgs the
// fair script (fair.go), and returns a result for each.
func (l *Limiter) grantBatch(ctx context.Context, key string, s *spec, reqs []*request, fairArgs []any) []result {
	out := make([]result, len(reqs))
	now := l.clock.Now()
	args, err := l.grantArgs(key, now, s, 3+len(fairArgs)+len(reqs)*(1+len(s.units)))
	if err != nil {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	l.reports.note(key, s)
	args = append(args, fairArgs...)
	// What the local fallback granted that Redis has not seen goes first,
	// exactly once: taken now, given back if the call fails.
	hb, hasFloor := l.takeFloor(key)
	if hasFloor {
		nowNS, _ := l.serverNow()
		args = append(args, hb.Floor(nowNS).Arg())
	} else {
		args = append(args, "")
	}
	args = append(args, strconv.Itoa(len(reqs)))
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
		keys, script = l.keys(key, fairKeys...), fairScript
		if l.fair.script != nil {
			script = l.fair.script
		}
	}
	// With server time, the bounds on when the script ran are taken as
	// close to the call as can be (see MaxEarly); with a client clock, the
	// script counts from now.
	sent, recv := now, now
	var sentReal time.Time // for the pause reads a reply stands for (pauseChecks.observe)
	res, err := l.run(ctx, reqs[0].op, key, func(ctx context.Context) (any, error) {
		if l.serverTime {
			sent = l.clock.Now()
		}
		sentReal = time.Now()
		res, err := script.Run(ctx, l.rdb, keys, args...).Result()
		recv = l.clock.Now()
		return res, err
	}, func(res any) {
		// The caller left before the reply: give back what was granted.
		orphans := make([]result, len(reqs))
		if l.parseReserve(sent, recv, sentReal, key, s, reqs, res, orphans) == nil {
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
		l.floorDone(key, hb, err == nil)
	}
	if err == nil {
		err = l.parseReserve(sent, recv, sentReal, key, s, reqs, res, out)
	}
	if err != nil {
		for i := range out {
			out[i] = result{nil, err}
		}
	}
	return out
}

// reserveAllLocal serves reqs on the local fallback.
func (l *Limiter) reserveAllLocal(key string, s *spec, reqs []*request) []result {
	out := make([]result, len(reqs))
	for i, req := range reqs {
		maxWait := req.maxWait
		if maxWait >= 0 && !req.since.IsZero() {
			maxWait = max(maxWait-l.clock.Now().Sub(req.since), 0)
		}
		out[i].r, out[i].err = l.reserveLocal(key, s, req.amounts, maxWait)
	}
	return out
}

// floorOnly hands a floor to Redis for key, reserving nothing.
func (l *Limiter) floorOnly(ctx context.Context, key string, s *spec, f *engine.Floor) error {
	args := l.args(l.clock.Now(), s, 2)
	args = append(args, f.Arg(), "0")
	keys := l.keys(key, ":shadow")
	res, err := l.run(ctx, "reserve", key, func(ctx context.Context) (any, error) {
		return reserveScript.Run(ctx, l.rdb, keys, args...).Result()
	}, nil)
	if err != nil {
		return err
	}
	if reply, ok := res.([]any); ok && len(reply) == 4 {
		state, _ := reply[2].(string)
		stored, _ := reply[3].(string)
		l.local.noteState(key, state, stored)
	}
	return nil
}

// args returns the scripts' ARGV up to the operation's own arguments (see
// core.lua), with room for extra more, for a script that grants no slot.
func (l *Limiter) args(now time.Time, s *spec, extra int) []any {
	share, _ := l.shareArg()
	return l.argsWith(now, s, extra, share)
}

// grantArgs is args for a script that grants slots on key; it fails with
// noShareErr when this Limiter may take nothing on Redis now (shut).
func (l *Limiter) grantArgs(key string, now time.Time, s *spec, extra int) ([]any, error) {
	share, ok := l.shareArg()
	if !ok {
		return nil, l.noShareErr(key)
	}
	return l.argsWith(now, s, extra, share), nil
}

func (l *Limiter) argsWith(now time.Time, s *spec, extra int, share string) []any {
	args := make([]any, 0, 4+len(s.args)+extra)
	if l.serverTime {
		args = append(args, "", "0")
	} else {
		args = append(args, strconv.FormatInt(now.UnixMicro(), 10), strconv.Itoa(now.Nanosecond()%1000))
	}
	if !l.format2.Load() {
		// Format 1 (core.lua's ARGV[3]).
		if share == "1" {
			share = "f1 1"
		} else {
			share = "f1 " + share
		}
	}
	args = append(args, share, s.unitsArg)
	return append(args, s.args...)
}
