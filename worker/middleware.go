package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/hold"
	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/inflight"
	"github.com/pacer-go/pacer/reserve"
)

// secondRounding is how early asynq may make a task due: it stores retry and
// ProcessAt times in whole seconds, rounded down.
const secondRounding = time.Second

// A Pacer paces the asynq tasks its Options.Pace selects, fleet-wide, on a
// reserve.Limiter. Its Middleware goes on the server's mux. It is safe for
// concurrent use.
type Pacer struct {
	l     *reserve.Limiter
	holds *hold.Book
	opts  Options // with defaults
	clock reserve.Clock
}

// New returns a Pacer on l, or an error wrapping ErrInvalidOptions when l is
// nil or opts cannot work.
func New(l *reserve.Limiter, opts Options) (*Pacer, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: nil Limiter", ErrInvalidOptions)
	}
	opts, err := opts.validate()
	if err != nil {
		return nil, err
	}
	holds, err := hold.New(l, hold.Options{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	return &Pacer{l: l, holds: holds, opts: opts, clock: l.Clock()}, nil
}

// Middleware paces next: mux.Use(p.Middleware).
//
// Before a paced handler runs, the middleware claims the task's slot: the
// slot kept for the task by ID if it has one (it was rescheduled, or
// enqueued for it by package scheduler), else a fresh one. Then:
//
//   - a slot within Options.MaxSleep (and within half the time left before
//     the task's deadline) is slept for (reserve.Reservation.Sleep: never
//     into a pause, never long after the slot), and the handler runs at it;
//   - a later slot is kept for the task, and the handler returns a
//     *RateLimitedError that reschedules the task Options.Lead before it,
//     without counting a retry (see IsFailure and RetryDelay);
//   - a task with no retries left, which asynq would archive on any error,
//     is never rescheduled: it sleeps until its slot, whatever MaxSleep
//     says. If even half the time before its deadline is too short, nothing
//     is reserved and an error wrapping *reserve.WaitTooLongError is
//     returned: asynq archives the task, as it would any task that cannot
//     finish before its deadline.
//
// A kept slot that comes back a little late (at most half a slot, see
// hold.Options.StaleAfter) is used at once; a later one, or one a
// pause now covers, is dropped and a fresh slot taken, so a backlog drains
// at the rate rather than as a burst. A slot nobody comes back for expires.
//
// With an in-flight band in the task's policy, the handler runs holding its
// seat on the band, taken once its slot has come, and given back when the
// handler returns: see the package doc, "In flight".
//
// Errors from Redis are returned wrapped, so asynq retries the task as for
// any failure. While Redis is unavailable, tasks are paced on the Limiter's
// local fallback instead (see reserve.Options).
func (p *Pacer) Middleware(next asynq.Handler) asynq.Handler {
	return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		return p.process(ctx, t, next)
	})
}

// task is a paced task being run; handlers reach it through the context
// (see Pause and Settle).
type task struct {
	p  *Pacer
	id string // "" when not run by an asynq server
	// req is the task's request on its policy's bands but the in-flight
	// band (no band: the policy is seats alone, there is no slot).
	req        reserve.Request
	seats      *reserve.Request     // the request for the task's seats (nil: no in-flight band)
	reschedule bool                 // the task has retries left, so it may be rescheduled
	r          *reserve.Reservation // the slot the handler runs at
}

// slotted reports whether tk has a slot to take: its policy has bands
// beside its in-flight band.
func (tk *task) slotted() bool { return len(tk.req.Policy) > 0 }

type taskKey struct{}

func (p *Pacer) process(ctx context.Context, t *asynq.Task, next asynq.Handler) error {
	req, ok := p.opts.Pace(t)
	if !ok {
		return next.ProcessTask(ctx, t)
	}
	id, hasID := asynq.GetTaskID(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	seats, rest, hasSeats, err := inflight.Split(req)
	if err != nil {
		return fmt.Errorf("worker: task %s on %q: %w", id, req.Key, err)
	}
	tk := &task{p: p, id: id, req: rest, reschedule: hasID && retried < maxRetry}
	if hasSeats {
		tk.seats = &seats
	}
	ctx = context.WithValue(ctx, taskKey{}, tk)
	for {
		var (
			r       *reserve.Reservation
			maxWait = p.maxWait(ctx, tk)
		)
		if tk.slotted() {
			if r, maxWait, err = p.slot(ctx, tk); err != nil {
				return err
			}
			if err := p.sleep(ctx, r, maxWait); err != nil {
				var tooLong *reserve.WaitTooLongError
				if tk.reschedule && errors.As(err, &tooLong) {
					// A pause came to cover the slot and the first slot after
					// it is further than the task may sleep: claim again, which
					// keeps a slot for it and reschedules it.
					continue
				}
				return err
			}
		}
		seat, err := p.takeSeats(ctx, tk, r, maxWait)
		if err != nil {
			var tooLong *reserve.WaitTooLongError
			if tk.reschedule && errors.As(err, &tooLong) {
				// As above: a pause came while it waited for its seat, or
				// the slot passed and the fresh one is too far.
				continue
			}
			return err
		}
		tk.r = r
		err = p.run(ctx, t, next, seat)
		var rl *RateLimitedError
		if !tk.reschedule && errors.As(err, &rl) && rl.Paused {
			// Pause kept a slot for a task that cannot be rescheduled:
			// sleep until it here and run the handler again. A policy of
			// seats alone has no slot a pause could move: wait the pause.
			if !tk.slotted() {
				if err := sleepCtx(ctx, rl.Slot.Sub(p.clock.Now())); err != nil {
					return err
				}
			}
			continue
		}
		return err
	}
}

// run runs the handler holding seat (nil: none), which goes back when the
// handler returns, fails or panics.
func (p *Pacer) run(ctx context.Context, t *asynq.Task, next asynq.Handler, seat *reserve.Reservation) error {
	defer inflight.Done(seat)
	return next.ProcessTask(ctx, t)
}

// slot claims the task's slot and returns it, with the longest the handler
// may sleep, when the handler should sleep until it, or a *RateLimitedError
// when the task is rescheduled to it.
func (p *Pacer) slot(ctx context.Context, tk *task) (*reserve.Reservation, time.Duration, error) {
	limit := p.limit(ctx)
	maxWait := p.maxWait(ctx, tk)
	holds := p.holds
	if tk.reschedule {
		// A rescheduled task comes back up to Lead + 1 s before its slot
		// (asynq rounds the retry time down to the second): it sleeps the
		// rest rather than leaving again.
		var err error
		holds, err = hold.New(p.l, hold.Options{Early: min(p.opts.Lead+secondRounding, limit)})
		if err != nil {
			return nil, 0, err
		}
	}
	key := tk.req.Key
	if tk.id == "" {
		r, err := p.l.TryReserveN(ctx, tk.req, maxWait)
		if err != nil {
			return nil, 0, fmt.Errorf("worker: reserve on %q: %w", key, err)
		}
		return r, maxWait, nil
	}
	if tk.req.Fair() {
		// Booked only in its tenant's turn: nothing is kept ahead for it.
		r, err := p.unheld(ctx, tk, maxWait)
		return r, maxWait, err
	}
	claim := holds.TryClaim
	if tk.reschedule {
		claim = holds.Claim
	}
	g, err := claim(ctx, tk.id, tk.req, maxWait)
	switch {
	case errors.Is(err, reserve.ErrUnavailable):
		r, err := p.unheld(ctx, tk, maxWait)
		return r, maxWait, err
	case err != nil && !tk.reschedule && errors.As(err, new(*reserve.WaitTooLongError)):
		return nil, 0, fmt.Errorf("worker: task %s has no retries left and its slot on %q comes after half the time left before its deadline: %w", tk.id, key, err)
	case err != nil:
		return nil, 0, fmt.Errorf("worker: task %s: %w", tk.id, err)
	case g.Kept:
		return nil, 0, p.rescheduled(tk, g.Reservation, false)
	}
	return g.Reservation, maxWait, nil
}

// limit is half the time left before ctx's deadline: the longest a
// handler sleeps.
func (p *Pacer) limit(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return max(0, deadline.Sub(p.clock.Now())/2)
	}
	return time.Duration(math.MaxInt64)
}

// maxWait is the longest tk's handler waits (for its slot, or its seat)
// before the task is rescheduled instead, or for a task that cannot be
// rescheduled before it fails.
func (p *Pacer) maxWait(ctx context.Context, tk *task) time.Duration {
	limit := p.limit(ctx)
	if !tk.reschedule {
		return limit
	}
	// A wait shorter than Lead is slept whatever MaxSleep says: a
	// reschedule could not bring the task back before its slot.
	return min(max(p.opts.MaxSleep, p.opts.Lead), limit)
}

// unheld paces tk with no slot kept for it: a slot (or, for a fair task,
// its turn) further than maxWait away reschedules the task to about then,
// and it asks again when it comes back. It serves two cases:
//   - a fair task (reserve.Request.Fair): it is booked only in its
//     tenant's turn, never ahead, so that a tenant's backlog holds no slots
//     the others' tasks could use;
//   - Redis unavailable: TryReserveN then uses the Limiter's local fallback
//     (at the key's share of the fleet), so tasks go on at a safe rate
//     instead of failing and burning retries. With
//     reserve.Options.FailClosed (or a Limiter that never reached Redis),
//     the error is returned, and asynq retries the task.
func (p *Pacer) unheld(ctx context.Context, tk *task, maxWait time.Duration) (*reserve.Reservation, error) {
	r, err := p.l.TryReserveN(ctx, tk.req, maxWait)
	var tooLong *reserve.WaitTooLongError
	if tk.reschedule && errors.As(err, &tooLong) {
		return nil, &RateLimitedError{
			Key:     tk.req.Key,
			Slot:    p.clock.Now().Add(tooLong.Wait),
			RetryIn: max(0, tooLong.Wait-p.opts.Lead),
		}
	}
	if err != nil {
		return nil, fmt.Errorf("worker: task %s: %w", tk.id, err)
	}
	return r, nil
}

// takeSeats takes tk's seats (tk.seats; nil: none, and it returns nil)
// once the handler has slept until its slot r (nil: the policy is seats
// alone), waiting in the key's queue at most maxWait. The seat goes back
// when the handler returns (run).
//
// A seat that does not come within maxWait gives the slot up, and a task
// that may be rescheduled is, without a seat or a slot kept for it: it
// returns a *RateLimitedError (InFlight) that brings it back MaxSleep
// later, to wait again at the back of the key's queue. A task that cannot
// be rescheduled fails with an error wrapping *reserve.WaitTooLongError
// (asynq archives it, as any task that cannot finish before its deadline;
// without a deadline it waits as long as it takes).
//
// Once it holds its seat, the task sleeps until its slot again
// (reserve.Reservation.Sleep): a pause made while it waited moves the slot
// after the pause, and a slot passed by more than reserve's MaxLateness
// takes a fresh one, so that tasks a hand-off of seats releases together
// keep the rate's spacing. A move further than maxWait gives the seat back
// and fails with an error wrapping *reserve.WaitTooLongError (the task is
// claimed again, and rescheduled). So does a seat the fleet dropped
// meanwhile (its Limiter's calls on the key went unanswered for several
// heartbeats) that does not come back within maxWait: the seat is checked
// once more before the handler runs.
func (p *Pacer) takeSeats(ctx context.Context, tk *task, r *reserve.Reservation, maxWait time.Duration) (*reserve.Reservation, error) {
	if tk.seats == nil {
		return nil, nil
	}
	var (
		seat *reserve.Reservation
		err  error
	)
	if maxWait >= time.Duration(math.MaxInt64)/2 {
		seat, err = p.l.ReserveN(ctx, *tk.seats)
	} else {
		seat, err = p.l.TryReserveN(ctx, *tk.seats, maxWait)
	}
	if err != nil {
		if r != nil {
			_ = r.Cancel(context.WithoutCancel(ctx))
		}
		var tooLong *reserve.WaitTooLongError
		if !errors.As(err, &tooLong) {
			return nil, fmt.Errorf("worker: task %s: seats on %q: %w", tk.id, tk.seats.Key, err)
		}
		if tk.reschedule {
			return nil, &RateLimitedError{
				Key:      tk.seats.Key,
				Slot:     p.clock.Now().Add(p.opts.MaxSleep),
				RetryIn:  p.opts.MaxSleep,
				InFlight: true,
			}
		}
		return nil, fmt.Errorf("worker: task %s: no seat on %q's in-flight band within %v: %w", tk.id, tk.seats.Key, maxWait, err)
	}
	if r != nil {
		hook.SeatsAsleep(seat) // not open until its Sleep, below
		if err := p.sleep(ctx, r, maxWait); err != nil {
			seat.Done()
			return nil, err
		}
	}
	// The seat's last check before the handler opens its call: seats the
	// fleet dropped while the task slept (its Limiter's calls on the key
	// went unanswered) are waited for again (reserve.Reservation.Sleep).
	// On an error Sleep gives the seat back.
	if err := p.sleep(ctx, seat, maxWait); err != nil {
		if r != nil {
			_ = r.Cancel(context.WithoutCancel(ctx))
		}
		return nil, err
	}
	// A wait for the seat again may end past the slot r slept to, later
	// than it may be used: r sleeps again, on a fresh slot (up to
	// reserve.MaxLateMoves in all), as a sleeper that woke that late does.
	if r != nil && hook.LateForSlot(r) {
		if err := p.sleep(ctx, r, maxWait); err != nil {
			seat.Done()
			return nil, err
		}
	}
	return seat, nil
}

// rescheduled is the error that reschedules tk to the slot kept for it.
func (p *Pacer) rescheduled(tk *task, r *reserve.Reservation, paused bool) *RateLimitedError {
	return &RateLimitedError{
		Key:     tk.req.Key,
		Slot:    r.Time(),
		RetryIn: max(0, r.Time().Sub(p.clock.Now())-p.opts.Lead),
		Paused:  paused,
	}
}

// sleep waits until r's slot (reserve.Reservation.Sleep: precisely, never
// into a pause, never long after it). A slot the sleep must move further
// than maxWait (a pause came) fails with an error wrapping
// *reserve.WaitTooLongError. If ctx ends first, r's cost is given back and
// the error wraps ctx.Err().
func (p *Pacer) sleep(ctx context.Context, r *reserve.Reservation, maxWait time.Duration) error {
	sctx := ctx
	if maxWait < time.Duration(math.MaxInt64)/2 {
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, time.Now().Add(max(maxWait, r.Delay())+time.Millisecond))
		defer cancel()
	}
	if err := r.Sleep(sctx); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			// Only the sleep's own bound ended: the slot moved too far.
			return fmt.Errorf("worker: sleeping until the slot on %q: %w", r.Key(), &reserve.WaitTooLongError{Wait: r.Delay(), MaxWait: maxWait})
		}
		return fmt.Errorf("worker: sleeping until the slot on %q: %w", r.Key(), err)
	}
	return nil
}

// Settle tells the fleet the actual cost of the running task's call, once
// it is known (the tokens a completion used): see reserve.Reservation.Settle.
// It does not end the call: the task's seats on an in-flight band go back
// when the handler returns (an amount for their unit is ignored unless
// another band charges it).
// ctx must be the handler's context. It fails with ErrNotPaced if the task
// is not paced.
func Settle(ctx context.Context, actual reserve.Cost) error {
	tk, ok := ctx.Value(taskKey{}).(*task)
	if ok && tk.r == nil && tk.seats != nil && !tk.slotted() {
		return nil // seats alone: given back whole when the handler returns
	}
	if !ok || tk.r == nil {
		return ErrNotPaced
	}
	if tk.seats != nil {
		actual = inflight.SettleCost(actual, *tk.seats, tk.req.Policy)
	}
	if err := tk.r.Settle(ctx, actual); err != nil {
		return fmt.Errorf("worker: settle %q: %w", tk.req.Key, err)
	}
	return nil
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
