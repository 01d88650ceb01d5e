package reserve

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// MaxBatch is the most requests one Redis call reserves for when concurrent
// callers share it (see Options.DisableCoalescing). Longer queues take
// several calls, one after the other; a call of this size keeps Redis busy
// for about a millisecond.
const MaxBatch = 256

// A request is one caller's Reserve, TryReserve or Wait waiting for its turn
// in a batch.
type request struct {
	op      string
	n       int
	maxWait time.Duration // < 0: no maximum
	since   time.Time     // when the request queued, on the Limiter's clock; zero if it did not
	done    chan result   // receives exactly one result; buffered

	abandoned bool // the caller left; a granted reservation is canceled (guarded by coalescer.mu)
	sent      bool // the result is in done (guarded by coalescer.mu)
}

type result struct {
	r   *Reservation
	err error
}

// batchKey groups the requests that one script call can serve.
type batchKey struct {
	key string
	lim Limit
}

// queue is the state of one batchKey: whether a call is in flight and who
// waits for the next one. It exists only while busy.
type queue struct {
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
}

// reserveCoalesced is reserve through the coalescer.
func (l *Limiter) reserveCoalesced(ctx context.Context, op, key string, lim Limit, n int, maxWait time.Duration) (*Reservation, error) {
	c := &l.coalescer
	k := batchKey{key, lim}
	req := &request{op: op, n: n, maxWait: maxWait, done: make(chan result, 1)}

	c.mu.Lock()
	q, busy := c.queues[k]
	if !busy {
		// Lone caller: make the call now, with the caller's context.
		c.queues[k] = &queue{}
		c.mu.Unlock()
		l.runBatch(ctx, k, []*request{req})
		l.handOff(k)
		res := <-req.done
		return res.r, res.err
	}
	req.since = l.clock.Now()
	q.pending = append(q.pending, req)
	c.mu.Unlock()

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
			return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
		}
	}
	if !req.sent {
		// In flight: whoever delivers the result cancels a grant.
		req.abandoned = true
		c.mu.Unlock()
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, ctx.Err())
	}
	c.mu.Unlock()
	res := <-req.done // delivered as ctx ended: take it
	return res.r, res.err
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
// context ends leaves the queue, or has its grant canceled.
func (l *Limiter) drain(k batchKey) {
	c := &l.coalescer
	for {
		c.mu.Lock()
		q := c.queues[k]
		if len(q.pending) == 0 {
			delete(c.queues, k)
			c.mu.Unlock()
			return
		}
		m := min(len(q.pending), MaxBatch)
		batch := q.pending[:m:m]
		q.pending = append([]*request(nil), q.pending[m:]...)
		c.mu.Unlock()
		l.runBatch(context.Background(), k, batch)
	}
}

// runBatch reserves for reqs in one call and delivers each its result.
func (l *Limiter) runBatch(ctx context.Context, k batchKey, reqs []*request) {
	results := l.reserveBatch(ctx, k.key, k.lim, reqs)
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
		// Best effort, like Wait's cancel on a context's end.
		cctx, cancel := context.WithTimeout(context.Background(), l.opts.CallTimeout)
		_ = r.Cancel(cctx)
		cancel()
	}
}

// reserveBatch runs reserve.lua for reqs, all on k, and returns a result for
// each. When Redis is unavailable and the Limiter fails open, each request is
// served by the local fallback instead.
func (l *Limiter) reserveBatch(ctx context.Context, key string, lim Limit, reqs []*request) []result {
	out := make([]result, len(reqs))
	extra := make([]any, 0, 1+2*len(reqs))
	extra = append(extra, len(reqs))
	for _, req := range reqs {
		maxWaitUS := int64(-1)
		if req.maxWait >= 0 {
			maxWait := req.maxWait
			if !req.since.IsZero() {
				// Time spent queued counts against the maximum.
				maxWait = max(maxWait-l.clock.Now().Sub(req.since), 0)
			}
			maxWaitUS = maxWait.Microseconds()
		}
		extra = append(extra, req.n, maxWaitUS)
	}
	now, args := l.args(lim, extra...)
	op := reqs[0].op
	res, err := l.run(ctx, op, l.reserveScript, key, args)
	if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		for i, req := range reqs {
			r, err := l.reserveLocal(key, lim, req.n, req.maxWait)
			out[i] = result{r, err}
		}
		return out
	}
	if err == nil {
		err = l.parseBatch(now, key, lim, reqs, res, out)
	}
	if err != nil {
		for i := range out {
			out[i] = result{nil, err}
		}
	}
	return out
}

// parseBatch fills out from reserve.lua's reply.
func (l *Limiter) parseBatch(now time.Time, key string, lim Limit, reqs []*request, res any, out []result) error {
	reply, ok := res.([]any)
	if !ok || len(reply) != 5*len(reqs) {
		return replyError(reqs[0].op, key, res)
	}
	if l.serverTime {
		// The script measured the waits from its own TIME; counting them
		// from the reply's arrival never makes a slot early.
		now = l.clock.Now()
	}
	for i, req := range reqs {
		e := reply[5*i : 5*i+5]
		status, ok1 := e[0].(int64)
		waitUS, ok2 := e[1].(int64)
		if !ok1 || !ok2 {
			return replyError(req.op, key, res)
		}
		wait := durationUS(waitUS)
		switch status {
		case -1:
			out[i] = result{nil, fmt.Errorf("reserve: %s %q: %w", req.op, key, ErrQueueTooLong)}
			continue
		case 0:
			out[i] = result{nil, &WaitTooLongError{Wait: wait, MaxWait: req.maxWait}}
			continue
		}
		slotUS, ok1 := e[2].(string)
		slotFrac, ok2 := e[3].(string)
		seq, ok3 := e[4].(int64)
		if status != 1 || !ok1 || !ok2 || !ok3 {
			return replyError(req.op, key, res)
		}
		l.opts.Metrics.Reserved(key, req.n, wait, false)
		out[i] = result{r: &Reservation{
			lim:      l,
			key:      key,
			limit:    lim,
			n:        req.n,
			at:       now.Add(wait),
			slotUS:   slotUS,
			slotFrac: slotFrac,
			seq:      seq,
		}}
	}
	return nil
}
