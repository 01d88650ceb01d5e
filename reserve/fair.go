package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Fair share and lanes (docs/design.md, "Fair share and lanes"). A fair
// request (one naming a Tenant or a Lane) is booked only when it is its
// tenant's turn and its slot lies within the booking horizon; until then it
// waits in its process, in a queue of its key, tenant and lane, whose pump
// asks Redis for the queue's head requests and sleeps until it is told to
// ask again. The rule itself is in lua/fair.lua.

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

// fairTurn names a fair queue of a key: the requests one call of the fair
// script can serve, in order (one policy, tenant, lane and weight).
type fairTurn struct {
	sig string
	fairness
}

// fairQueue is the requests of one fairTurn waiting in this process, in
// the order they came (a field of the key's state, keys.go); the first
// inflight are in the pump's call.
type fairQueue struct {
	spec     *spec
	waiting  []*request
	inflight int
	// retry: while the pump sleeps, when it asks again (the head's turn
	// comes no sooner, nor that of any request behind it); zero otherwise.
	retry time.Time
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
// ask again at retry, on the Limiter's clock.
type errDeferred struct{ retry time.Time }

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
	}
	q, ok := ks.fair[ft]
	if !ok {
		q = &fairQueue{spec: s}
		ks.fair[ft] = q
		go l.pump(ks, ft, q)
	}
	if !q.retry.IsZero() && !req.deadline.IsZero() && q.retry.After(req.deadline) {
		// The pump sleeps until after this request's maximum wait: its
		// turn, behind the queue's head, cannot come by then.
		wait := q.retry.Sub(req.since)
		ks.mu.Unlock()
		return nil, &WaitTooLongError{Wait: wait, MaxWait: maxWait, Band: TurnBinding}
	}
	q.waiting = append(q.waiting, req)
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

// pump books ft's queue on the key, from its head, until it is empty or
// the Limiter closes. While it sleeps until its retry, anything that moves
// the key's pause (a pause learned, a resume) wakes it to ask again.
func (l *Limiter) pump(ks *keyState, ft fairTurn, q *fairQueue) {
	fm, _ := l.opts.Metrics.(FairMetrics)
	for {
		ks.mu.Lock()
		if len(q.waiting) == 0 {
			delete(ks.fair, ft)
			ks.mu.Unlock()
			return
		}
		n := min(len(q.waiting), MaxBatch)
		q.inflight = n
		batch := append([]*request(nil), q.waiting[:n]...)
		queued := len(q.waiting)
		last := n == queued
		ks.mu.Unlock()

		results := l.fairBatch(l.loopCtx, ks.name, ft, q.spec, batch, queued, last)

		var orphans []*Reservation
		var retry time.Time
		ks.mu.Lock()
		done := 0
		for i, req := range batch {
			res := results[i]
			var d *errDeferred
			if errors.As(res.err, &d) {
				retry = d.retry
				if fm != nil {
					fm.Deferred(ks.name, ft.tenant, ft.lane)
				}
				break
			}
			done++
			if fm != nil && res.r != nil {
				fm.Turn(ks.name, ft.tenant, ft.lane, max(l.clock.Now().Sub(req.since), 0))
			}
			if req.abandoned {
				if res.r != nil {
					orphans = append(orphans, res.r)
				}
				continue
			}
			req.sent = true
			req.done <- res
		}
		q.inflight = 0
		rest := q.waiting[:0]
		now := l.clock.Now()
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
			q.retry = retry
		}
		wake := ks.wake
		ks.mu.Unlock()
		for _, r := range orphans {
			r.cancelDetached()
		}
		if retry.IsZero() || len(rest) == 0 {
			// Ask again at once, or (nothing left) end: a request that
			// comes later asks for itself, and is told its turn.
			continue
		}
		_, err := l.sleeper.CoarseOr(l.loopCtx, l.localDeadline(retry), wake)
		ks.mu.Lock()
		q.retry = time.Time{}
		ks.mu.Unlock()
		if err != nil {
			ks.mu.Lock()
			for _, req := range q.waiting {
				req.sent = true
				req.done <- result{nil, ErrClosed}
			}
			q.waiting = nil
			delete(ks.fair, ft)
			ks.mu.Unlock()
			return
		}
	}
}

// fairBatch runs the fair script for reqs, ft's queue's head on key, and
// returns a result for each: a reservation, an error, or errDeferred for
// the first one not booked and every one after it. queued is the queue's
// length, and last says reqs are the whole queue. While Redis is
// unavailable, the same script books them on the local fallback's store,
// among this process's fair queues on the key.
func (l *Limiter) fairBatch(ctx context.Context, key string, ft fairTurn, s *spec, reqs []*request, queued int, last bool) []result {
	lastArg := "0"
	if last {
		lastArg = "1"
	}
	// The head's age and the queue's length are figures for operators
	// (admin.Status), not part of the rule.
	var age time.Duration
	if since := reqs[0].since; !since.IsZero() {
		age = max(l.clock.Now().Sub(since), 0)
	}
	fairArgs := []any{
		fmt.Sprintf("%d %s %d %s %s %d %d %d %s", ft.lane.index(), formatFloat(ft.weight), l.opts.FairHorizon.Microseconds(),
			formatFloat(l.opts.MinShare[ft.lane]), lastArg, fairGrace.Microseconds(), queued, age.Microseconds(), l.id),
		ft.tenant,
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
