package reserve

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// MaxHoldBatch is the most holders one script call reserves for. Hold splits
// longer runs into several calls, sent together in one pipeline, so that no
// single script keeps Redis busy for long (a call of this size runs in about a
// millisecond).
const MaxHoldBatch = 500

// A HoldRequest asks for a slot for holder ID.
type HoldRequest struct {
	ID string
	Permits
}

var holdScript = redis.NewScript(lua.Hold)

// Hold reserves a slot for each request and records it for the request's ID,
// so that Claim with that ID later hands the slot over instead of reserving
// again (a job enqueued for its slot). It returns one Claim per request, in
// order, each with Held set.
//
// Requests on one key get slots in their order, as if reserved one after the
// other. All of them cost one Redis round trip: requests are grouped by key
// and Limit, each group is sent as script calls of at most MaxHoldBatch
// holders, and the calls go in one pipeline (plus a script load after Redis
// has lost its script cache).
//
// An ID that already holds a live slot on its key keeps it (Claim.FromHold),
// so Hold may be repeated after a failure without reserving twice. If Hold
// fails, some groups may have been reserved; their holds expire unused.
func (l *Limiter) Hold(ctx context.Context, reqs []HoldRequest, opts HoldOptions) ([]*Claim, error) {
	staleUS, err := opts.staleUS()
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if err := validate(r.Key, r.Limit, r.n()); err != nil {
			return nil, err
		}
		if r.ID == "" {
			return nil, ErrEmptyID
		}
	}
	calls := l.holdCalls(reqs, staleUS)
	if len(calls) == 0 {
		return nil, nil
	}
	if err := l.runHoldCalls(ctx, calls); err != nil {
		return nil, err
	}
	out := make([]*Claim, len(reqs))
	for _, c := range calls {
		if err := l.parseHold(c, reqs, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// holdCall is one run of hold.lua: requests idx (all on one key and Limit).
type holdCall struct {
	key  string
	idx  []int
	keys []string
	args []any
	now  time.Time // the time passed to the script (client clock)
	cmd  *redis.Cmd
}

// holdCalls groups requests by key and Limit, in order of first appearance,
// and splits each group into calls of at most MaxHoldBatch holders.
func (l *Limiter) holdCalls(reqs []HoldRequest, staleUS int64) []*holdCall {
	type group struct {
		key string
		lim Limit
	}
	var order []group
	members := map[group][]int{}
	for i, r := range reqs {
		g := group{r.Key, r.Limit}
		if _, ok := members[g]; !ok {
			order = append(order, g)
		}
		members[g] = append(members[g], i)
	}
	var calls []*holdCall
	for _, g := range order {
		idx := members[g]
		for len(idx) > 0 {
			m := min(len(idx), MaxHoldBatch)
			chunk := idx[:m]
			idx = idx[m:]
			keys := make([]string, 0, m+1)
			keys = append(keys, l.RedisKey(g.key))
			ns := make([]any, 0, m+1)
			ns = append(ns, staleUS)
			for _, i := range chunk {
				keys = append(keys, l.holdKey(g.key, reqs[i].ID))
				ns = append(ns, reqs[i].n())
			}
			now, args := l.args(g.lim, ns...)
			calls = append(calls, &holdCall{key: g.key, idx: chunk, keys: keys, args: args, now: now})
		}
	}
	return calls
}

// runHoldCalls sends the calls as EVALSHA in one pipeline. Calls that fail
// with NOSCRIPT did not run, so they are sent again once the script is loaded.
func (l *Limiter) runHoldCalls(ctx context.Context, calls []*holdCall) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("reserve: hold: %w", err)
	}
	pending := calls
	for attempt := 0; ; attempt++ {
		pipe := l.rdb.Pipeline()
		for _, c := range pending {
			c.cmd = holdScript.EvalSha(ctx, pipe, c.keys, c.args...)
		}
		_, _ = pipe.Exec(ctx) // errors are read from each command
		var missing []*holdCall
		for _, c := range pending {
			if err := c.cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
				missing = append(missing, c)
			}
		}
		if len(missing) == 0 || attempt == 1 {
			return nil
		}
		if err := holdScript.Load(ctx, l.rdb).Err(); err != nil {
			return fmt.Errorf("reserve: hold: load script: %w", err)
		}
		pending = missing
	}
}

// parseHold reads one call's reply into out.
func (l *Limiter) parseHold(c *holdCall, reqs []HoldRequest, out []*Claim) error {
	res, err := c.cmd.Result()
	if err != nil {
		return scriptError("hold", c.key, err)
	}
	now := c.now
	if l.serverTime {
		now = l.clock.Now() // see reserve: never early
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 6*len(c.idx) {
		return replyError("hold", c.key, res)
	}
	for j, i := range c.idx {
		e := reply[6*j : 6*j+6]
		waitUS, ok1 := e[0].(int64)
		from, ok2 := e[1].(int64)
		n, ok3 := e[2].(int64)
		slotUS, ok4 := e[3].(string)
		slotFrac, ok5 := e[4].(string)
		seq, ok6 := e[5].(int64)
		if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
			return replyError("hold", c.key, res)
		}
		out[i] = &Claim{
			Reservation:  l.heldReservation(now, reqs[i].Permits, int(n), waitUS, slotUS, slotFrac, seq),
			Held:         true,
			FromHold:     from == 1,
			DroppedStale: from == 2,
		}
	}
	return nil
}
