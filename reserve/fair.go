package reserve

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Fair share and lanes (docs/design.md, "Fair share and lanes"). A fair
// request (one naming a Tenant or a Lane) is booked only when it is its
// tenant's turn and its slot lies within the booking horizon (or it is due:
// deferred once for the horizon, which plain requests may keep moving);
// until then it waits in its process, in a queue of its key, tenant and
// lane; the key's pump asks Redis for the heads of all of the key's queues
// in one call and sleeps until the first is told to ask again. The rule
// itself is in lua/fair.lua.

var fairScript = redis.NewScript(lua.Fair)

// A Lane is a request's priority. While a tenant of a higher lane waits, a
// lower lane is not booked (but see Options.MinShare).
type Lane int8

// The lanes, highest first.
const (
	Urgent Lane = 1
	Normal Lane = 0 // the default
	Batch  Lane = -1
)

func (ln Lane) String() string {
	switch ln {
	case Urgent:
		return "urgent"
	case Normal:
		return "normal"
	case Batch:
		return "batch"
	}
	return "Lane(" + strconv.Itoa(int(ln)) + ")"
}

// index is the lane's number in the fair script: 1 (Urgent) to 3 (Batch).
func (ln Lane) index() int { return 2 - int(ln) }

// maxTenant bounds a tenant's length (internal/layout).
const maxTenant = layout.MaxTenant

// fairGrace is how long after the time it was told to ask again a tenant
// counts as waiting when it does not: a process that stopped or died holds
// the others back no longer.
const fairGrace = 100 * time.Millisecond

// fairness is a fair request's tenant, lane and weight.
type fairness struct {
	tenant string
	lane   Lane
	weight float64
}

// fairness returns req's tenant, lane and weight, or nil when req is not
// fair.
func (req Request) fairness() (*fairness, error) {
	if !req.Fair() {
		return nil, nil
	}
	if req.Lane < Batch || req.Lane > Urgent {
		return nil, fmt.Errorf("%w: lane %d (Urgent, Normal or Batch)", ErrInvalidFairness, req.Lane)
	}
	if len(req.Tenant) > maxTenant {
		return nil, fmt.Errorf("%w: tenant of %d bytes (at most %d)", ErrInvalidFairness, len(req.Tenant), maxTenant)
	}
	w := req.Weight
	if w == 0 {
		w = 1
	}
	if !(w > 0) || math.IsInf(w, 0) || w > 1e6 || w < 1e-6 {
		return nil, fmt.Errorf("%w: weight %v (in [1e-6, 1e6]; 0 for 1)", ErrInvalidFairness, req.Weight)
	}
	return &fairness{tenant: req.Tenant, lane: req.Lane, weight: w}, nil
}

// fairTurn names a fair queue of a key: the requests one batch of the
// fair script serves, in order (one policy, tenant, lane and weight).
type fairTurn struct {
	sig string
	fairness
}

// fairQueue is the requests of one fairTurn waiting in this process, in
// the order they came (a field of the key's state, keys.go); the first
// inflight are in the pump's call.
type fairQueue struct {
	spec     *spec
	seq      uint64 // the order the key's queues were made in, for the pump's turns
	waiting  []*request
	inflight int
	// pass is the queue's turns as the pump reckons them (virtual
	// seconds): it advances by d / weight for each request booked, and a
	// new queue starts at the least of its lane's. It only chooses which
	// queues a call carries when it cannot carry all (fairSelect); the
	// rule itself is fair.lua's.
	pass float64
	sent time.Time // when a call last carried the queue; zero: never
	// retry: when the pump asks for this queue again (the head's turn
	// comes no sooner, nor that of any request behind it); zero: at its
	// next call.
	retry time.Time
}

// fairPump is the one goroutine that books a key's fair queues of one
// policy (a field of the key's state, keys.go): each of its calls of the
// fair script serves the heads of the queues it carries (fairSelect), one
// batch per queue, as FIFO requests share a call (batch.go).
type fairPump struct {
	kick chan struct{} // a request came for a queue without retry while the pump sleeps
	turn uint64        // which ready queue goes first in the next call
	seq  uint64        // the next queue's seq
}

// fairScriptOf is the Limiter's fair script: fairScript, or a mutant of it
// the tests set (export_test.go) to check that the fair rule's tests fail
// on it.
func (l *Limiter) fairScriptOf() *redis.Script {
	if l.fairMutant != nil {
		return l.fairMutant
	}
	return fairScript
}

// errDeferred is a fair request's result when it was not booked: it is to
// ask again at retry, on the Limiter's clock; local: the local fallback's
// store said so.
type errDeferred struct {
	retry time.Time
	local bool
}

func (e *errDeferred) Error() string { return "reserve: deferred to " + e.retry.String() }

// reserveFair reserves amounts for f on key: it queues the request for its
// pump and waits until it is booked, ctx ends, or (maxWait >= 0) its turn
// cannot come within maxWait.
func (l *Limiter) reserveFair(ctx context.Context, op, key string, s *spec, amounts []float64, f *fairness, maxWait time.Duration) (*Reservation, error) {
	// since: when it queued, for its turn's wait, and with a maxWait for
	// the time left of it: the script books within the horizon or that,
	// whichever is shorter (see grantBatch).
	req := &request{op: op, amounts: amounts, maxWait: -1, since: l.clock.Now(), done: make(chan result, 1)}
	if maxWait >= 0 {
		req.deadline = req.since.Add(maxWait)
		req.maxWait = maxWait
	}
	ft := fairTurn{s.sig, *f}
	ks := l.states.get(key)
	ks.mu.Lock()
	if ks.fair == nil {
		ks.fair = make(map[fairTurn]*fairQueue)
		ks.fairPumps = make(map[string]*fairPump)
	}
	p := ks.fairPumps[s.sig]
	if p == nil {
		p = &fairPump{kick: make(chan struct{}, 1)}
		ks.fairPumps[s.sig] = p
		go l.pump(ks, s.sig, p)
	}
	q, ok := ks.fair[ft]
	if !ok {
		q = &fairQueue{spec: s, seq: p.seq, pass: leastPass(ks, ft)}
		p.seq++
		ks.fair[ft] = q
	}
	if !q.retry.IsZero() && !req.deadline.IsZero() && q.retry.After(req.deadline) {
		// The queue waits until after this request's maximum wait: its
		// turn, behind the queue's head, cannot come by then.
		wait := q.retry.Sub(req.since)
		ks.mu.Unlock()
		return nil, &WaitTooLongError{Wait: wait, MaxWait: maxWait, Band: TurnBinding}
	}
	q.waiting = append(q.waiting, req)
	if q.retry.IsZero() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	ks.mu.Unlock()

	select {
	case res := <-req.done:
		return res.r, res.err
	case <-ctx.Done():
	}
	ks.mu.Lock()
	for i := q.inflight; i < len(q.waiting); i++ {
		if q.waiting[i] == req {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			ks.mu.Unlock()
			return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
		}
	}
	if !req.sent {
		req.abandoned = true // in the pump's call: a grant is canceled
		ks.mu.Unlock()
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
	}
	ks.mu.Unlock()
	res := <-req.done
	return res.r, res.err
}

// fairGroup is one queue's batch in a call of the fair script: its
// requests, from the queue's head, and the queue's length.
type fairGroup struct {
	ft     fairTurn
	q      *fairQueue
	reqs   []*request
	queued int
	last   bool // reqs are the whole queue
}

// pump books the key's fair queues of policy sig, from their heads, until
// none is left or the Limiter closes. It calls when the retry of a queue
// it would carry has come (or it has none), and each call serves the
// heads of the queues it carries (every queue, or those fairSelect
// chooses when the call's reach cannot book them all), at most MaxBatch
// requests in all, the queues taking turns at going first. A queue whose retry has not come is asked early, which the rule
// allows (it defers it again, telling it when to ask): its tenant's turn
// comes no sooner, and its own call would cost one more round trip,
// since a tenant deferred for its turn is told to ask again a slot
// interval later, and one deferred for the horizon when its slot enters
// it, and these drift apart. Between calls the pump sleeps until the
// first retry; a request for a queue without a retry wakes it, and
// anything that moves the key's pause (a pause learned, a resume) makes
// every queue's retry come.
func (l *Limiter) pump(ks *keyState, sig string, p *fairPump) {
	fm, _ := l.opts.Metrics.(FairMetrics)
	// wake is the key's wake channel as of the pump's last call: closed,
	// the key's pause moved after the call was sent (a pause learned, a
	// resume), even if it was heard before the call's reply came back,
	// which deferred its queues to the old pause.
	var wake <-chan struct{}
	for {
		ks.mu.Lock()
		select {
		case <-wake:
			for ft, q := range ks.fair {
				if ft.sig == sig {
					q.retry = time.Time{}
				}
			}
			wake = ks.wake
		default:
			if wake == nil {
				wake = ks.wake
			}
		}
		now := l.clock.Now()
		var ready []fairGroup
		var sp *spec        // the policy's, every queue's of the pump
		var first time.Time // the first retry to come
		due := false        // a queue's retry has come
		for ft, q := range ks.fair {
			if ft.sig != sig {
				continue
			}
			if len(q.waiting) == 0 {
				delete(ks.fair, ft)
				continue
			}
			ready = append(ready, fairGroup{ft: ft, q: q})
		}
		if len(ready) == 0 {
			delete(ks.fairPumps, sig)
			ks.mu.Unlock()
			return
		}
		// The queues' turns at going first: in the order they were made,
		// from the next one on.
		slices.SortFunc(ready, func(a, b fairGroup) int { return cmp.Compare(a.q.seq, b.q.seq) })
		start := int(p.turn % uint64(len(ready)))
		ready = append(ready[start:], ready[:start]...)
		carried := len(ready)
		ready, reach := l.fairSelect(ready)
		for _, g := range ready {
			if q := g.q; q.retry.IsZero() || !q.retry.After(now) {
				due = true
			} else if first.IsZero() || q.retry.Before(first) {
				first = q.retry
			}
		}
		if !due {
			ks.mu.Unlock()
			if !l.pumpSleep(ks, sig, p, first, wake) {
				return
			}
			continue
		}
		p.turn++
		quota := max(1, min(MaxBatch/len(ready), reach))
		var batch []*request
		groups := ready[:0]
		for _, g := range ready {
			if len(batch) == MaxBatch {
				break
			}
			q := g.q
			q.retry, q.sent = time.Time{}, now
			n := min(len(q.waiting), quota, MaxBatch-len(batch))
			q.inflight = n
			g.reqs = append([]*request(nil), q.waiting[:n]...)
			g.queued, g.last = len(q.waiting), n == len(q.waiting)
			sp = q.spec
			batch = append(batch, g.reqs...)
			groups = append(groups, g)
		}
		wake = ks.wake
		made := p.seq // the queues made from here on, during the call, ask at once
		ks.mu.Unlock()

		results := l.fairCall(l.loopCtx, ks.name, sp, groups, batch)

		var orphans []*Reservation
		var next time.Time // the first retry the call told
		ks.mu.Lock()
		now = l.clock.Now()
		for _, g := range groups {
			ft, q := g.ft, g.q
			res := results[:len(g.reqs)]
			results = results[len(g.reqs):]
			var retry, ask time.Time
			done := 0
			for i, req := range g.reqs {
				var d *errDeferred
				if errors.As(res[i].err, &d) {
					retry, ask = d.retry, d.retry
					if soon := now.Add(resumePoll); d.local && ask.After(soon) {
						// The store may hold what Redis no longer does (a
						// pause an operator resumed, heard by the event):
						// ask again soon, on Redis once it answers.
						ask = soon
					}
					if fm != nil {
						fm.Deferred(ks.name, ft.tenant, ft.lane)
					}
					break
				}
				done++
				if fm != nil && res[i].r != nil {
					fm.Turn(ks.name, ft.tenant, ft.lane, max(now.Sub(req.since), 0))
				}
				if req.abandoned {
					if res[i].r != nil {
						orphans = append(orphans, res[i].r)
					}
					continue
				}
				req.sent = true
				req.done <- res[i]
			}
			n := len(g.reqs)
			if done > 0 {
				q.pass += float64(done) * q.spec.duration(g.reqs[0].amounts).Seconds() / ft.weight
			}
			q.inflight = 0
			rest := q.waiting[:0]
			for i, req := range q.waiting {
				switch {
				case i < done:
				case i < n && req.abandoned:
				case !retry.IsZero() && !req.deadline.IsZero() && retry.After(req.deadline):
					// Its turn cannot come before its maximum wait is over.
					req.sent = true
					req.done <- result{nil, &WaitTooLongError{Wait: retry.Sub(now), MaxWait: req.maxWait, Band: TurnBinding}}
				default:
					rest = append(rest, req)
				}
			}
			clear(q.waiting[len(rest):])
			q.waiting = rest
			if len(rest) > 0 {
				q.retry = ask
			}
			if !ask.IsZero() && (next.IsZero() || ask.Before(next)) {
				next = ask
			}
		}
		if !next.IsZero() && len(groups) < carried {
			// The queues the call did not carry ask no sooner than the
			// first it told to ask again: before then a call would book
			// nothing more (a tenant deferred for its turn is told a
			// slot interval on, one for the horizon when its slot enters
			// it). A queue made since still asks at once.
			for ft, q := range ks.fair {
				if ft.sig == sig && q.seq < made && (q.retry.IsZero() || q.retry.Before(next)) {
					q.retry = next
				}
			}
		}
		ks.mu.Unlock()
		for _, r := range orphans {
			r.cancelDetached()
		}
	}
}

// fairSlack is how many queues beyond what its reach needs a pump's call
// carries (fairSelect): queues the pump's reckoning of the turns puts
// early by mistake (a tenant booked by other processes too, a stored
// weight), and queues carried so that their tenants keep waiting.
const fairSlack = 8

// fairSelect returns the queues a pump's call carries, of ready (in the
// order of their turns at going first, which it keeps), and the call's
// reach: the most requests it can book (fairReach). A call that carries
// every queue costs Redis the whole rule for each, though it books only
// what lies within the horizon: on one key at 200/s, 50 tenants' queues
// made each call take 2.8 ms of Redis, longer than a slot is allowed to
// be late (MaxLateness: most of its bookings were then moved). So a call
// carries the reach's worth of queues, by lane and by the pump's
// reckoning of the turns (fairQueue.pass), then the best of each other
// lane (its minimum share), then fairSlack / 2 of the queues carried
// least recently (so that their tenants stay waiting, and their figures
// current), up to fairSlack more in all. When the reach covers every queue,
// every one goes, as before.
func (l *Limiter) fairSelect(ready []fairGroup) ([]fairGroup, int) {
	reach := 1
	for _, g := range ready {
		reach = max(reach, l.fairReach(g.q.spec, g.q.waiting[0].amounts))
	}
	if len(ready) <= reach+fairSlack {
		return ready, reach
	}
	// The queues' places in ready, sorted: a group is large, and moving
	// groups took most of a pump's CPU on 50 queues (faircost).
	byTurn := make([]int, len(ready))
	for i := range byTurn {
		byTurn[i] = i
	}
	slices.SortStableFunc(byTurn, func(a, b int) int {
		ga, gb := &ready[a], &ready[b]
		if c := cmp.Compare(ga.ft.lane.index(), gb.ft.lane.index()); c != 0 {
			return c
		}
		return cmp.Compare(ga.q.pass, gb.q.pass)
	})
	take := make([]bool, len(ready))
	taken := 0
	add := func(i int) {
		if !take[i] {
			take[i] = true
			taken++
		}
	}
	for _, i := range byTurn[:reach] {
		add(i)
	}
	var lanes [3]bool // by Lane.index() - 1
	for _, i := range byTurn {
		if ln := ready[i].ft.lane.index() - 1; !lanes[ln] && taken < reach+fairSlack {
			lanes[ln] = true
			add(i)
		}
	}
	bySent := slices.Clone(byTurn[reach:])
	slices.SortStableFunc(bySent, func(a, b int) int { return ready[a].q.sent.Compare(ready[b].q.sent) })
	for _, i := range bySent {
		if taken >= reach+fairSlack/2 {
			break
		}
		add(i)
	}
	for _, i := range byTurn {
		if taken >= reach+fairSlack {
			break
		}
		add(i)
	}
	out := ready[:0]
	for i, g := range ready {
		if take[i] {
			out = append(out, g)
		}
	}
	return out, reach
}

// fairReach is the most requests of amounts on s one call of the fair
// script can book: what every band charged holds at once (a bucket's
// burst, a window's N) and refills within the horizon, one more for a
// slot on its edge; at least 1, at most MaxBatch. A stored limit may
// reach further: the queues left out then ask at the next call.
func (l *Limiter) fairReach(s *spec, amounts []float64) int {
	h := max(s.duration(amounts), l.opts.FairHorizon).Seconds()
	reach := math.Inf(1)
	for _, b := range s.bands {
		c := amounts[b.unit]
		if c <= 0 {
			continue
		}
		if b.bucket {
			reach = min(reach, (b.burst+h*b.rate)/c)
		} else {
			reach = min(reach, b.n/c)
		}
	}
	if !(reach < MaxBatch) {
		return MaxBatch
	}
	return max(1, int(math.Ceil(reach))+1)
}

// leastPass is where a new queue for ft starts in the pump's reckoning of
// the turns: at the least pass of its lane's queues on the key (a
// newcomer starts at the lane's virtual time in fair.lua). ks.mu is held.
func leastPass(ks *keyState, ft fairTurn) float64 {
	least, found := 0.0, false
	for o, q := range ks.fair {
		if o.sig == ft.sig && o.lane == ft.lane && (!found || q.pass < least) {
			least, found = q.pass, true
		}
	}
	return least
}

// pumpSleep sleeps until the first retry of the pump's queues comes, a
// request wakes it (kick), or the key's pause moves (wake closes: the
// pump then has every queue ask again). It sleeps on Go's timer, which
// wakes up to a millisecond late, never early: a queue asked before its
// retry would be deferred again, a call for nothing. When the Limiter closes, it fails
// every waiting request and reports false.
func (l *Limiter) pumpSleep(ks *keyState, sig string, p *fairPump, first time.Time, wake <-chan struct{}) bool {
	t := time.NewTimer(max(time.Until(l.localDeadline(first)), 0))
	defer t.Stop()
	select {
	case <-t.C:
	case <-p.kick:
	case <-wake:
	case <-l.loopCtx.Done():
		ks.mu.Lock()
		for ft, q := range ks.fair {
			if ft.sig != sig {
				continue
			}
			for _, req := range q.waiting {
				req.sent = true
				req.done <- result{nil, ErrClosed}
			}
			delete(ks.fair, ft)
		}
		delete(ks.fairPumps, sig)
		ks.mu.Unlock()
		return false
	}
	return true
}

// fairBatch runs the fair script for reqs, ft's queue's head on key, alone
// (see fairCall): queued is the queue's length, and last says reqs are the
// whole queue.
func (l *Limiter) fairBatch(ctx context.Context, key string, ft fairTurn, s *spec, reqs []*request, queued int, last bool) []result {
	return l.fairCall(ctx, key, s, []fairGroup{{ft: ft, reqs: reqs, queued: queued, last: last}}, reqs)
}

// fairCall runs the fair script for groups, the heads of queues on key
// (reqs: their requests, in order), in one call, and returns a result for
// each request: a reservation, an error, or errDeferred for the first of
// a group not booked and every one after it in the group. While Redis is
// unavailable, the same script books them on the local fallback's store,
// among this process's fair queues on the key.
func (l *Limiter) fairCall(ctx context.Context, key string, s *spec, groups []fairGroup, reqs []*request) []result {
	now := l.clock.Now()
	fairArgs := make([]any, 0, 2*len(groups))
	for i, g := range groups {
		ft := g.ft
		lastArg := "0"
		if g.last {
			lastArg = "1"
		}
		// The head's age and the queue's length are figures for operators
		// (admin.Status), not part of the rule.
		var age time.Duration
		if since := g.reqs[0].since; !since.IsZero() {
			age = max(now.Sub(since), 0)
		}
		spec := fmt.Sprintf("%d %s %d %s %s %d %d %d %s", ft.lane.index(), formatFloat(ft.weight), l.opts.FairHorizon.Microseconds(),
			formatFloat(l.opts.MinShare[ft.lane]), lastArg, fairGrace.Microseconds(), g.queued, age.Microseconds(), l.id)
		if i < len(groups)-1 {
			// Another group follows this one's requests (see fair.lua).
			spec += " " + strconv.Itoa(len(g.reqs))
		}
		fairArgs = append(fairArgs, spec, ft.tenant)
	}
	return l.grantEither(ctx, key, s, reqs, fairArgs)
}

// fairKeys are the fair script's KEYS after the first three (see fair.lua).
var fairKeys = []string{":shadow", ":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"}

// duration is how long a request of amounts takes on the band that takes
// longest to refill or renew it, at the whole rate.
func (s *spec) duration(amounts []float64) time.Duration {
	var d float64
	for _, b := range s.bands {
		c := amounts[b.unit]
		var x float64
		if b.bucket {
			x = c / b.rate
		} else {
			x = c * b.length.Seconds() / b.n
		}
		d = max(d, x)
	}
	return time.Duration(d * float64(time.Second))
}
