package reserve

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var (
	claimScript = redis.NewScript(lua.Claim)
	holdScript  = redis.NewScript(lua.Hold)
)

// Slots kept for holders (package hold: queued jobs, by ID), recorded in
// Redis beside the key and granted in the same atomic step as the bucket's
// slots (claim.lua, hold.lua). This file is the mechanism, reached through
// internal/hook; package hold is the API and says what it means.

// heldGrant is the outcome of a claim or a hold for one holder.
type heldGrant struct {
	r      *Reservation // nil: a refused claim
	kept   bool         // recorded for the holder, who comes back for it
	source int          // hold.Source: 0 fresh, 1 redeemed, 2 stale, 3 paused
	wait   time.Duration
}

// sourceRedeemed is hold.Redeemed: the kept slot, nothing reserved.
const sourceRedeemed = 1

// claimHeld hands holder id its slot on req.Key in one atomic step (see
// hold.Book.Claim): the slot kept for it, or a fresh one, handed over when
// at most maxWait away; else kept for id when mayKeep (refused otherwise).
// A kept slot more than staleAfter in the past (0: the default, see
// staleAfterFor) or inside a later pause is dropped for a fresh one; one
// within early is handed over whatever maxWait says.
func (l *Limiter) claimHeld(ctx context.Context, id string, req Request, maxWait, staleAfter, early time.Duration, mayKeep bool) (heldGrant, error) {
	s, amounts, err := req.check()
	if err != nil {
		return heldGrant{}, err
	}
	if maxWait < 0 {
		return heldGrant{}, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	keep := "0"
	if mayKeep {
		keep = "1"
	}
	now := l.clock.Now()
	args, err := l.grantArgs(req.Key, now, s, 4+len(amounts))
	if err != nil {
		return heldGrant{}, err
	}
	args = append(args, strconv.FormatInt(maxWait.Microseconds(), 10), keep,
		strconv.FormatInt(staleAfterFor(staleAfter, s, amounts).Microseconds(), 10), strconv.FormatInt(early.Microseconds(), 10))
	for _, a := range amounts {
		args = append(args, formatFloat(a))
	}
	keys := l.keys(req.Key, holdSuffix(id))
	res, err := l.run(ctx, names.OpClaim, req.Key, func(ctx context.Context) (any, error) {
		return claimScript.Run(ctx, l.scripts, keys, l.withDeadline(ctx, args)...).Result()
	}, func(res any) {
		// The caller left: give back a fresh slot handed over to it.
		if g, err := l.parseClaim(now, req.Key, s, id, res); err == nil && g.r != nil && g.source != sourceRedeemed && !g.kept {
			g.r.cancelDetached()
		}
	})
	if err != nil {
		return heldGrant{}, err
	}
	g, err := l.parseClaim(now, req.Key, s, id, res)
	if err != nil {
		return heldGrant{}, err
	}
	if g.r == nil {
		return heldGrant{}, &WaitTooLongError{Wait: g.wait, MaxWait: maxWait}
	}
	if g.source != sourceRedeemed {
		l.granted(g.r, g.r.Delay())
	}
	return g, nil
}

// parseClaim reads claim.lua's reply. A refused claim returns a heldGrant
// with no Reservation (its wait in g.wait), or ErrQueueTooLong.
func (l *Limiter) parseClaim(now time.Time, key string, s *spec, id string, res any) (heldGrant, error) {
	reply, ok := res.([]any)
	if !ok || len(reply) != 6+len(s.units) {
		return heldGrant{}, replyError(names.OpClaim, key, res)
	}
	base, err := l.replyBase(now, reply)
	waitNS, ok1 := reply[2].(int64)
	seq, ok2 := reply[3].(int64)
	state, ok3 := reply[4].(int64)
	origin, ok4 := reply[5].(int64)
	amounts, aerr := parseAmounts(reply[6:])
	if err != nil || !ok1 || !ok2 || !ok3 || !ok4 || aerr != nil {
		return heldGrant{}, replyError(names.OpClaim, key, res)
	}
	switch seq {
	case -1:
		return heldGrant{}, fmt.Errorf("reserve: claim %q: %w", key, ErrQueueTooLong)
	case -2:
		// No room at this share while members are held: ErrUnavailable,
		// as in an outage (the worker's middleware then reserves without
		// a hold, which waits for a share). Before, a WaitTooLongError of
		// a 0 wait (TestHoldNoShareWaits).
		return heldGrant{}, l.shareError(key)
	}
	g := heldGrant{kept: state == 2, source: int(origin)}
	if state == 0 {
		g.wait = time.Duration(waitNS)
		return g, nil
	}
	g.r = l.newReservation(key, s, amounts, base, waitNS, seq)
	g.r.epoch = l.noteGranted(key, g.r.slotNS)
	if g.kept {
		g.r.holdID = id
	}
	return g, nil
}

// holdHeld reserves a slot for each of reqs and keeps it for ids[i] (see
// hold.Book.Hold), in one round trip: grouped by key and policy, each group
// in script calls of at most maxHoldBatch holders, all in one pipeline.
func (l *Limiter) holdHeld(ctx context.Context, ids []string, reqs []Request, staleAfter, notBefore time.Duration) ([]heldGrant, error) {
	type group struct {
		key     string
		spec    *spec
		idx     []int
		amounts [][]float64
	}
	var order []*group
	groups := map[[2]string]*group{}
	for i, r := range reqs {
		s, amounts, err := r.check()
		if err != nil {
			return nil, fmt.Errorf("reserve: hold request %d: %w", i, err)
		}
		k := [2]string{r.Key, s.sig}
		g := groups[k]
		if g == nil {
			g = &group{key: r.Key, spec: s}
			groups[k] = g
			order = append(order, g)
		}
		g.idx = append(g.idx, i)
		g.amounts = append(g.amounts, amounts)
	}
	if len(order) == 0 {
		return nil, nil
	}
	now := l.clock.Now()
	var calls []*holdCall
	for _, g := range order {
		for start := 0; start < len(g.idx); start += maxHoldBatch {
			end := min(start+maxHoldBatch, len(g.idx))
			c, err := l.holdCall(now, g.key, g.spec, ids, g.idx[start:end], g.amounts[start:end], staleAfter, notBefore)
			if err != nil {
				return nil, err
			}
			calls = append(calls, c)
		}
	}
	_, err := l.run(ctx, names.OpHold, order[0].key, func(ctx context.Context) (any, error) {
		if l.onStore != nil {
			return nil, runEach(ctx, l.onStore, holdScript, calls)
		}
		return nil, runPipelined(ctx, l.rdb, holdScript, calls)
	}, nil)
	if err != nil {
		return nil, err
	}
	out := make([]heldGrant, len(reqs))
	for _, c := range calls {
		if err := l.parseHold(now, c, ids, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// maxHoldBatch is hold.MaxBatch: the most holders one script call of Hold
// reserves for, so that no single script keeps Redis busy for long (a call
// of this size runs in about a millisecond).
const maxHoldBatch = 500

// holdCall is one run of hold.lua: holders idx of one key and policy.
type holdCall struct {
	key  string
	spec *spec
	idx  []int
	keys []string
	args []any
	cmd  *redis.Cmd
}

func (l *Limiter) holdCall(now time.Time, key string, s *spec, ids []string, idx []int, amounts [][]float64, staleAfter, notBefore time.Duration) (*holdCall, error) {
	stale := time.Duration(0)
	for _, a := range amounts {
		stale = max(stale, staleAfterFor(staleAfter, s, a))
	}
	args, err := l.grantArgs(key, now, s, 3+len(idx)*len(s.units))
	if err != nil {
		return nil, err
	}
	args = append(args, strconv.FormatInt(stale.Microseconds(), 10), strconv.FormatInt(notBefore.Microseconds(), 10), strconv.Itoa(len(idx)))
	suffixes := make([]string, len(idx))
	for j, i := range idx {
		suffixes[j] = holdSuffix(ids[i])
		for _, a := range amounts[j] {
			args = append(args, formatFloat(a))
		}
	}
	return &holdCall{key: key, spec: s, idx: idx, keys: l.keys(key, suffixes...), args: args}, nil
}

// runPipelined sends the calls of script as EVALSHA in one pipeline. Calls
// that fail with NOSCRIPT did not run, so they are sent again once the
// script is loaded. It returns the first call's error (a connection error
// fails them all); each call's result is in its cmd.
func runPipelined(ctx context.Context, rdb redis.UniversalClient, script *redis.Script, calls []*holdCall) error {
	pending := calls
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		for _, c := range pending {
			c.cmd = script.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx) // errors are read from each command
		var missing []*holdCall
		for _, c := range pending {
			if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 || attempt == 1 {
			break
		}
		if err := script.Load(ctx, rdb).Err(); err != nil {
			return err
		}
		pending = missing
	}
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// runEach is runPipelined on a Scripter that has no pipeline (a
// Limiter's store, onstore.go): the calls one after the other.
func runEach(ctx context.Context, sc redis.Scripter, script *redis.Script, calls []*holdCall) error {
	for _, c := range calls {
		c.cmd = script.Run(ctx, sc, c.keys, c.args...)
	}
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

// parseHold reads one call's reply into out.
func (l *Limiter) parseHold(now time.Time, c *holdCall, ids []string, out []heldGrant) error {
	res, _ := c.cmd.Result()
	reply, ok := res.([]any)
	m, w := len(c.idx), 1+len(c.spec.units)
	if !ok || len(reply) != 2+2*m+w*m {
		return replyError(names.OpHold, c.key, res)
	}
	base, err := l.replyBase(now, reply)
	if err != nil {
		return replyError(names.OpHold, c.key, res)
	}
	for j, i := range c.idx {
		waitNS, ok1 := reply[2+2*j].(int64)
		seq, ok2 := reply[3+2*j].(int64)
		origin, ok3 := reply[2+2*m+w*j].(int64)
		got, aerr := parseAmounts(reply[3+2*m+w*j : 2+2*m+w*(j+1)])
		if !ok1 || !ok2 || !ok3 || aerr != nil {
			return replyError(names.OpHold, c.key, res)
		}
		switch seq {
		case -1:
			return fmt.Errorf("reserve: hold %q: %w", c.key, ErrQueueTooLong)
		case -2:
			// Nothing booked: no room at this share while members are
			// held. Taken for a grant, it was a slot charged nowhere
			// (TestHoldNoShareWaits); the caller waits for a share.
			return l.shareError(c.key)
		}
		r := l.newReservation(c.key, c.spec, got, base, waitNS, seq)
		r.epoch = l.noteGranted(c.key, r.slotNS)
		r.holdID = ids[i]
		out[i] = heldGrant{r: r, kept: true, source: int(origin)}
		if origin != sourceRedeemed {
			l.granted(r, time.Duration(waitNS))
		}
	}
	return nil
}

// staleAfterFor is hold.Options.StaleAfter (given, or 0: the default) for
// a request of amounts on s.
func staleAfterFor(given time.Duration, s *spec, amounts []float64) time.Duration {
	if given > 0 {
		return given
	}
	if late := s.lateness(amounts); late > 0 {
		return late
	}
	return time.Second
}

// holdSuffix is the part of a hold's Redis key after the key's.
func holdSuffix(id string) string { return ":h:" + id }

// parseAmounts reads costs a script sent back (decimal strings or integers).
func parseAmounts(v []any) ([]float64, error) {
	out := make([]float64, len(v))
	for i, x := range v {
		switch t := x.(type) {
		case int64:
			out[i] = float64(t)
		case string:
			f, err := strconv.ParseFloat(t, 64)
			if err != nil {
				return nil, err
			}
			out[i] = f
		default:
			return nil, fmt.Errorf("amount %#v", x)
		}
	}
	return out, nil
}
