package reserve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var reserveScript = redis.NewScript(lua.Reserve)

// Reserve is ReserveN(ctx, Single(key, lim, 1)).
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit) (*Reservation, error) {
	s, amounts, err := l.single(key, lim, 1)
	if err != nil {
		return nil, err
	}
	return l.reserve(ctx, names.OpReserve, key, s, amounts, nil, -1)
}

// ReserveN reserves req's cost on its key and returns the reservation,
// whose Delay says how long to wait before spending it: one slot, the
// earliest at which every band of req.Policy can take its unit's amount,
// reserved on all of them in one atomic step. It never refuses because of
// the wait's length (x/time/rate's ReserveN; see TryReserveN), short of a
// queue over 30 years long (ErrQueueTooLong). Every unit the policy charges
// must be in req.Cost (0 to charge nothing), and no amount may exceed the
// burst or N of a band charging it.
//
// A fair request (one naming a Tenant or a Lane) is booked in its turn:
// ReserveN returns once it is, within the booking horizon of now (see
// Options.FairHorizon), so its Delay is short and its wait was spent
// before; behind a backlog of plain requests on the key, which book with
// no horizon, it is booked at its next ask in its turn wherever its slot
// lies, and its Delay is that backlog's.
func (l *Limiter) ReserveN(ctx context.Context, req Request) (*Reservation, error) {
	if sr, err := req.seatPart(); err != nil || sr != nil {
		if err != nil {
			return nil, err
		}
		return l.reserveSeats(ctx, req, sr, -1)
	}
	s, amounts, f, err := l.check(req)
	if err != nil {
		return nil, err
	}
	return l.reserve(ctx, names.OpReserve, req.Key, s, amounts, f, -1)
}

// TryReserveN is ReserveN, except that when the wait would be longer than
// maxWait it reserves nothing, on any band, and returns a
// *WaitTooLongError carrying the wait that would have been needed (Guava's
// tryAcquire(permits, timeout)). maxWait 0 takes the cost only if it is
// available now (see AllowN). A fair request is refused when its turn
// cannot come within maxWait, having waited for it as ReserveN does.
func (l *Limiter) TryReserveN(ctx context.Context, req Request, maxWait time.Duration) (*Reservation, error) {
	if maxWait < 0 {
		return nil, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	if sr, err := req.seatPart(); err != nil || sr != nil {
		if err != nil {
			return nil, err
		}
		return l.reserveSeats(ctx, req, sr, maxWait)
	}
	s, amounts, f, err := l.check(req)
	if err != nil {
		return nil, err
	}
	return l.reserve(ctx, names.OpReserve, req.Key, s, amounts, f, maxWait)
}

// Allow is AllowN(ctx, Single(key, lim, 1)).
func (l *Limiter) Allow(ctx context.Context, key string, lim Limit) (bool, error) {
	s, amounts, err := l.single(key, lim, 1)
	if err != nil {
		return false, err
	}
	return l.allow(ctx, key, s, amounts, nil)
}

// AllowN takes req's cost if it is available now and reports whether it
// did (x/time/rate's AllowN): a caller that drops or defers the call
// instead of waiting. It is TryReserveN with maxWait 0, without the
// Reservation. The error is for bad input and an unreachable Redis
// (FailClosed), never for a refusal.
func (l *Limiter) AllowN(ctx context.Context, req Request) (bool, error) {
	s, amounts, f, err := l.check(req)
	if err != nil {
		return false, err
	}
	return l.allow(ctx, req.Key, s, amounts, f)
}

func (l *Limiter) allow(ctx context.Context, key string, s *spec, amounts []float64, f *fairness) (bool, error) {
	_, err := l.reserve(ctx, names.OpAllow, key, s, amounts, f, 0)
	var tooLong *WaitTooLongError
	if errors.As(err, &tooLong) {
		// Not free now: no permit, or no share to take one from
		// (OutageBinding).
		return false, nil
	}
	return err == nil, err
}

// single checks and compiles a single-Limit call.
func (l *Limiter) single(key string, lim Limit, n int) (*spec, []float64, error) {
	if err := checkKey(key); err != nil {
		return nil, nil, err
	}
	s, err := l.specOf(lim)
	if err != nil {
		return nil, nil, err
	}
	if n < 1 {
		return nil, nil, fmt.Errorf("%w (got %d)", ErrInvalidN, n)
	}
	if n > lim.Burst {
		return nil, nil, fmt.Errorf("%w (n %d, burst %d)", ErrExceedsBurst, n, lim.Burst)
	}
	if n == 1 {
		return s, oneUnit, nil
	}
	return s, []float64{float64(n)}, nil
}

// oneUnit is the amounts of a cost of 1, the common case, made once: no
// code changes a reservation's amounts in place (Settle copies them).
var oneUnit = []float64{1}

// check checks and compiles req; a Request of a single Limit (Single) takes
// single's path, whose compiled Limits are cached.
func (l *Limiter) check(req Request) (*spec, []float64, *fairness, error) {
	f, err := req.fairness()
	if err != nil {
		return nil, nil, nil, err
	}
	var s *spec
	var amounts []float64
	if lim, n, ok := req.single(); ok {
		s, amounts, err = l.single(req.Key, lim, n)
	} else {
		s, amounts, err = req.check()
	}
	return s, amounts, f, err
}

// reserve reserves amounts on key, through the key's queues unless it is
// disabled, or in its turn when f is not nil (fair.go); maxWait < 0 means
// no maximum. An outage is never an error to a caller who can wait: when
// this Limiter has no share to pace on (see noShareError), it waits until
// it has one or Redis answers, within maxWait and ctx; a maximum that
// passes meanwhile is a refusal (OutageBinding), as any other maximum's.
func (l *Limiter) reserve(ctx context.Context, op, key string, s *spec, amounts []float64, f *fairness, maxWait time.Duration) (*Reservation, error) {
	wall := time.Now()
	start := wall // the Limiter's clock: one reading when it is the system's
	if l.clock != systemClockValue {
		start = l.clock.Now()
	}
	asked := maxWait
	// The maximum is the context's (Wait's) when its deadline comes no
	// later: the deadline then ends the wait, with its own error. Decided
	// once: a deadline passed whose context does not say so yet (its timer
	// late, on a loaded machine) is still the deadline's.
	dl, byDeadline := ctx.Deadline()
	byDeadline = byDeadline && maxWait > 0 && !dl.After(wall.Add(maxWait))
	var waited *noShareError // what the caller last waited for, if it did
	for {
		r, err := l.reserveOnce(ctx, op, key, s, amounts, f, maxWait)
		if err == nil {
			return r, nil
		}
		// (Declared here, not before the call: errors.As moves it to the
		// heap, an allocation per call that a grant need not pay.)
		var ns *noShareError
		if !errors.As(err, &ns) {
			if waited != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return r, waitedErr(err, waited)
			}
			return r, err
		}
		waited = ns
		wait := time.Duration(-1)
		switch {
		case byDeadline:
			if time.Until(dl) <= 0 {
				return nil, waitedErr(fmt.Errorf("reserve: %s %q: %w", op, key, context.DeadlineExceeded), ns)
			}
		case maxWait >= 0:
			if wait = maxWait - l.clock.Now().Sub(start); wait <= 0 {
				return nil, &WaitTooLongError{Wait: asked + shareRecheck, MaxWait: asked, Band: OutageBinding, cause: err}
			}
		}
		if werr := l.awaitShare(ctx, wait); werr != nil {
			if werr = fmt.Errorf("reserve: %s %q: %w", op, key, werr); errors.Is(werr, ErrClosed) {
				return nil, werr
			}
			return nil, waitedErr(werr, ns)
		}
		switch {
		case byDeadline:
			maxWait = max(time.Until(dl), 0) // wall-clock time, whatever Options.Clock is
		case maxWait > 0:
			maxWait = max(maxWait-l.clock.Now().Sub(start), 0)
			start = l.clock.Now()
		}
	}
}

// waitedErr is the error of a caller whose context ended (err, the
// context's error) while it waited for a share to pace on: it says what
// the caller waited for, as text only: the caller's error is its
// context's, not the outage's (errors.Is(err, ErrUnavailable) is false).
func waitedErr(err error, ns *noShareError) error {
	return fmt.Errorf("%w (it was waiting for a share to pace on: %s)", err, ns.Error())
}

// reserveOnce is one try of reserve.
func (l *Limiter) reserveOnce(ctx context.Context, op, key string, s *spec, amounts []float64, f *fairness, maxWait time.Duration) (*Reservation, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("reserve: %s %q: %w", op, key, err)
	}
	if f != nil {
		r, err := l.reserveFair(ctx, op, key, s, amounts, f, maxWait)
		if r != nil {
			r.fair = f
		}
		return r, err
	}
	// A hot key's caller is handed a slot of the key's lease, if it has a
	// live one, without a call to Redis; the request, and the channel a
	// call's result comes on, are made only for the callers who need a
	// call.
	probe := request{op: op, amounts: amounts, maxWait: maxWait}
	leasing := !l.opts.DisableCoalescing && l.leasable(s, &probe)
	if maxWait >= 0 || leasing {
		if ks := l.states.peek(key); ks != nil {
			ks.mu.Lock()
			// One reading for both, taken with the lock held: a caller
			// that waited for the lock judges the key as it is now.
			now := l.clock.Now()
			if maxWait >= 0 {
				if wait, band, refused := ks.refusedAt(s, amounts, maxWait, now); refused {
					ks.mu.Unlock()
					return nil, &WaitTooLongError{Wait: wait, MaxWait: maxWait, Band: band}
				}
			}
			if leasing {
				if res, ok := l.fromLeaseLocked(ks, s, &probe, now); ok {
					ks.mu.Unlock()
					return res.r, res.err
				}
			}
			ks.mu.Unlock()
		}
	}
	// (Its done channel is made only if it queues: reserveCoalesced.)
	req := &request{op: op, amounts: amounts, maxWait: maxWait}
	if !l.opts.DisableCoalescing {
		return l.reserveCoalesced(ctx, key, s, req)
	}
	res := l.reserveBatch(ctx, key, s, []*request{req})[0]
	return res.r, res.err
}

// awaitShare waits until what decides this Limiter's share may have
// changed (a heartbeat, a switch to or from local pacing), ctx ends, or
// wait passes (< 0: no bound): ErrUnavailable's callers who can wait wait
// here. It checks again at least every shareRecheck: some changes are only
// time passing (a change of the fleet's size grows old).
func (l *Limiter) awaitShare(ctx context.Context, wait time.Duration) error {
	d := shareRecheck
	if wait >= 0 {
		d = min(d, wait)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.shareChanged():
	case <-t.C:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.stop:
		return ErrClosed
	}
	if l.closed.Load() {
		return ErrClosed
	}
	return nil
}

// shareRecheck bounds how long a caller waiting for a share goes without
// checking again.
const shareRecheck = 250 * time.Millisecond
