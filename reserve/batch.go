package reserve

import (
	"context"
	"fmt"
	"sync"
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
	done     chan result // receives exactly one result; buffered

	abandoned bool // the caller left; a granted reservation is canceled (guarded by coalescer.mu)
	sent      bool // the result is in done (guarded by coalescer.mu)
}

type result struct {
	r   *Reservation
	err error
}

// batchKey groups the requests that one script call can serve: one key,
// one policy.
type batchKey struct {
	key string
	sig string
}

// queue is the state of one batchKey: whether a call is in flight and who
// waits for the next one. It exists only while busy.
type queue struct {
	spec    *spec
	pending []*request
}

// coalescer lets concurrent callers on one key share Redis round trips:
// while a call for the key is in flight, new callers queue; when it returns,
// the next call serves all of them at once, in the order they came. A caller
// who finds no call in flight makes its own at once, on its own goroutine and
// context: a lone caller pays nothing for coalescing.
type coalescer struct {
	mu     sync.Mutex
	queues map[batchKey]*queue // present while a call for the key is in flight
	leases leaseTable          // hot keys' leased slots (lease.go)
}

// reserveCoalesced is reserve through the coalescer.
func (l *Limiter) reserveCoalesced(ctx context.Context, key string, s *spec, req *request) (*Reservation, error) {
	c := &l.coalescer
	k := batchKey{key, s.sig}
	if res, ok := l.fromLease(k, s, req); ok {
		return res.r, res.err
	}

	gather := l.gatherFor(key, req.maxWait)
	c.mu.Lock()
	q, busy := c.queues[k]
	switch {
	case busy:
		req.since = l.clock.Now()
		q.pending = append(q.pending, req)
		c.mu.Unlock()
	case gather > 0:
		// The key's queue is deep: this caller's slot lies far ahead
		// anyway. Hold the call a little, so that the callers who come
		// meanwhile share it (see gatherFor).
		req.since = l.clock.Now()
		q = &queue{spec: s, pending: []*request{req}}
		c.queues[k] = q
		c.mu.Unlock()
		time.AfterFunc(gather, func() { l.drain(k) })
	default:
		// Lone caller: make the call now, with the caller's context. It
		// never leases: a lone caller has no queue.
		c.queues[k] = &queue{spec: s}
		c.mu.Unlock()
		l.runBatch(ctx, k, s, []*request{req}, false)
		l.handOff(k)
		res := <-req.done
		return res.r, res.err
	}

	select {
	case res := <-req.done:
		return res.r, res.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	for i, p := range q.pending {
		if p == req {
			// Not sent yet: leave the queue; nothing was reserved.
			q.pending = append(q.pending[:i], q.pending[i+1:]...)
			c.mu.Unlock()
			return nil, fmt.Errorf("reserve: %s %q: %w", req.op, key, ctx.Err())
		}
	}
	if !req.sent {
		// In flight: whoever delivers the result cancels a grant.
		req.abandoned = true
		c.mu.Unlock()
		return nil, fmt.Errorf("reserve: %s %q: %w", req.op, key, ctx.Err())
	}
	c.mu.Unlock()
	res := <-req.done // delivered as ctx ended: take it
	return res.r, res.err
}

// Gathering: a caller whose slot lies far ahead anyway (the latest slot
// Redis granted this Limiter on the key is at least gatherAhead away) holds
// its call for up to an eighth of that, at most maxGather, so that the
// callers who come meanwhile share one script call. A fleet that queues on
// a key at high rates then makes a call per gathered batch instead of one
// per caller; a lone caller, whose key has no queue, calls at once.
const (
	gatherAhead = 2 * time.Millisecond
	maxGather   = 500 * time.Microsecond
)

// gatherFor returns how long a caller on key, with maxWait (< 0: none),
// should hold its call; 0: not at all.
func (l *Limiter) gatherFor(key string, maxWait time.Duration) time.Duration {
	h := l.horizons.get(key)
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

// handOff is called when a call for k has returned: it marks k idle, or
// starts a goroutine that serves the callers who queued meanwhile.
func (l *Limiter) handOff(k batchKey) {
	c := &l.coalescer
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queues[k].pending) == 0 {
		delete(c.queues, k)
		return
	}
	go l.drain(k)
}

// drain serves k's queue, MaxBatch requests per call, until it is empty. Its
// calls are bounded by CallTimeout and belong to no caller: a caller whose
// context ends leaves the queue, or has its grant canceled. Callers a live
// lease can serve take its slots first; a batch of Options.LeaseQueue or
// more makes the key hot, and its call leases (lease.go).
func (l *Limiter) drain(k batchKey) {
	c := &l.coalescer
	for {
		c.mu.Lock()
		q := c.queues[k]
		served := 0
		for _, req := range q.pending {
			res, ok := l.fromLease(k, q.spec, req)
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
			delete(c.queues, k)
			c.mu.Unlock()
			return
		}
		m := min(len(q.pending), MaxBatch)
		batch := q.pending[:m:m]
		q.pending = append([]*request(nil), q.pending[m:]...)
		c.mu.Unlock()
		l.runBatch(context.Background(), k, q.spec, batch, l.opts.LeaseSpan > 0 && m >= l.opts.LeaseQueue)
	}
}

// runBatch reserves for reqs in one call, a lease when the key is hot, and
// delivers each its result.
func (l *Limiter) runBatch(ctx context.Context, k batchKey, s *spec, reqs []*request, hot bool) {
	var results []result
	if hot {
		results = l.leaseBatch(ctx, k, s, reqs)
	} else {
		results = l.reserveBatch(ctx, k.key, s, reqs)
	}
	c := &l.coalescer
	var orphans []*Reservation
	c.mu.Lock()
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
	c.mu.Unlock()
	for _, r := range orphans {
		r.cancelDetached()
	}
}
