package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
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

// fairKey names a fair queue: the requests one call of the fair script can
// serve, in order.
type fairKey struct {
	key, sig string
	fairness
}

// fairQueue is the requests of one fairKey waiting in this process, in the
// order they came; the first inflight are in the pump's call.
type fairQueue struct {
	spec     *spec
	waiting  []*request
	inflight int
	// retry: while the pump sleeps, when it asks again (the head's turn
	// comes no sooner, nor that of any request behind it); zero otherwise.
	retry time.Time
}

// fairQueues are the Limiter's fair queues, each with its pump while it
// holds requests.
type fairQueues struct {
	mu sync.Mutex
	m  map[fairKey]*fairQueue
	// script is the fair script when not fairScript: a mutant of it, set
	// by the tests that check the fair rule's tests fail on it
	// (export_test.go).
	script *redis.Script
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
	fk := fairKey{key, s.sig, *f}
	qs := &l.fair
	qs.mu.Lock()
	if qs.m == nil {
		qs.m = make(map[fairKey]*fairQueue)
	}
	q, ok := qs.m[fk]
	if !ok {
		q = &fairQueue{spec: s}
		qs.m[fk] = q
		go l.pump(fk, q)
	}
	if !q.retry.IsZero() && !req.deadline.IsZero() && q.retry.After(req.deadline) {
		// The pump sleeps until after this request's maximum wait: its
		// turn, behind the queue's head, cannot come by then.
		wait := q.retry.Sub(req.since)
		qs.mu.Unlock()
		return nil, &WaitTooLongError{Wait: wait, MaxWait: maxWait, Band: TurnBinding}
	}
	q.waiting = append(q.waiting, req)
	qs.mu.Unlock()

	select {
	case res := <-req.done:
		return res.r, res.err
	case <-ctx.Done():
	}
	qs.mu.Lock()
	for i := q.inflight; i < len(q.waiting); i++ {
		if q.waiting[i] == req {
			q.waiting = append(q.waiting[:i], q.waiting[i+1:]...)
			qs.mu.Unlock()
			return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
		}
	}
	if !req.sent {
		req.abandoned = true // in the pump's call: a grant is canceled
		qs.mu.Unlock()
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
	}
	qs.mu.Unlock()
	res := <-req.done
	return res.r, res.err
}

// pump books fk's queue, from its head, until it is empty or the Limiter
// closes.
func (l *Limiter) pump(fk fairKey, q *fairQueue) {
	qs := &l.fair
	for {
		qs.mu.Lock()
		if len(q.waiting) == 0 {
			delete(qs.m, fk)
			qs.mu.Unlock()
			return
		}
		n := min(len(q.waiting), MaxBatch)
		q.inflight = n
		batch := append([]*request(nil), q.waiting[:n]...)
		queued := len(q.waiting)
		last := n == queued
		qs.mu.Unlock()

		results := l.fairBatch(l.loopCtx, fk, q.spec, batch, queued, last)

		var orphans []*Reservation
		var retry time.Time
		fm, _ := l.opts.Metrics.(FairMetrics)
		qs.mu.Lock()
		done := 0
		for i, req := range batch {
			res := results[i]
			var d *errDeferred
			if errors.As(res.err, &d) {
				retry = d.retry
				if fm != nil {
					fm.Deferred(fk.key, fk.tenant, fk.lane)
				}
				break
			}
			done++
			if fm != nil && res.r != nil {
				fm.Turn(fk.key, fk.tenant, fk.lane, max(l.clock.Now().Sub(req.since), 0))
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
		qs.mu.Unlock()
		for _, r := range orphans {
			r.cancelDetached()
		}
		if retry.IsZero() || len(rest) == 0 {
			// Ask again at once, or (nothing left) end: a request that
			// comes later asks for itself, and is told its turn.
			continue
		}
		err := l.sleeper.Coarse(l.loopCtx, l.localDeadline(retry))
		qs.mu.Lock()
		q.retry = time.Time{}
		qs.mu.Unlock()
		if err != nil {
			qs.mu.Lock()
			for _, req := range q.waiting {
				req.sent = true
				req.done <- result{nil, ErrClosed}
			}
			q.waiting = nil
			delete(qs.m, fk)
			qs.mu.Unlock()
			return
		}
	}
}

// fairBatch runs the fair script for reqs, fk's queue's head, and returns a
// result for each: a reservation, an error, or errDeferred for the first
// one not booked and every one after it. queued is the queue's length, and
// last says reqs are the whole queue. While Redis is unavailable, the local
// fallback books them within the horizon, in this process's order.
func (l *Limiter) fairBatch(ctx context.Context, fk fairKey, s *spec, reqs []*request, queued int, last bool) []result {
	if l.isDegraded() && !l.opts.FailClosed {
		return l.fairLocal(fk, s, reqs, last)
	}
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
		fmt.Sprintf("%d %s %d %s %s %d %d %d %s", fk.lane.index(), formatFloat(fk.weight), l.opts.FairHorizon.Microseconds(),
			formatFloat(l.opts.MinShare[fk.lane]), lastArg, fairGrace.Microseconds(), queued, age.Microseconds(), l.id),
		fk.tenant,
	}
	out := l.grantBatch(ctx, fk.key, s, reqs, fairArgs)
	if len(out) > 0 && out[0].err != nil && errors.Is(out[0].err, ErrUnavailable) && !l.opts.FailClosed {
		return l.fairLocal(fk, s, reqs, last)
	}
	return out
}

// fairKeys are the fair script's KEYS after the first three (see fair.lua).
var fairKeys = []string{":shadow", ":fair", ":fw:u", ":fw:n", ":fw:b", ":fp:u", ":fp:n", ":fp:b", ":weights", ":fx"}

// fairLocal books reqs on the local fallback, by the fair rule among this
// process's fair queues on the key (fairlocal.go), in order; the first not
// booked, and every one after, is deferred.
func (l *Limiter) fairLocal(fk fairKey, s *spec, reqs []*request, last bool) []result {
	out := make([]result, len(reqs))
	l.turns.mu.Lock()
	defer l.turns.mu.Unlock()
	now := l.clock.Now()
	t := l.turns.begin(fk, now, l.opts.FairHorizon, l.opts.MinShare[fk.lane])
	var deferred *errDeferred
	for i, req := range reqs {
		if deferred != nil {
			out[i].err = deferred
			t.kept = t.kept || req.deadline.IsZero() || !deferred.retry.After(req.deadline)
			continue
		}
		ok, h := t.gate(float64(s.duration(req.amounts)) / 1e3)
		if !ok {
			t.deferred, t.retry = true, h
			deferred = &errDeferred{retry: now.Add(time.Duration(h * 1e3))}
			out[i].err = deferred
			t.kept = t.kept || req.deadline.IsZero() || !deferred.retry.After(req.deadline)
			continue
		}
		maxWait := time.Duration(h * 1e3)
		if !req.deadline.IsZero() {
			maxWait = max(min(maxWait, req.deadline.Sub(l.clock.Now())), 0)
		}
		r, err := l.reserveLocal(fk.key, s, req.amounts, maxWait)
		var tooLong *WaitTooLongError
		if errors.As(err, &tooLong) {
			wait := max(tooLong.Wait-maxWait, time.Microsecond)
			t.deferred, t.retry = true, float64(wait)/1e3
			deferred = &errDeferred{retry: l.clock.Now().Add(wait)}
			out[i].err = deferred
			t.kept = t.kept || req.deadline.IsZero() || !deferred.retry.After(req.deadline)
			continue
		}
		if err == nil {
			t.booked()
		}
		out[i] = result{r, err}
	}
	t.finish(last)
	return out
}

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
