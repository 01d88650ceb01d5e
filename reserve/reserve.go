package reserve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/engine"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var reserveScript = redis.NewScript(lua.Reserve)

// Reserve reserves n permits on key, paced at lim, and returns the
// reservation, whose Delay says how long to wait before using them. It never
// refuses because of the wait's length (x/time/rate's ReserveN; see
// TryReserve), short of a queue over 30 years long (ErrQueueTooLong). n must
// be between 1 and lim.Burst.
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit, n int) (*Reservation, error) {
	s, amounts, err := l.single(key, lim, n)
	if err != nil {
		return nil, err
	}
	return l.reserve(ctx, "reserve", key, s, amounts, -1)
}

// TryReserve is Reserve, except that when the wait would be longer than
// maxWait it reserves nothing and returns a *WaitTooLongError carrying the
// wait that would have been needed (Guava's tryAcquire(permits, timeout)).
// maxWait 0 takes the permits only if they are available now.
func (l *Limiter) TryReserve(ctx context.Context, key string, lim Limit, n int, maxWait time.Duration) (*Reservation, error) {
	s, amounts, err := l.single(key, lim, n)
	if err != nil {
		return nil, err
	}
	if maxWait < 0 {
		return nil, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	return l.reserve(ctx, "reserve", key, s, amounts, maxWait)
}

// ReservePolicy reserves cost on key, paced by pol: one slot, the earliest
// at which every band of pol can take its unit's amount, reserved on all of
// them in one atomic step. Like Reserve, it never refuses because of the
// wait's length. Every unit pol charges must be in cost (0 to charge
// nothing), and no amount may exceed the burst or N of a band charging it.
func (l *Limiter) ReservePolicy(ctx context.Context, key string, pol Policy, cost Cost) (*Reservation, error) {
	s, amounts, err := l.policy(key, pol, cost)
	if err != nil {
		return nil, err
	}
	return l.reserve(ctx, "reserve", key, s, amounts, -1)
}

// TryReservePolicy is ReservePolicy, except that when the wait would be
// longer than maxWait it reserves nothing, on any band, and returns a
// *WaitTooLongError.
func (l *Limiter) TryReservePolicy(ctx context.Context, key string, pol Policy, cost Cost, maxWait time.Duration) (*Reservation, error) {
	s, amounts, err := l.policy(key, pol, cost)
	if err != nil {
		return nil, err
	}
	if maxWait < 0 {
		return nil, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	return l.reserve(ctx, "reserve", key, s, amounts, maxWait)
}

// single checks and compiles a single-Limit call.
func (l *Limiter) single(key string, lim Limit, n int) (*spec, []float64, error) {
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	s, err := l.specOf(lim)
	if err != nil {
		return nil, nil, err
	}
	if n < 1 {
		return nil, nil, fmt.Errorf("%w (got %d)", ErrInvalidN, n)
	}
	if n > lim.Burst {
		return nil, nil, fmt.Errorf("%w (n %d, burst %d)", ErrExceedsBurst, n, lim.Burst)
	}
	return s, []float64{float64(n)}, nil
}

// policy checks and compiles a policy call.
func (l *Limiter) policy(key string, pol Policy, cost Cost) (*spec, []float64, error) {
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	s, err := pol.compile()
	if err != nil {
		return nil, nil, err
	}
	amounts, err := s.costs(cost)
	if err != nil {
		return nil, nil, err
	}
	return s, amounts, nil
}

// reserve reserves amounts on key, through the coalescer unless it is
// disabled; maxWait < 0 means no maximum.
func (l *Limiter) reserve(ctx context.Context, op, key string, s *spec, amounts []float64, maxWait time.Duration) (*Reservation, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, err)
	}
	if maxWait >= 0 {
		if wait, refused := l.refusals.check(key, s, amounts, maxWait, l.clock.Now()); refused {
			return nil, &WaitTooLongError{Wait: wait, MaxWait: maxWait}
		}
	}
	req := &request{op: op, amounts: amounts, maxWait: maxWait, done: make(chan result, 1)}
	if !l.opts.DisableCoalescing {
		return l.reserveCoalesced(ctx, key, s, req)
	}
	res := l.reserveBatch(ctx, key, s, []*request{req})[0]
	return res.r, res.err
}

// reserveBatch runs reserve.lua for reqs, all on key, and returns a result
// for each. When Redis is unavailable and the Limiter may pace locally,
// each request is served by the local fallback instead.
func (l *Limiter) reserveBatch(ctx context.Context, key string, s *spec, reqs []*request) []result {
	out := make([]result, len(reqs))
	if l.isDegraded() && !l.opts.FailClosed {
		return l.reserveAllLocal(key, s, reqs)
	}
	now := l.clock.Now()
	args, err := l.grantArgs(key, now, s, 3+len(reqs)*(1+len(s.units)))
	if err != nil {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	l.reports.note(key, s)
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
	keys := l.keys(key, ":shadow")
	// With server time, the bounds on when the script ran are taken as
	// close to the call as can be (see MaxEarly); with a client clock, the
	// script counts from now.
	sent, recv := now, now
	res, err := l.run(ctx, reqs[0].op, key, func(ctx context.Context) (any, error) {
		if l.serverTime {
			sent = l.clock.Now()
		}
		res, err := reserveScript.Run(ctx, l.rdb, keys, args...).Result()
		recv = l.clock.Now()
		return res, err
	}, func(res any) {
		// The caller left before the reply: give back what was granted.
		orphans := make([]result, len(reqs))
		if l.parseReserve(sent, recv, key, s, reqs, res, orphans) == nil {
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
	if err != nil && errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		return l.reserveAllLocal(key, s, reqs)
	}
	if err == nil {
		err = l.parseReserve(sent, recv, key, s, reqs, res, out)
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
	args = append(args, share, s.unitsArg)
	return append(args, s.args...)
}

// parseReserve fills out from reserve.lua's reply to a call sent at sent
// whose reply arrived at recv.
func (l *Limiter) parseReserve(sent, recv time.Time, key string, s *spec, reqs []*request, res any, out []result) error {
	op := reqs[0].op
	reply, ok := res.([]any)
	if !ok || len(reply) != 4+2*len(reqs) {
		return replyError(op, key, res)
	}
	state, _ := reply[len(reply)-2].(string)
	stored, _ := reply[len(reply)-1].(string)
	l.local.noteState(key, state, stored)
	pe := engine.PauseEnd(state)
	base, err := l.replyBaseAt(sent, recv, reply)
	if err != nil {
		return replyError(op, key, res)
	}
	for i, req := range reqs {
		waitNS, ok1 := reply[2+2*i].(int64)
		seq, ok2 := reply[3+2*i].(int64)
		if !ok1 || !ok2 {
			return replyError(op, key, res)
		}
		switch {
		case seq == -1:
			out[i] = result{nil, fmt.Errorf("reserve: %s %q: %w", op, key, ErrQueueTooLong)}
		case seq == -2:
			out[i] = result{nil, l.shareError(key)}
		case seq == 0:
			out[i] = result{nil, &WaitTooLongError{Wait: time.Duration(waitNS), MaxWait: req.maxWait}}
			l.refusals.note(key, s, req.amounts, base.at(base.serverNS+waitNS), base.local)
		default:
			r := l.newReservation(key, s, req.amounts, base, waitNS, seq)
			if pe > base.serverNS && pe <= r.slotNS {
				r.pauseEnd = pe // granted after a pause in force: Sleep looks for a resume
			}
			l.opts.Metrics.Reserved(key, s.units, req.amounts, time.Duration(max(waitNS, 0)), false)
			out[i] = result{r: r}
		}
	}
	return nil
}

// replyBase reads the now_us, now_ns that begin every granting script's
// reply; now is when the call was sent, on the Limiter's clock, and the
// reply has just arrived.
func (l *Limiter) replyBase(now time.Time, reply []any) (replyTime, error) {
	return l.replyBaseAt(now, l.clock.Now(), reply)
}

// replyBaseAt is replyBase for a call sent at sent whose reply arrived at
// recv. With a client clock, sent is the now the script was given.
func (l *Limiter) replyBaseAt(sent, recv time.Time, reply []any) (replyTime, error) {
	us, ok1 := reply[0].(int64)
	ns, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return replyTime{}, errors.New("bad reply time")
	}
	b := replyTime{serverNS: us*1000 + ns, local: sent}
	if l.serverTime {
		// The script measured waits from its own TIME: place that instant
		// on the local clock (see MaxEarly).
		b.local = l.sync.place(b.serverNS, sent, recv)
	}
	return b, nil
}

// replyTime is when a script ran: on the server's clock (Unix ns), and on
// the Limiter's clock the instant waits are counted from.
type replyTime struct {
	serverNS int64
	local    time.Time
}

// at returns the local time of a slot the script granted, given in Unix ns
// on the server's clock (the script's clock).
func (b replyTime) at(slotNS int64) time.Time {
	return b.local.Add(time.Duration(slotNS - b.serverNS))
}

// newReservation builds a Redis reservation waitNS after base.
func (l *Limiter) newReservation(key string, s *spec, amounts []float64, base replyTime, waitNS, seq int64) *Reservation {
	r := &Reservation{
		lim:     l,
		key:     key,
		spec:    s,
		amounts: amounts,
		at:      base.at(base.serverNS + waitNS),
		slotNS:  base.serverNS + waitNS,
		seq:     seq,
	}
	l.horizons.note(key, r.slotNS, s)
	return r
}

func replyError(op, key string, res any) error {
	return fmt.Errorf("reserve: %s %q: unexpected reply %#v", op, key, res)
}
