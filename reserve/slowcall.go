package reserve

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// callCtx is the context of a patient call (see call): the caller's,
// under a cancel of the call's own, with the call's deadline and its
// timeout's end (callEnd). It replaces a context.WithTimeout, a
// context.WithValue and a time.AfterFunc per call: two timers armed and
// stopped around each call were a tenth of a cold key's client CPU (issue
// 43). Its deadline bounds the socket read (go-redis with
// ContextTimeoutEnabled); the Limiter's slowWatch notices the call when
// its timeout passes, and only then arms a timer that ends the call at
// its deadline (expire), as the WithTimeout's did.
type callCtx struct {
	context.Context // WithCancel of the caller's context
	cancel          context.CancelFunc
	key             string
	timeout         time.Duration
	due             time.Time // start + timeout: the call is slow from then
	end             time.Time // callEnd: the timeout's end, or the caller's deadline if sooner
	bound           time.Time // the call's deadline: start + probeBudget, or the caller's if sooner
	expired         atomic.Bool

	// Guarded by the slowWatch's mu.
	slow  bool          // its timeout passed (awaitSlowCall runs)
	ended chan struct{} // made when it became slow, closed when it returns
}

// Deadline is the call's bound.
func (c *callCtx) Deadline() (time.Time, bool) { return c.bound, true }

// Err reports DeadlineExceeded once the call was ended at its bound.
func (c *callCtx) Err() error {
	err := c.Context.Err()
	if err != nil && c.expired.Load() {
		return context.DeadlineExceeded
	}
	return err
}

// Value answers callEndKey with the timeout's end.
func (c *callCtx) Value(k any) any {
	if _, ok := k.(callEndKey); ok {
		return c.end
	}
	return c.Context.Value(k)
}

// expire ends the call at its bound.
func (c *callCtx) expire() {
	c.expired.Store(true)
	c.cancel()
}

// slowWatch is a Limiter's watch over its patient calls in flight: one
// timer, armed for the earliest timeout among them. A call that passes its
// timeout starts awaitSlowCall. Calls that end before their timeout, nearly
// all of them, only enter and leave a map: the timer fires about once per
// timeout while calls are made, and not at all once they stop.
type slowWatch struct {
	mu    sync.Mutex
	calls map[*callCtx]struct{}
	timer *time.Timer
	at    time.Time // when timer fires; zero: not armed
	slow  int64     // calls that passed their timeout, in all (tests)
}

// startCall makes the context of a patient call on key made now under ctx,
// and watches it until endCall.
func (l *Limiter) startCall(ctx context.Context, key string, start time.Time, timeout, budget time.Duration) *callCtx {
	c := &callCtx{key: key, timeout: timeout, due: start.Add(timeout), end: start.Add(timeout), bound: start.Add(budget)}
	if d, ok := ctx.Deadline(); ok {
		if d.Before(c.end) {
			c.end = d
		}
		if d.Before(c.bound) {
			c.bound = d
		}
	}
	c.Context, c.cancel = context.WithCancel(ctx)
	w := &l.slow
	w.mu.Lock()
	if w.calls == nil {
		w.calls = make(map[*callCtx]struct{})
	}
	w.calls[c] = struct{}{}
	if w.at.IsZero() || c.due.Before(w.at) {
		l.armSlowWatch(c.due)
	}
	w.mu.Unlock()
	return c
}

// endCall stops watching c, which returned, and releases what it holds.
func (l *Limiter) endCall(c *callCtx) {
	w := &l.slow
	w.mu.Lock()
	delete(w.calls, c)
	ended := c.ended
	w.mu.Unlock()
	if ended != nil {
		close(ended)
	}
	c.cancel()
}

// armSlowWatch sets the watch's timer to fire at t. l.slow.mu is held.
func (l *Limiter) armSlowWatch(t time.Time) {
	w := &l.slow
	w.at = t
	if w.timer == nil {
		w.timer = time.AfterFunc(time.Until(t), l.watchSlowCalls)
		return
	}
	w.timer.Reset(time.Until(t))
}

// watchSlowCalls runs when the watch's timer fires: every call whose
// timeout has passed is slow (awaitSlowCall), and the timer is armed again
// for the earliest timeout still ahead, if any.
func (l *Limiter) watchSlowCalls() {
	w := &l.slow
	now := time.Now()
	var slow []*callCtx
	var next time.Time
	w.mu.Lock()
	for c := range w.calls {
		switch {
		case c.slow:
		case !now.Before(c.due):
			c.slow, c.ended = true, make(chan struct{})
			slow = append(slow, c)
			w.slow++
		case next.IsZero() || c.due.Before(next):
			next = c.due
		}
	}
	w.at = time.Time{}
	if !next.IsZero() {
		l.armSlowWatch(next)
	}
	w.mu.Unlock()
	for _, c := range slow {
		go l.awaitSlowCall(c)
	}
}

// stopSlowWatch stops the watch's timer (Close): calls still in flight
// then end at their deadlines.
func (l *Limiter) stopSlowWatch() {
	w := &l.slow
	w.mu.Lock()
	if w.timer != nil {
		w.timer.Stop()
	}
	w.at = time.Time{}
	w.mu.Unlock()
}

// awaitSlowCall runs when a patient call (see call) passes its timeout:
// it starts the ping that decides whether Redis is slow or gone, and
// cancels the call when Redis is found gone (or was already). Until the
// call returns, it ends the call at its deadline.
func (l *Limiter) awaitSlowCall(c *callCtx) {
	bound := time.AfterFunc(time.Until(c.bound), c.expire)
	defer bound.Stop()
	l.confirm(c.key, &timeoutError{after: c.timeout, err: context.DeadlineExceeded})
	h := &l.health
	h.mu.Lock()
	v, gone := h.check, h.degraded
	h.mu.Unlock()
	if v != nil && !gone {
		select {
		case <-v.done:
			gone = !v.up
		case <-c.ended:
			return
		}
	}
	if gone {
		c.cancel()
		return
	}
	<-c.ended
}
