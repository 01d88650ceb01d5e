package reserve

import (
	"container/heap"
	"context"
	"sync"
	"time"
)

// DefaultPreciseWake is Options.PreciseWake's default.
const DefaultPreciseWake = 2 * time.Millisecond

// wakeStep is the longest the waker sleeps at once while anyone waits on it:
// a sleeper that joins with a slot earlier than the one the waker sleeps
// towards is woken at most this late.
const wakeStep = 250 * time.Microsecond

// A waker ends sleeps on time. Go's timers wake up to about a millisecond
// late: the runtime's poller sleeps in whole milliseconds. A sleeper sleeps
// on a timer until margin before its deadline, then hands over to the
// waker: one goroutine, started on first use and stopped by Close, that
// sleeps with the operating system's precise sleep (nanosleep, on a thread of
// its own, see wake_linux.go) until the earliest deadline, in steps of at most
// wakeStep, and wakes every sleeper whose deadline has come.
type waker struct {
	margin time.Duration // < 0: timers only

	mu      sync.Mutex
	q       wakeQueue
	running bool
	closed  bool
	kick    chan struct{} // buffered: something was added, or Close
	done    chan struct{} // closed when the loop has ended
}

func newWaker(margin time.Duration) *waker {
	return &waker{margin: margin, kick: make(chan struct{}, 1), done: make(chan struct{})}
}

// sleep sleeps for d of real time, or until ctx ends (then it returns
// ctx.Err()).
func (w *waker) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	deadline := time.Now().Add(d)
	coarse := d
	if w.margin >= 0 {
		coarse = d - w.margin
	}
	if coarse > 0 {
		t := time.NewTimer(coarse)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
	if time.Until(deadline) <= 0 {
		return nil
	}
	ch := w.add(deadline)
	if ch == nil { // closed: a timer it is
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err() // the entry stays queued; the waker drops it when due
	}
}

// add queues a wake-up at deadline and returns the channel closed then; nil
// once the waker is closed.
func (w *waker) add(deadline time.Time) <-chan struct{} {
	e := &wakeup{at: deadline, ch: make(chan struct{})}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	heap.Push(&w.q, e)
	if !w.running {
		w.running = true
		go w.loop()
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
	return e.ch
}

// loop wakes the sleepers as their deadlines come. It ends on close, once
// every sleeper queued has been woken.
func (w *waker) loop() {
	defer close(w.done)
	w.lockThread()
	for {
		w.mu.Lock()
		now := time.Now()
		for len(w.q) > 0 && !w.q[0].at.After(now) {
			close(heap.Pop(&w.q).(*wakeup).ch)
		}
		idle, closed := len(w.q) == 0, w.closed
		var d time.Duration
		if !idle {
			d = min(w.q[0].at.Sub(now), wakeStep)
		}
		w.mu.Unlock()
		switch {
		case idle && closed:
			return
		case idle:
			<-w.kick
		default:
			preciseSleep(d)
		}
	}
}

// close stops the loop once the sleepers queued are woken; later sleeps use
// timers only.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	running := w.running
	w.mu.Unlock()
	if !running {
		return
	}
	select {
	case w.kick <- struct{}{}:
	default:
	}
	<-w.done
}

type wakeup struct {
	at time.Time
	ch chan struct{}
}

// wakeQueue is a min-heap of wake-ups by deadline (container/heap).
type wakeQueue []*wakeup

func (q wakeQueue) Len() int           { return len(q) }
func (q wakeQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q wakeQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *wakeQueue) Push(x any)        { *q = append(*q, x.(*wakeup)) }
func (q *wakeQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	return e
}
