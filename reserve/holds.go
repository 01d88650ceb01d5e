package reserve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var (
	claimScript = redis.NewScript(lua.Claim)
	holdScript  = redis.NewScript(lua.Hold)
)

// ErrEmptyID is returned when a holder ID is empty.
var ErrEmptyID = errors.New("reserve: empty holder ID")

// HoldOptions configure Holds. The zero value is ready to use.
type HoldOptions struct {
	// StaleAfter is how late a held slot may be and still be redeemed. A
	// later one is dropped and a fresh slot reserved: its holder was not
	// there to use it (the workers were down, the queue was behind), and
	// handing out every missed slot at once would be a burst. A hold nobody
	// redeems expires StaleAfter after its slot. Default (0): half the slot
	// spacing of the request's fastest bucket, at least 1 ms (as
	// Options.MaxLateness), so late redemptions put at most half a slot more
	// into any window; one second when the policy has only window bands.
	StaleAfter time.Duration

	// Early is how far away a held slot may be and still be handed over by
	// Claim and TryClaim when that is further than their maxWait: a holder
	// that a job queue brings back early on purpose (it delivers in coarse
	// steps) then sleeps the rest instead of leaving again. Default (0):
	// maxWait alone decides.
	Early time.Duration

	// NotBefore is how soon after now Hold may place a fresh slot: a job
	// enqueued for its slot is picked up about that late by the job queue,
	// and a slot it reaches late would be stale. Default (0): now.
	NotBefore time.Duration
}

// Holds keeps slots for holders: queued jobs, by ID. A slot kept for a
// holder is recorded in Redis beside the key, so that the holder redeems it
// later instead of reserving a second one: a job rescheduled to its slot
// (Claim), or enqueued for it ahead of time (Hold). Holds are configured
// once; packages worker and scheduler use them.
type Holds struct {
	l    *Limiter
	opts HoldOptions
}

// Holds returns the holds of l, configured by opts.
func (l *Limiter) Holds(opts HoldOptions) (*Holds, error) {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"StaleAfter", opts.StaleAfter}, {"Early", opts.Early}, {"NotBefore", opts.NotBefore}} {
		if d.v < 0 {
			return nil, fmt.Errorf("%w: HoldOptions.%s %v", ErrInvalidDuration, d.name, d.v)
		}
	}
	return &Holds{l: l, opts: opts}, nil
}

// Limiter returns the Limiter h keeps its slots on.
func (h *Holds) Limiter() *Limiter { return h.l }

// Origin says where a Grant's slot came from.
type Origin int

const (
	// Fresh: a slot reserved by this call.
	Fresh Origin = iota
	// Redeemed: the slot kept for the holder before this call; nothing was
	// reserved.
	Redeemed
	// Stale: a fresh slot, after the holder's kept slot was dropped for
	// being more than StaleAfter in the past.
	Stale
	// Paused: a fresh slot, after the holder's kept slot was dropped for
	// lying inside a pause made after it was granted.
	Paused
)

func (o Origin) String() string {
	switch o {
	case Fresh:
		return "fresh"
	case Redeemed:
		return "redeemed"
	case Stale:
		return "stale"
	case Paused:
		return "paused"
	}
	return "Origin(" + strconv.Itoa(int(o)) + ")"
}

// A Grant is the slot Claim, TryClaim or Hold gave a holder.
type Grant struct {
	// Reservation is the slot. Its Time may lie in the past when a kept
	// slot is redeemed a little late (at most StaleAfter).
	Reservation *Reservation
	// Kept reports that the slot is recorded for the holder, who should
	// come back for it (reschedule the job to Reservation.Time()) and claim
	// it then. When false, the slot is the caller's to use now: sleep
	// until it (Reservation.Sleep) and go.
	Kept bool
	// Origin is where the slot came from.
	Origin Origin

	wait time.Duration // a refused claim's wait
}

// Claim hands holder id its slot on req.Key, in one atomic step: the slot
// kept for it, or a fresh one. A slot at most maxWait away is handed over
// (the hold, if any, is deleted; Kept is false). A slot further away is kept
// for id: a fresh one is reserved and recorded, an existing hold is left as
// it is, and Kept is true (unless it is within HoldOptions.Early: then it is
// handed over). A kept slot more than StaleAfter in the past, or inside a
// pause made after it was granted, is dropped and a fresh one taken.
//
// A job queue calls Claim each time a job runs, with the job's ID: it sleeps
// until a handed-over slot, and reschedules the job to a kept one.
func (h *Holds) Claim(ctx context.Context, id string, req Request, maxWait time.Duration) (*Grant, error) {
	return h.claim(ctx, "claim", id, req, maxWait, true)
}

// TryClaim is Claim, except that a slot further than maxWait away is
// refused instead of kept: it returns a *WaitTooLongError, reserves nothing,
// and leaves an existing hold as it is. Use it for a holder that cannot come
// back later.
func (h *Holds) TryClaim(ctx context.Context, id string, req Request, maxWait time.Duration) (*Grant, error) {
	return h.claim(ctx, "claim", id, req, maxWait, false)
}

func (h *Holds) claim(ctx context.Context, op, id string, req Request, maxWait time.Duration, mayKeep bool) (*Grant, error) {
	l := h.l
	s, amounts, err := req.check()
	if err != nil {
		return nil, err
	}
	if id == "" {
		return nil, ErrEmptyID
	}
	if maxWait < 0 {
		return nil, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	keep := "0"
	if mayKeep {
		keep = "1"
	}
	now := l.clock.Now()
	args, err := l.grantArgs(req.Key, now, s, 4+len(amounts))
	if err != nil {
		return nil, err
	}
	args = append(args, strconv.FormatInt(maxWait.Microseconds(), 10), keep,
		strconv.FormatInt(h.staleAfter(s, amounts).Microseconds(), 10), strconv.FormatInt(h.opts.Early.Microseconds(), 10))
	for _, a := range amounts {
		args = append(args, formatFloat(a))
	}
	keys := l.keys(req.Key, holdSuffix(id))
	res, err := l.run(ctx, op, req.Key, func(ctx context.Context) (any, error) {
		return claimScript.Run(ctx, l.rdb, keys, args...).Result()
	}, func(res any) {
		// The caller left: give back a fresh slot handed over to it.
		if g, err := h.parseClaim(now, req.Key, s, id, res); err == nil && g.Origin != Redeemed && !g.Kept {
			g.Reservation.cancelDetached()
		}
	})
	if err != nil {
		return nil, err
	}
	g, err := h.parseClaim(now, req.Key, s, id, res)
	if err != nil {
		return nil, err
	}
	if g.Reservation == nil {
		return nil, g.refusal(maxWait)
	}
	if g.Origin != Redeemed {
		l.opts.Metrics.Reserved(req.Key, s.units, amounts, g.Reservation.Delay(), false)
	}
	return g, nil
}

// refusal is a Claim's error when nothing was handed over or kept.
func (g *Grant) refusal(maxWait time.Duration) error {
	return &WaitTooLongError{Wait: g.wait, MaxWait: maxWait}
}

// parseClaim reads claim.lua's reply. A refused claim returns a Grant with
// no Reservation (its wait in g.wait), or ErrQueueTooLong.
func (h *Holds) parseClaim(now time.Time, key string, s *spec, id string, res any) (*Grant, error) {
	l := h.l
	reply, ok := res.([]any)
	if !ok || len(reply) != 6+len(s.units) {
		return nil, replyError("claim", key, res)
	}
	base, err := l.replyBase(now, reply)
	waitNS, ok1 := reply[2].(int64)
	seq, ok2 := reply[3].(int64)
	state, ok3 := reply[4].(int64)
	origin, ok4 := reply[5].(int64)
	amounts, aerr := parseAmounts(reply[6:])
	if err != nil || !ok1 || !ok2 || !ok3 || !ok4 || aerr != nil {
		return nil, replyError("claim", key, res)
	}
	if seq == -1 {
		return nil, fmt.Errorf("reserve: claim %q: %w", key, ErrQueueTooLong)
	}
	g := &Grant{Kept: state == 2, Origin: Origin(origin)}
	if state == 0 {
		g.wait = time.Duration(waitNS)
		return g, nil
	}
	g.Reservation = l.newReservation(key, s, amounts, base, waitNS, seq)
	if g.Kept {
		g.Reservation.holdID = id
	}
	return g, nil
}

// A HoldRequest asks for a slot for holder ID.
type HoldRequest struct {
	ID string
	Request
}

// Hold reserves a slot for each request and keeps it for the request's ID,
// so that Claim with that ID hands the slot over later instead of reserving
// again (a job enqueued for its slot). It returns one Grant per request, in
// order, each Kept.
//
// Requests on one key and policy get slots in their order, as if reserved
// one after the other. All of them cost one Redis round trip: requests are
// grouped by key and policy, each group is sent as script calls of at most
// MaxHoldBatch holders, and the calls go in one pipeline (plus a script load
// after Redis has lost its scripts). An ID that already holds a live slot
// on its key keeps it (Origin Redeemed), so Hold may be repeated after a
// failure without reserving twice. If Hold fails, some groups may have been
// reserved; their holds expire unused.
func (h *Holds) Hold(ctx context.Context, reqs []HoldRequest) ([]*Grant, error) {
	l := h.l
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
		if r.ID == "" {
			return nil, fmt.Errorf("reserve: hold request %d: %w", i, ErrEmptyID)
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
		for start := 0; start < len(g.idx); start += MaxHoldBatch {
			end := min(start+MaxHoldBatch, len(g.idx))
			c, err := h.holdCall(now, g.key, g.spec, reqs, g.idx[start:end], g.amounts[start:end])
			if err != nil {
				return nil, err
			}
			calls = append(calls, c)
		}
	}
	_, err := l.run(ctx, "hold", order[0].key, func(ctx context.Context) (any, error) {
		return nil, runPipelined(ctx, l.rdb, holdScript, calls)
	}, nil)
	if err != nil {
		return nil, err
	}
	out := make([]*Grant, len(reqs))
	for _, c := range calls {
		if err := h.parseHold(now, c, reqs, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// MaxHoldBatch is the most holders one script call of Hold reserves for, so
// that no single script keeps Redis busy for long (a call of this size runs
// in about a millisecond).
const MaxHoldBatch = 500

// holdCall is one run of hold.lua: holders idx of one key and policy.
type holdCall struct {
	key  string
	spec *spec
	idx  []int
	keys []string
	args []any
	cmd  *redis.Cmd
}

func (h *Holds) holdCall(now time.Time, key string, s *spec, reqs []HoldRequest, idx []int, amounts [][]float64) (*holdCall, error) {
	l := h.l
	stale := time.Duration(0)
	for _, a := range amounts {
		stale = max(stale, h.staleAfter(s, a))
	}
	args, err := l.grantArgs(key, now, s, 3+len(idx)*len(s.units))
	if err != nil {
		return nil, err
	}
	args = append(args, strconv.FormatInt(stale.Microseconds(), 10), strconv.FormatInt(h.opts.NotBefore.Microseconds(), 10), strconv.Itoa(len(idx)))
	suffixes := make([]string, len(idx))
	for j, i := range idx {
		suffixes[j] = holdSuffix(reqs[i].ID)
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

// parseHold reads one call's reply into out.
func (h *Holds) parseHold(now time.Time, c *holdCall, reqs []HoldRequest, out []*Grant) error {
	l := h.l
	res, _ := c.cmd.Result()
	reply, ok := res.([]any)
	m, w := len(c.idx), 1+len(c.spec.units)
	if !ok || len(reply) != 2+2*m+w*m {
		return replyError("hold", c.key, res)
	}
	base, err := l.replyBase(now, reply)
	if err != nil {
		return replyError("hold", c.key, res)
	}
	for j, i := range c.idx {
		waitNS, ok1 := reply[2+2*j].(int64)
		seq, ok2 := reply[3+2*j].(int64)
		origin, ok3 := reply[2+2*m+w*j].(int64)
		got, aerr := parseAmounts(reply[3+2*m+w*j : 2+2*m+w*(j+1)])
		if !ok1 || !ok2 || !ok3 || aerr != nil {
			return replyError("hold", c.key, res)
		}
		if seq == -1 {
			return fmt.Errorf("reserve: hold %q: %w", c.key, ErrQueueTooLong)
		}
		r := l.newReservation(c.key, c.spec, got, base, waitNS, seq)
		r.holdID = reqs[i].ID
		out[i] = &Grant{Reservation: r, Kept: true, Origin: Origin(origin)}
		if Origin(origin) != Redeemed {
			l.opts.Metrics.Reserved(c.key, c.spec.units, got, time.Duration(max(waitNS, 0)), false)
		}
	}
	return nil
}

// staleAfter is HoldOptions.StaleAfter for a request.
func (h *Holds) staleAfter(s *spec, amounts []float64) time.Duration {
	if h.opts.StaleAfter > 0 {
		return h.opts.StaleAfter
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
