package pacehttp

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// Just-in-time slots for a learned rate (Options.Adaptive). A request
// reserved at a rate keeps that rate's slot: when the rate rises, a queue
// reserved before goes on at the old spacing, and when it falls, the queue
// is sent at the old rate into the provider's refusals. So the requests of
// an adaptive key wait their turn in their process, in order, and each
// reserves its slot only when that slot lies within gateHorizon of now,
// at the rate in force then: no request holds a slot more than
// gateHorizon ahead, and a change of rate reaches every request not yet
// sent within gateHorizon plus the rate's Refresh, in order, none losing
// its place (issue 24, item 1).

const (
	// gateHorizon is how far ahead of now a request on an adaptive key
	// may reserve its slot. Longer than a Redis round trip and the rate's
	// Refresh; short beside the seconds a cut must be followed in.
	gateHorizon = 200 * time.Millisecond
	// gateLead is how much of the rate a process keeps reserved ahead:
	// a key's turns in one process are max(1, rate x gateLead), so that
	// a process alone on a key keeps its rate while a Redis round trip
	// takes less than gateLead, and many processes poll little.
	gateLead = 5 * time.Millisecond
	// gatePoll bounds how long a request whose slot lay beyond the
	// horizon sleeps before it asks again (it sleeps until the slot is
	// half the horizon away, at most this): a rise of the rate, or a
	// resume of a pause, is seen within it.
	gatePoll = 500 * time.Millisecond
)

// gateKey is a gate's identity: a key, and for fair requests the tenant
// and lane, whose turns reserve keeps (a tenant's backlog must not hold
// another tenant's requests behind it in the process).
type gateKey struct {
	key, tenant string
	lane        reserve.Lane
}

// gates hold each adaptive key's requests in their process until their
// turn. A gate is dropped when nothing waits at it, so the map holds the
// keys with requests in flight.
type gates struct {
	mu sync.Mutex
	m  map[gateKey]*gate
}

// gate is one key's queue: at most width requests are past it (reserving
// or sleeping to their slot); the others wait in order.
type gate struct {
	width int
	busy  int
	queue []*turn
}

type turn struct {
	ready    chan struct{}
	admitted bool // set, under gates.mu, when ready is closed
}

// enter waits for a turn at k's gate, in order (front: before every
// waiting request, for a retry of a request that had its turn), and
// returns the function that gives it back. width is the gate's width now.
// If ctx ends first, it returns ctx.Err() and takes no turn.
func (gs *gates) enter(ctx context.Context, k gateKey, width int, front bool) (release func(), err error) {
	gs.mu.Lock()
	if gs.m == nil {
		gs.m = make(map[gateKey]*gate)
	}
	g := gs.m[k]
	if g == nil {
		g = &gate{}
		gs.m[k] = g
	}
	g.width = max(1, width)
	release = sync.OnceFunc(func() { gs.leave(k, g) })
	if g.busy < g.width && (len(g.queue) == 0 || front) {
		g.busy++
		gs.mu.Unlock()
		return release, nil
	}
	tn := &turn{ready: make(chan struct{})}
	if front {
		g.queue = append([]*turn{tn}, g.queue...)
	} else {
		g.queue = append(g.queue, tn)
	}
	gs.mu.Unlock()
	select {
	case <-tn.ready:
		return release, nil
	case <-ctx.Done():
	}
	gs.mu.Lock()
	if tn.admitted {
		gs.mu.Unlock()
		release() // admitted meanwhile: the turn goes to the next
		return nil, ctx.Err()
	}
	for i, q := range g.queue {
		if q == tn {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			break
		}
	}
	gs.drop(k, g)
	gs.mu.Unlock()
	return nil, ctx.Err()
}

// ahead returns how many requests wait at k's gate.
func (gs *gates) ahead(k gateKey) int {
	waiting, _ := gs.load(k)
	return waiting
}

// load returns how many requests wait at k's gate, and how many are past
// it.
func (gs *gates) load(k gateKey) (waiting, busy int) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if g := gs.m[k]; g != nil {
		return len(g.queue), g.busy
	}
	return 0, 0
}

// leave gives a turn back and admits the next waiting requests.
func (gs *gates) leave(k gateKey, g *gate) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g.busy--
	for g.busy < g.width && len(g.queue) > 0 {
		tn := g.queue[0]
		g.queue[0] = nil
		g.queue = g.queue[1:]
		tn.admitted = true
		close(tn.ready)
		g.busy++
	}
	gs.drop(k, g)
}

// drop forgets g once nothing waits at it (gs.mu held).
func (gs *gates) drop(k gateKey, g *gate) {
	if g.busy == 0 && len(g.queue) == 0 && gs.m[k] == g {
		delete(gs.m, k)
	}
}

// gateWidth is how many of a key's requests a process lets reserve at
// once at rate.
func gateWidth(rate float64) int {
	return int(min(256, max(1, math.Ceil(rate*gateLead.Seconds()))))
}

// reserveAdaptive reserves rt's slot on an adaptive key in its turn, at
// the rate in force when the slot lies within gateHorizon, and sleeps
// until it; rt.Policy becomes that rate's. A retry (front) goes before
// the requests waiting in the process. With ctx's deadline, a request
// whose slot cannot come before it fails at once, as reserve does, with
// an error wrapping *reserve.WaitTooLongError: the requests waiting ahead
// of it in the process at the rate now, or the slot the fleet's queue
// gives it, is too late. tr (if not nil) is told of the first slot
// (Reserved) and of each sleep (Sleeping: a cut while it slept reserves
// again).
func (t *Transport) reserveAdaptive(ctx context.Context, rt *Route, front bool, tr reserve.WaitTrace) (*reserve.Reservation, error) {
	rate, err := t.rate(rt.Key)
	if err != nil {
		return nil, err
	}
	k := gateKey{rt.Key, rt.Tenant, rt.Lane}
	now := rt.Policy[0].Limit
	if d, ok := ctx.Deadline(); ok {
		// The requests ahead of it in the process take a slot each first:
		// with the bucket full now, this one's slot comes no sooner than
		// the tokens for them and itself beyond the burst, at the rate now.
		waiting, busy := t.gates.load(k)
		least := time.Duration(float64(max(0, waiting+busy+1-now.Burst)) / now.Rate * float64(time.Second))
		if left := time.Until(d); least > left {
			return nil, &reserve.WaitTooLongError{Wait: least, MaxWait: max(0, left), Deadline: true}
		}
	}
	release, err := t.gates.enter(ctx, k, gateWidth(now.Rate), front)
	if err != nil {
		return nil, err
	}
	defer release()
	reported := false // tr has had Reserved: a slot after a cut is Sleeping only
	for {
		if lim, err := rate.Peek(ctx); err == nil {
			rt.Policy = lim.Policy()
		}
		maxWait := gateHorizon
		d, hasDeadline := ctx.Deadline()
		if hasDeadline {
			left := time.Until(d)
			if left <= 0 {
				return nil, context.DeadlineExceeded
			}
			maxWait = min(maxWait, left)
		}
		r, err := t.lim.TryReserveN(ctx, rt.request(), maxWait)
		var tooLong *reserve.WaitTooLongError
		if errors.As(err, &tooLong) {
			if hasDeadline && time.Now().Add(tooLong.Wait).After(d) {
				tooLong.Deadline = true
				return nil, err
			}
			// Ask again when the slot is half the horizon away (sooner if
			// the rate rises or a pause is resumed meanwhile): slots that
			// others take meanwhile may push it beyond the horizon again,
			// and then it sleeps at least half the horizon more, so a
			// turn asks at most every gateHorizon/2.
			if err := sleepCtx(ctx, min(gatePoll, max(time.Millisecond, tooLong.Wait-gateHorizon/2))); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		sleeping(tr, r, reported)
		reported = true
		if err := r.Sleep(ctx); err != nil {
			return nil, err
		}
		// A cut made while it slept (by a refusal anywhere in the fleet):
		// the slot was spaced for the rate before it. Reserve again, at
		// the rate now; a move of less than a tenth is not a cut.
		if lim, err := rate.Peek(ctx); err == nil && lim.Rate < rt.Policy[0].Limit.Rate*0.9 {
			_ = r.Cancel(context.WithoutCancel(ctx))
			continue
		}
		return r, nil
	}
}

// sleepCtx sleeps for d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
