package reserve

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
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
// not gone (health.go), a few times at most; then it is paced locally if
// the Limiter has switched, else its callers wait for Redis (grantLocal).
func (l *Limiter) grantEither(ctx context.Context, key string, s *spec, reqs []*request, fairArgs []any) []result {
	if l.isDegraded() && !l.opts.FailClosed {
		if out, ok := l.grantLocal(ctx, key, s, reqs, fairArgs); ok {
			return out
		}
	}
	backoff := blipRetry
	var refused error // the refusal the callers last waited out, if any
	for try := 0; ; try++ {
		sent := l.clock.Now()
		out := l.grantBatch(ctx, key, s, reqs, fairArgs, false)
		if refused != nil && len(out) > 0 && out[0].err != nil && ctx.Err() != nil && errors.Is(out[0].err, ctx.Err()) {
			for i := range out {
				out[i].err = refusedErr(out[i].err, refused)
			}
			return out
		}
		if len(out) == 0 || out[0].err == nil || !errors.Is(out[0].err, ErrUnavailable) || l.opts.FailClosed {
			return out
		}
		var noShare *noShareError
		switch {
		case errors.As(out[0].err, &noShare):
			return out
		case isTimeout(out[0].err) || isStale(out[0].err):
			// Timed out, or run by Redis after its deadline (it stalled)
			// and changed nothing: again once the ping the timeout started
			// answered, on the fleet as it is after the stall. A call
			// refused as stale reads the server's clock again first
			// (resyncClock).
			if isStale(out[0].err) {
				l.resyncClock(ctx, key, sent)
			}
			if try == maxSlowTries || !l.slowNotGone(ctx) {
				if out, ok := l.grantLocal(ctx, key, s, reqs, fairArgs); ok {
					return out
				}
				continue
			}
		case !l.isDegraded() && l.opts.FailAfter > 1:
			// Redis refused (restarted, a connection reset): wait for it
			// a blip (blipBudget) before pacing locally.
			refused = out[0].err
			t := time.NewTimer(backoff)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				err := refusedErr(fmt.Errorf("reserve: %s %q: %w", reqs[0].op, key, ctx.Err()), refused)
				for i := range out {
					out[i] = result{nil, err}
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

// refusedErr is the error of a caller whose context ended (err, the
// context's error) while it waited out a refusal of Redis (a blip): it
// says what the caller waited for, as text only, as waitedErr does for a
// share: the caller's error is its context's, not the outage's
// (errors.Is(err, ErrUnavailable) is false).
func refusedErr(err, refusal error) error {
	return fmt.Errorf("%w (it was waiting for Redis, which refused: %v)", err, refusal)
}

// grantLocal runs the batch on the local fallback, unless the Limiter is
// handing back what it granted locally (recovered): then it waits until
// the Limiter is back on Redis (or ctx ends: the results say so), and ok
// is false: the batch goes to Redis. A slot granted locally during the
// handback would never reach Redis, which would grant its instant again
// to another member (TestNoLocalGrantDuringHandback). A Limiter that has
// not switched to local pacing (its calls timed out or ran late, and a
// ping found Redis answering) is counted on Redis by the fleet, which
// leaves it no local share: its callers wait for Redis, as for any share
// it lacks (onRedisErr; TestStaleTriesStayOnRedis).
func (l *Limiter) grantLocal(ctx context.Context, key string, s *spec, reqs []*request, fairArgs []any) (out []result, ok bool) {
	if !l.isDegraded() {
		err := l.onRedisErr(key)
		out = make([]result, len(reqs))
		for i := range out {
			out[i] = result{nil, err}
		}
		return out, true
	}
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
	if local && l.probesStalled() {
		err = l.stalledErr(key)
	} else if local && !l.localSlotsReady() {
		err = l.beatOutErr(key)
	} else if local {
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
	args := l.argsWith(key, now, s, 2+len(fairArgs), shareArg, local)
	l.reportUse(key, s)
	args = append(args, fairArgs...)
	floorAt := len(args)
	args = append(args, "", l.requestsArg(reqs))
	ks := l.states.get(key)
	keys, script := ks.reserveKeys(l), reserveScript
	if fairArgs != nil {
		keys, script = l.keys(key, fairKeys...), l.fairScriptOf()
	}
	if local {
		ks.mu.Lock()
		res, err := l.runLocal(ctx, reqs[0].op, ks, s, script, keys, args, shareArg)
		ks.mu.Unlock()
		if err == nil {
			if rr, ok := decodeReserveReply(res); ok {
				err = l.parseReserve(l.localBaseNS(now, rr.serverNS()), time.Time{}, ks, s, reqs, rr, out, true, shareArg)
			} else {
				err = replyError(reqs[0].op, key, res)
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
	hb, hasFloor := l.takeHandback(ks, false)
	horizon, seq := ks.horizon(), ks.seenSeq
	ks.mu.Unlock()
	nowNS, _ := l.serverNow()
	lost := ""
	if hasFloor {
		args[floorAt] = hb.floorArg(nowNS)
	} else if horizon > nowNS {
		// Slots granted on the key still ahead: should Redis have lost it
		// (restarted empty), it grants nothing before them.
		lost = lostHorizon(horizon, nowNS, seq)
		args[1] = l.env(key, now, s, shareArg, false, lost)
	}
	if fairArgs == nil && args[floorAt] == "" && args[floorAt+1] == "" {
		args = args[:floorAt] // reserve.lua's floor and requests: none, one plain request
	}
	// With server time, the bounds on when the script ran are taken as
	// close to the call as can be (see MaxEarly); with a client clock, the
	// script counts from now.
	// (One value for the three times the closures below set: each
	// variable a closure sets was an allocation of its own.)
	tm := &struct{ sent, recv, sentReal time.Time }{sent: now, recv: now} // sentReal: for the pause reads a reply stands for (keyState.noteSeen)
	timeout := l.callTimeout()
	res, err := l.run(ctx, reqs[0].op, key, func(ctx context.Context) (any, error) {
		if l.serverTime {
			tm.sent = l.clock.Now()
		}
		tm.sentReal = time.Now()
		res, err := script.Run(ctx, l.scripts, keys, l.withDeadline(ctx, args)...).Result()
		if code, _ := layout.ErrorCode(err); code == "PACER_CALENDAR" && l.learnCalendar(key, err) {
			// A stored limit's calendar window this call had no table
			// for: the script changed nothing; again, with its table.
			args[1] = l.env(key, now, s, shareArg, false, lost)
			if l.serverTime {
				tm.sent = l.clock.Now()
			}
			tm.sentReal = time.Now()
			res, err = script.Run(ctx, l.scripts, keys, l.withDeadline(ctx, args)...).Result()
		}
		tm.recv = l.clock.Now()
		return res, err
	}, func(res any) {
		// The caller left before the reply: give back what was granted.
		orphans := make([]result, len(reqs))
		if rr, ok := decodeReserveReply(res); ok && l.parseReserve(l.baseAt(tm.sent, tm.recv, rr.serverNS()), tm.sentReal, ks, s, reqs, rr, orphans, false, shareArg) == nil {
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
		if rr, ok := decodeReserveReply(res); ok {
			err = l.parseReserve(l.baseAt(tm.sent, tm.recv, rr.serverNS()), tm.sentReal, ks, s, reqs, rr, out, false, shareArg)
		} else {
			err = replyError(reqs[0].op, key, res)
		}
	}
	if err != nil {
		return fail(err)
	}
	if d, _ := args[0].(string); d == "" && time.Since(tm.sentReal) >= timeout {
		// A reply after the call's timeout, for a script that had no
		// deadline to refuse it by (no estimate of the server's clock yet,
		// or a client clock): Redis may have run it after a stall, on the
		// shares of before. The ping the timeout started tells the fleet
		// after the stall; if that moved this Limiter's share, the grants
		// are given back and the batch goes again on the new one, as a
		// stale call's (TestStallRefreshesFleet).
		l.slowNotGone(ctx)
		if now, ok := l.shareArg(); !ok || now != shareArg {
			for _, o := range out {
				if o.r != nil {
					o.r.cancelDetached()
				}
			}
			return fail(fmt.Errorf("reserve: %s %q: %w: %w", reqs[0].op, key, ErrUnavailable, errStaleView))
		}
	}
	return out
}

// reserveKeys is reserve.lua's KEYS for the key, made once.
func (ks *keyState) reserveKeys(l *Limiter) []string {
	if k := ks.rkeys.Load(); k != nil {
		return *k
	}
	k := l.keys(ks.name, ":shadow")
	ks.rkeys.Store(&k)
	return k
}

// lostHorizon is core.lua's lost key's horizon (in ARGV[2]): the slots
// granted on a key up to horizon (Unix ns on the server's clock), applied
// only if Redis lost the key (it has no state, or one numbered before seq,
// the last reservation this Limiter saw).
func lostHorizon(horizon, nowNS, seq int64) string {
	return "!" + strconv.FormatInt((horizon-nowNS+999)/1000, 10) + ":" + strconv.FormatInt(seq, 10)
}

// withDeadline sets args' deadline (core.lua's ARGV[1], in args built by
// argsWith) to that of a call made under ctx, and returns args: a call
// that Redis runs long after it timed out (Redis stalled: frozen, a long
// fork) grants nothing. Its view of the fleet may be stale by then:
// members may pace locally since, and the slots it would grant would not
// leave them their shares. Its caller, waiting for the reply (a patient
// call: see call), sends it again once the ping the timeout started has
// told it the fleet after the stall (grantEither). The deadline is the
// call's timeout (callEnd) twice over, plus the clock estimate's error, so
// that a call Redis runs in time is never refused. Without server
// time or an estimate, none ("").
func (l *Limiter) withDeadline(ctx context.Context, args []any) []any {
	if len(args) < 3 {
		return args
	}
	if ms, ok := l.scriptDeadline(ctx); ok {
		args[0] = strconv.FormatInt(ms, 10)
	}
	return args
}

// scriptDeadline is the deadline of a script run under ctx, Unix ms on the
// server's clock (see withDeadline); false without server time or an
// estimate of it, or without a deadline.
func (l *Limiter) scriptDeadline(ctx context.Context) (int64, bool) {
	d, ok := callEnd(ctx)
	if !ok || !l.serverTime {
		return 0, false
	}
	ns, rtt, ok := l.sync.bestServer(l.clock.Now())
	if !ok {
		return 0, false
	}
	left := time.Until(d)
	return (ns + int64(2*left+rtt) + int64(time.Millisecond) - 1) / int64(time.Millisecond), true
}

// decodeReserveReply decodes reserve.lua's reply (one string of bytes).
func decodeReserveReply(res any) (reserveReply, bool) {
	b, ok := res.(string)
	if !ok {
		return reserveReply{}, false
	}
	return decodeReserve(b)
}

// requestsArg returns reserve.lua's requests argument for reqs: "" for one
// request of cost 1 on every unit with no maximum wait; else per request
// its maximum wait (µs, -1: none; the time spent queued counts against
// it) and its costs, little-endian doubles.
func (l *Limiter) requestsArg(reqs []*request) string {
	if len(reqs) == 1 && reqs[0].maxWait < 0 {
		plain := true
		for _, a := range reqs[0].amounts {
			plain = plain && a == 1
		}
		if plain {
			return ""
		}
	}
	b := make([]byte, 0, 8*len(reqs)*(1+len(reqs[0].amounts)))
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
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(float64(maxWait)))
		for _, a := range req.amounts {
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(a))
		}
	}
	return string(b)
}

// floorOnly hands a floor to Redis for key, reserving nothing, with lost
// as the horizon of a key Redis has lost ("": none).
func (l *Limiter) floorOnly(ctx context.Context, key string, s *spec, floor, lost string) error {
	now := l.clock.Now()
	args := l.args(key, now, s, 2)
	if lost != "" {
		share, _ := l.shareArg()
		args[1] = l.env(key, now, s, share, false, lost)
	}
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
	if b, ok := res.(string); ok {
		if r, ok := decodeReserve(b); ok {
			ks := l.states.get(key)
			ks.mu.Lock()
			ks.noteSeen(r.state, r.stored, sent)
			ks.mu.Unlock()
		}
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

// argsWith returns the scripts' ARGV up to the operation's own (core.lua:
// the deadline, set by withDeadline; the environment; the policy), at
// share, for Redis or (local) for the local fallback's store, which always
// writes format 3 (its states are its own), with room for extra more.
func (l *Limiter) argsWith(key string, now time.Time, s *spec, extra int, share string, local bool) []any {
	args := make([]any, 3, 3+extra)
	args[0] = ""
	if e := l.env(key, now, s, share, local, ""); e == "1" {
		args[1] = envCommon // no interface made per call for the common case
	} else {
		args[1] = e
	}
	args[2] = s.policyAny
	return args
}

// envCommon is env's common case, "1", in an interface made once.
var envCommon any = "1"

// env returns core.lua's ARGV[2] for a call on key at now: the client
// clock (without server time), the state format to write (none: 3), a lost
// key's horizon (lost, "" for none: see lostHorizon), the calendar tables
// of s and of the stored limits learned on key, and the share. The common
// case, server time, format 3 and the whole limit, is "1".
func (l *Limiter) env(key string, now time.Time, s *spec, share string, local bool, lost string) string {
	cal := calendarArg(now, s, l.learnedCalendars(key))
	f := int32(3)
	if !local {
		f = l.format.Load()
	}
	if l.serverTime && f == 3 && lost == "" && cal == "" {
		return share
	}
	var b strings.Builder
	if !l.serverTime {
		b.WriteString("t" + strconv.FormatInt(now.UnixMicro(), 10) + ":" + strconv.Itoa(now.Nanosecond()%1000) + " ")
	}
	switch f {
	case 1:
		b.WriteString("f1 ")
	case 2:
		b.WriteString("f2 ")
	}
	if lost != "" {
		b.WriteString(lost + " ")
	}
	b.WriteString(cal)
	b.WriteString(share)
	return b.String()
}
