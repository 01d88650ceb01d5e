package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sleep sleeps until the slot and returns when the cost may be spent, on
// Go's timer and then, for the last Options.PreciseWake, on a precise timer
// of the operating system (tens of µs after the slot on Linux, where Go's
// timer alone wakes up to a millisecond late).
//
// Sleep never returns into a pause: PreciseWake before the slot it checks
// the key (one read, shared by the sleepers of this Limiter), and if a
// Pause made by any process since the reservation covers the slot, it takes
// the first slot after the pause instead and sleeps on. Nor does it return
// much later than the slot: a sleeper that wakes more than
// Options.MaxLateness after it (a stalled process) takes a fresh slot, once,
// rather than fire together with callers that are on time. Time then
// returns the new slot. Either move respects ctx's deadline: when the new
// slot would come after it, Sleep returns an error wrapping
// *WaitTooLongError.
//
// If ctx ends first, Sleep cancels the reservation (its cost goes back, see
// Cancel; best effort, bounded by Options.CallTimeout) and returns
// ctx.Err(). A ctx that ends within the last PreciseWake is not noticed,
// and Sleep returns at the slot.
func (r *Reservation) Sleep(ctx context.Context) error {
	l := r.lim
	for {
		at := r.Time()
		deadline := l.localDeadline(at)
		check := deadline.Add(-l.opts.checkAt())
		if err := l.sleeper.Coarse(ctx, check); err != nil {
			r.cancelDetached()
			return err
		}
		if paused, err := l.pausedAfter(ctx, r); err != nil {
			return err
		} else if paused {
			l.opts.Metrics.Moved(r.key, MovedPause)
			if err := r.move(ctx); err != nil {
				return err
			}
			continue
		}
		l.sleeper.Fine(deadline)
		late := l.clock.Now().Sub(at)
		if m := r.maxLateness(); m >= 0 && late > m && !r.moved {
			r.moved = true
			l.opts.Metrics.Moved(r.key, MovedLate)
			if err := r.move(ctx); err != nil {
				return err
			}
			continue
		}
		return nil
	}
}

// localDeadline returns at, a time on the Limiter's clock, on the
// monotonic clock the sleepers use: at itself with the system clock. With
// another Clock, the Clock is read before time.Now, so that a goroutine
// descheduled between the two reads makes the deadline late, never early.
// (The expression time.Now().Add(at.Sub(clock.Now())) reads them the other
// way round: under load a caller woke up to milliseconds before its slot.)
func (l *Limiter) localDeadline(at time.Time) time.Time {
	if l.clock == systemClockValue {
		return at
	}
	cn := l.clock.Now()
	return time.Now().Add(at.Sub(cn))
}

// move gives r a fresh slot (its own has been paused over, or passed
// unused): the same cost on the same key, within ctx's deadline.
func (r *Reservation) move(ctx context.Context) error {
	l := r.lim
	maxWait := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		maxWait = max(0, time.Until(d))
	}
	r.mu.Lock()
	amounts := r.amounts
	hold := r.holdID
	r.mu.Unlock()
	n, err := l.reserve(ctx, "reserve", r.key, r.spec, amounts, maxWait)
	if err != nil {
		return fmt.Errorf("reserve: moving %q to a fresh slot: %w", r.key, err)
	}
	r.mu.Lock()
	r.at, r.slotNS, r.seq, r.local, r.holdID = n.at, n.slotNS, n.seq, n.local, ""
	r.mu.Unlock()
	_ = hold // a hold redeemed was deleted by its claim; the fresh slot is nobody's
	return nil
}

// pausedAfter reports whether a pause now in force on r's key covers r's
// slot. The read is shared by the Limiter's sleepers on the key: one that
// finished at most checkShare ago answers for everyone. A reservation of
// the local fallback is checked against the local pauses.
func (l *Limiter) pausedAfter(ctx context.Context, r *Reservation) (bool, error) {
	r.mu.Lock()
	loc, slotNS, at := r.local, r.slotNS, r.at
	r.mu.Unlock()
	if loc != nil {
		return l.local.Paused(r.key).After(at), nil
	}
	end, err := l.pauses.read(ctx, l, r.key)
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrClosed) {
		// No pause can be learned; the local fallback is blind too.
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return end > slotNS, nil
}

// checkShare is how old a pause read may be and still answer a sleeper.
const checkShare = 500 * time.Microsecond

// pauseChecks shares the reads of keys' pauses among sleepers.
type pauseChecks struct {
	mu sync.Mutex
	m  map[string]*pauseRead
}

type pauseRead struct {
	done  chan struct{}
	at    time.Time // when the read finished
	endNS int64     // the pause's end, Unix ns on the server's clock; 0: none
	err   error
}

// read returns the end of key's pause (server clock, Unix ns; 0 if none).
func (p *pauseChecks) read(ctx context.Context, l *Limiter, key string) (int64, error) {
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[string]*pauseRead)
	}
	pr := p.m[key]
	fresh := pr != nil && (pr.at.IsZero() || time.Since(pr.at) <= checkShare)
	if !fresh {
		pr = &pauseRead{done: make(chan struct{})}
		p.m[key] = pr
		p.mu.Unlock()
		pr.endNS, pr.err = l.readPause(ctx, key)
		p.mu.Lock()
		pr.at = time.Now()
		if len(p.m) > 1024 {
			for k, v := range p.m {
				if !v.at.IsZero() && time.Since(v.at) > checkShare {
					delete(p.m, k)
				}
			}
		}
		p.mu.Unlock()
		close(pr.done)
	} else {
		p.mu.Unlock()
	}
	select {
	case <-pr.done:
		return pr.endNS, pr.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// readPause reads the end of key's pause from its state: one GET.
func (l *Limiter) readPause(ctx context.Context, key string) (int64, error) {
	res, err := l.run(ctx, "check", key, func(ctx context.Context) (any, error) {
		v, err := l.rdb.Get(ctx, l.RedisKey(key)).Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		return v, err
	}, nil)
	if err != nil {
		return 0, err
	}
	return pauseEnd(res.(string))
}

// pauseEnd reads the pause's end from a state string (core.lua, either
// format): t in Unix µs, the pause in ns after t (with decimals), rounded
// up.
func pauseEnd(state string) (int64, error) {
	if state == "" {
		return 0, nil
	}
	st, err := parseState(state)
	if err != nil {
		return 0, fmt.Errorf("reserve: %w: %w", ErrWrongType, err)
	}
	return st.t*1000 + int64(math.Ceil(st.pauseNS)), nil
}
