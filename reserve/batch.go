package reserve

import (
	"context"
	"fmt"
	"time"
)

// Stage 1 of a call's way (see wait.go): forming a batch. A lone caller
// makes its call at once; callers that come while a call for the key is in
// flight queue for the next one, and a key whose queue is long leases a run
// of slots (lease.go) that later callers take without a call each.

// MaxBatch is the most requests one Redis call reserves for when concurrent
// callers share it (see Options.DisableCoalescing). Longer queues take
// several calls, one after the other; a call of this size keeps Redis busy
// for about a millisecond.
const MaxBatch = 256

// A request is one caller's ReserveN, TryReserveN or WaitN waiting for its turn
// in a batch.
type request struct {
	op      string
	amounts []float64     // the cost, in its spec's unit order
	maxWait time.Duration // < 0: no maximum
	since   time.Time     // when the request queued, on the Limiter's clock; zero if it did not
	// deadline is a fair request's (fair.go): it is refused when its turn
	// cannot come by then; zero: none. Its maxWait is not sent.
	deadline time.Time
	// done receives exactly one result; buffered. Made only for a request
	// that queues (a lone caller, or one a lease serves, has its result
	// returned to it).
	done chan result

	abandoned bool // the caller left; a granted reservation is canceled (guarded by the key's lock)
	sent      bool // the result is in done (guarded by the key's lock)
}

type result struct {
	r   *Reservation
	err error
}

// queue is the state of one key and policy's round trips (a field of the
// key's state, keys.go): that a call is in flight, and who waits for the
// next one. It exists only while a call is in flight.
type queue struct {
	spec    *spec
	pending []*request
}

// reserveCoalesced is reserve through the key's queues: while a call for
// the key and policy is in flight, new callers queue; when it returns, the
// next call serves all of them at once, in the order they came. A caller
// who finds no call in flight makes its own at once, on its own goroutine
// and context: a lone caller pays nothing for coalescing.
//
// The key's lease, if any, was tried first (reserveOnce).
func (l *Limiter) reserveCoalesced(ctx context.Context, key string, s *spec, req *request) (*Reservation, error) {
	gather := l.gatherFor(key, req.maxWait)
	ks := l.states.get(key)
	ks.mu.Lock()
	q, busy := ks.queues[s.sig]
	switch {
	case busy:
		req.since, req.done = l.clock.Now(), make(chan result, 1)
		q.pending = append(q.pending, req)
		ks.mu.Unlock()
	case gather > 0:
		// The key's queue is deep: this caller's slot lies far ahead
		// anyway. Hold the call a little, so that the callers who come
		// meanwhile share it (see gatherFor).
		req.since, req.done = l.clock.Now(), make(chan result, 1)
		q = &queue{spec: s, pending: []*request{req}}
		ks.setQueue(s.sig, q)
		ks.mu.Unlock()
		time.AfterFunc(gather, func() { l.drain(ks, s.sig) })
	default:
		// Lone caller: make the call now, with the caller's context, and
		// take its result here (no channel: nobody else delivers it). It
		// never leases: a lone caller has no queue.
		ks.setQueue(s.sig, &queue{spec: s})
		ks.mu.Unlock()
		res := l.reserveBatch(ctx, key, s, []*request{req})[0]
		l.handOff(ks, s.sig)
		return res.r, res.err
	}

	select {
	case res := <-req.done:
		return res.r, res.err
	case <-ctx.Done():
	}
	ks.mu.Lock()
	for i, p := range q.pending {
		if p == req {
			// Not sent yet: leave the queue; nothing was reserved.
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			ks.mu.Unlock()
			return nil, fmt.Errorf("reserve: %s %q: %w", req.op, key, ctx.Err())
		}
	}
	if !req.sent {
		// In flight: whoever delivers the result cancels a grant.
		req.abandoned = true
		ks.mu.Unlock()
		return nil, fmt.Errorf("reserve: %s %q: %w", req.op, key, ctx.Err())
	}
	ks.mu.Unlock()
	res := <-req.done // delivered as ctx ended: take it
	return res.r, res.err
}

// setQueue installs q as the key's queue for policy sig. ks.mu is held.
func (ks *keyState) setQueue(sig string, q *queue) {
	if ks.queues == nil {
		ks.queues = make(map[string]*queue)
	}
	ks.queues[sig] = q
}

// Gathering: a caller whose slot lies far ahead anyway (the key's queue, as
// the last reply showed it, reaches at least gatherAhead ahead) holds
// its call for up to an eighth of that, at most maxGather, so that the
// callers who come meanwhile share one script call. A fleet that queues on
// a key at high rates then makes a call per gathered batch instead of one
// per caller; a lone caller, whose key has no queue, calls at once.
const (
	gatherAhead = 2 * time.Millisecond
	maxGather   = 500 * time.Microsecond
)

// gatherFor returns how long a caller on key, with maxWait (< 0: none),
// should hold its call; 0: not at all. The key's queue is what the last
// reply showed (its state's latest bucket slot).
func (l *Limiter) gatherFor(key string, maxWait time.Duration) time.Duration {
	ks := l.states.peek(key)
	if ks == nil {
		return 0
	}
	ks.mu.Lock()
	h := ks.ahead
	ks.mu.Unlock()
	if h == 0 {
		return 0
	}
	now, _ := l.serverNow()
	ahead := time.Duration(h - now)
	if ahead < gatherAhead || (maxWait >= 0 && maxWait < ahead) {
		return 0
	}
	return min(maxGather, ahead/8)
}

// handOff is called when a call for the key's policy sig has returned: it
// marks the policy idle, or starts a goroutine that serves the callers who
// queued meanwhile.
func (l *Limiter) handOff(ks *keyState, sig string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if len(ks.queues[sig].pending) == 0 {
		delete(ks.queues, sig)
		return
	}
	go l.drain(ks, sig)
}

// drain serves the key's queue for policy sig, MaxBatch requests per call,
// until it is empty. Its calls are bounded by CallTimeout and belong to no
// caller: a caller whose context ends leaves the queue, or has its grant
// canceled. Callers a live lease can serve take its slots first; a batch
// of Options.LeaseQueue or more makes the key hot, and its call leases
// (lease.go).
func (l *Limiter) drain(ks *keyState, sig string) {
	for {
		ks.mu.Lock()
		q := ks.queues[sig]
		served := 0
		now := l.clock.Now()
		for _, req := range q.pending {
			res, ok := l.fromLeaseLocked(ks, q.spec, req, now)
			if !ok {
				break
			}
			req.sent = true
			req.done <- res
			served++
		}
		if served > 0 {
			q.pending = append([]*request(nil), q.pending[served:]...)
		}
		if len(q.pending) == 0 {
			delete(ks.queues, sig)
			ks.mu.Unlock()
			return
		}
		m := min(len(q.pending), MaxBatch)
		batch := q.pending[:m:m]
		q.pending = append([]*request(nil), q.pending[m:]...)
		ks.mu.Unlock()
		l.runBatch(context.Background(), ks, q.spec, batch, l.opts.LeaseSpan > 0 && m >= l.opts.LeaseQueue)
	}
}

// runBatch reserves for reqs in one call, a lease when the key is hot, and
// delivers each its result.
func (l *Limiter) runBatch(ctx context.Context, ks *keyState, s *spec, reqs []*request, hot bool) {
	var results []result
	if hot {
		results = l.leaseBatch(ctx, ks.name, s, reqs)
	} else {
		results = l.reserveBatch(ctx, ks.name, s, reqs)
	}
	var orphans []*Reservation
	ks.mu.Lock()
	for i, req := range reqs {
		res := results[i]
		if req.abandoned {
			if res.r != nil {
				orphans = append(orphans, res.r)
			}
			continue
		}
		req.sent = true
		req.done <- res
	}
	ks.mu.Unlock()
	for _, r := range orphans {
		r.cancelDetached()
	}
}
