package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pacer-go/pacer/internal/names"
)

// Stage 4 of a call's way (see wait.go): sleeping and redeeming.

// Sleep sleeps until the slot and returns when the cost may be spent, on
// Go's timer and then, for the last Options.PreciseWake, on a precise timer
// of the operating system (tens of µs after the slot on Linux, where Go's
// timer alone wakes up to a millisecond late).
//
// Sleep never returns into a pause: PreciseWake and a round trip to Redis
// before the slot it checks the key (one read, shared by the sleepers of
// this Limiter), and if a Pause made by any process since the reservation
// covers the slot (on Redis, or on this Limiter's local fallback while
// Redis is unavailable), it takes the first slot after the pause instead
// and sleeps on. A sleeper
// whose slot lies after a pause reads the key every few hundred
// milliseconds meanwhile: when an operator resumes the key
// (cmd/pacer resume), the slot moves earlier, as the resume moved the
// schedule. Nor does Sleep return much later than the slot: a sleeper that
// wakes more than Options.MaxLateness after it (a stalled process) takes a
// fresh slot rather than fire together with callers that are on time, and
// again if it is late for that one too, up to MaxLateMoves times. Nor
// does it fire on a slot the local fallback granted (Redis unavailable)
// when Redis answers again before its last check: the fleet
// paces on Redis from then on, and it takes a slot there (MovedBack). Nor
// does it fire on a slot of a state Redis has lost since the
// reservation (restarted empty, flushed: its check reads a state numbered
// before the one that granted the slot, or none), since Redis may have
// granted the same instant to others from the new state: it takes a fresh
// slot. Time then returns the new slot. Every move respects ctx's
// deadline: when the new slot would come after it, Sleep returns an error
// wrapping *WaitTooLongError.
//
// Nor does Sleep return on seats of an in-flight band that the fleet may
// have handed on: when Redis last showed them to be the call's over 1.25
// heartbeat intervals before (this Limiter's calls on the key went
// unanswered; the fleet drops a silent holder's seats after 1.5 or 3.5),
// it asks Redis whether they are still its own, and if not it waits for
// seats in the key's queue again, as a new call does, within ctx's
// deadline (a slot it then passes is moved as above). A reservation with
// seats is opened by Sleep, even one with nothing to sleep to; a caller
// that sleeps on its own gets no such check.
//
// If ctx ends first, Sleep cancels the reservation (its cost goes back, see
// Cancel; best effort, bounded by Options.CallTimeout) and returns
// ctx.Err(). A ctx that ends after that check (within the last
// PreciseWake and round trip) is not noticed, and Sleep returns at the
// slot. Whenever Sleep returns an error, the
// seats the reservation holds on an in-flight band go back (Done): the
// call is not made at this slot.
func (r *Reservation) Sleep(ctx context.Context) error {
	_, err := r.sleep(ctx, nil)
	if err != nil {
		// The call will not be made at this slot: its seats go back.
		r.Done()
	}
	return err
}

// sleep is Sleep, reporting to tr (nil: no Tracer); late is how long after
// its slot it woke.
func (r *Reservation) sleep(ctx context.Context, tr WaitTrace) (late time.Duration, err error) {
	l := r.lim
	if r.spec == nil {
		// Seats alone: nothing to sleep to.
		if err := ctx.Err(); err != nil {
			r.cancelDetached()
			return 0, err
		}
		if _, err := r.confirmSeats(ctx); err != nil {
			return 0, err
		}
		r.openSeats()
		return 0, nil
	}
	if tr != nil {
		tr.Sleeping(r, r.Delay())
	}
	defer l.awakeLocal(r)
	for {
		if r.backMove.Load() && l.awakeLocal(r) {
			// The local fallback granted the slot, and Redis answered
			// again before it: a slot on Redis instead (takeHandback).
			if err := r.moveFor(ctx, MovedBack, tr); err != nil {
				return 0, err
			}
			continue
		}
		r.mu.Lock()
		at, localID := r.at, r.localID
		r.mu.Unlock()
		deadline := l.localDeadline(at)
		check := deadline.Add(-l.checkLead())
		backWake := l.asleepLocal(r, localID)
		if r.afterPause() && l.clock.Now().Add(resumePoll).Before(check) {
			// A slot after a pause: look for a resume meanwhile, and wake
			// at once when one is heard of.
			poll := l.clock.Now().Add(resumePoll)
			if _, err := l.sleeper.CoarseOr(ctx, l.localDeadline(poll), l.keyWake(r.key)); err != nil {
				r.cancelDetached()
				return 0, err
			}
			if _, err := l.pausedAfter(ctx, r); err != nil {
				r.cancelDetached()
				return 0, err
			}
			continue
		}
		if backWake != nil {
			// A local grant: woken by the handback too.
			woken, err := l.sleeper.CoarseOr(ctx, check, backWake)
			if err != nil {
				r.cancelDetached()
				return 0, err
			}
			if woken {
				continue
			}
		} else if err := l.sleeper.Coarse(ctx, check); err != nil {
			r.cancelDetached()
			return 0, err
		}
		paused, err := l.pausedAfter(ctx, r)
		if err != nil {
			r.cancelDetached()
			return 0, err
		}
		if paused {
			if err := r.moveFor(ctx, MovedPause, tr); err != nil {
				return 0, err
			}
			continue
		}
		if r.lostSince() {
			// Redis lost the state that granted the slot (restarted empty,
			// flushed) and may have granted its instant to others since
			// (a process stopped across the restart resumes with such
			// sleepers): nobody else knows of this slot.
			if err := r.moveFor(ctx, MovedLost, tr); err != nil {
				return 0, err
			}
			continue
		}
		if !r.Time().Equal(at) {
			continue // a resume moved the slot earlier
		}
		if waited, err := r.confirmSeats(ctx); err != nil {
			r.cancelDetached()
			return 0, err
		} else if waited {
			continue // it asked Redis for its seats again: check the rest again
		}
		if l.awakeLocal(r) {
			// The last check: from here the slot is used as granted, and a
			// handback counts it in its floor; the handback came first.
			if err := r.moveFor(ctx, MovedBack, tr); err != nil {
				return 0, err
			}
			continue
		}
		l.sleeper.Fine(deadline)
		if l.pauseKnownCovers(r) {
			// A pause this Limiter learned of after the check (one of its
			// callers made it: another's 429) covers the slot.
			if err := r.moveFor(ctx, MovedPause, tr); err != nil {
				return 0, err
			}
			continue
		}
		late := l.clock.Now().Sub(at)
		if r.tooLate(late) {
			r.mu.Lock()
			r.lateMoves++
			r.mu.Unlock()
			if err := r.moveFor(ctx, MovedLate, tr); err != nil {
				return 0, err
			}
			continue
		}
		r.openSeats()
		return max(late, 0), nil
	}
}

// MaxLateMoves is how many times Sleep moves a reservation to a fresh slot
// for lateness (Options.MaxLateness) at most; it uses the last fresh slot
// however late it wakes for it.
const MaxLateMoves = 3

// tooLate reports whether r, late after its slot, may no longer use it
// (more than maxLateness) and has moved for lateness fewer than
// MaxLateMoves times: Sleep then moves it to a fresh slot. A slot placed
// late (its reply arrived late) is late by that much more: at a busy
// start, 19 callers of one key whose replies waited 75 ms for their
// processes fired 75 ms after their slots, together with callers on time
// (TestPlacedLateMoves). A fresh slot is judged as the first: a sleeper
// held past it too (its pause check waited on a frozen Redis, its process
// stalled again) moves again, where it once fired late, together with
// callers on time (testSleepLateAgain).
func (r *Reservation) tooLate(late time.Duration) bool {
	m := r.maxLateness()
	r.mu.Lock()
	placed, moves := r.placedLate, r.lateMoves
	r.mu.Unlock()
	return m >= 0 && late+placed > m && moves < MaxLateMoves
}

// lateForSlot reports whether r, slept to its slot, is now tooLate: a
// Sleep now would move it to a fresh slot. For a caller that waited on
// something else between r's Sleep and its call (hook.LateForSlot:
// pacehttp's Transport and package worker, whose seats' last check may
// wait for seats again, past r's slot).
func (r *Reservation) lateForSlot() bool {
	return r.tooLate(r.lim.clock.Now().Sub(r.Time()))
}

// confirmSeats makes sure, before the call opens, that the seats r holds
// on an in-flight band are still its own (Limiter.confirmSeats); waited
// reports that it asked Redis.
func (r *Reservation) confirmSeats(ctx context.Context) (waited bool, err error) {
	if r.seat == nil || r.seatDone.Load() {
		return false, nil
	}
	return r.lim.confirmSeats(ctx, r.seat)
}

// openSeats notes that the call opens on r's seats.
func (r *Reservation) openSeats() {
	if r.seat != nil {
		r.lim.openTicket(r.seat)
	}
}

// asleepLocal notes r, a grant of the local fallback's store whose caller
// sleeps in Sleep, among the key's local sleepers (localKey.asleep): at the
// handback when Redis answers again it takes a slot on Redis instead. It
// returns the key's wake channel, which the handback closes; nil when r is
// not such a grant (Redis granted it, or the store handed it back already:
// its slot is in the floor Redis was given). id is r's local id ("": a
// slot Redis granted).
func (l *Limiter) asleepLocal(r *Reservation, id string) <-chan struct{} {
	if id == "" && !r.noted.Load() {
		return nil
	}
	ks := l.states.get(r.key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	lk := ks.local
	if r.asleepAs != "" && r.asleepAs != id {
		if lk != nil && lk.asleep[r.asleepAs] == r {
			delete(lk.asleep, r.asleepAs)
		}
		r.asleepAs = ""
		r.noted.Store(false)
	}
	if id == "" || lk == nil || !lk.held {
		return nil
	}
	if _, ok := lk.grants[id]; !ok {
		return nil
	}
	if lk.asleep == nil {
		lk.asleep = map[string]*Reservation{}
	}
	lk.asleep[id] = r
	r.asleepAs = id
	r.noted.Store(true)
	return ks.wake
}

// awakeLocal takes r out of the key's local sleepers (asleepLocal): it is
// past its last check, or Sleep returns. It reports whether the handback
// told r to take a slot on Redis first, which it did if it ran before.
func (l *Limiter) awakeLocal(r *Reservation) bool {
	if !r.noted.Load() {
		return false
	}
	ks := l.states.get(r.key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if lk := ks.local; lk != nil && r.asleepAs != "" && lk.asleep[r.asleepAs] == r {
		delete(lk.asleep, r.asleepAs)
	}
	r.asleepAs = ""
	r.noted.Store(false)
	return r.backMove.Swap(false)
}

// keyWake returns the channel closed when key's pause next changes.
func (l *Limiter) keyWake(key string) <-chan struct{} {
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.wake
}

// resumePoll is how often a sleeper whose slot lies after a pause reads the
// key, to learn of a resume.
const resumePoll = 250 * time.Millisecond

// afterPause reports whether Sleep watches for a resume: r's slot lies
// after a pause that has not ended yet, as the key's state last showed it
// (a read that failed since does not end the pause: Redis frozen, the
// operator may resume it meanwhile), or a resume heard since moves r and
// r has not taken the move yet (pausedAfter takes it).
func (r *Reservation) afterPause() bool {
	r.mu.Lock()
	slot, seq, shifted, after := r.slotNS, r.seq, r.shifted, r.afterPaused
	r.mu.Unlock()
	if !after {
		return false
	}
	ks := r.lim.states.get(r.key)
	ks.mu.Lock()
	end, shift := ks.pause.endNS, ks.pause.shift
	ks.mu.Unlock()
	if shift.applies(seq) && shifted < shift.r {
		return true
	}
	if end == 0 || end > slot {
		return false
	}
	now, _ := r.lim.serverNow()
	return end > now
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

// moveFor moves r to a fresh slot (move) for reason why, counted in the
// metrics and told to tr (nil: no Tracer).
func (r *Reservation) moveFor(ctx context.Context, why string, tr WaitTrace) error {
	r.lim.opts.Metrics.Moved(r.key, why)
	if why == MovedLate || why == MovedPause {
		r.giveBackUnused(ctx)
	}
	if err := r.move(ctx); err != nil {
		return err
	}
	if tr != nil {
		tr.Moved(r, why)
	}
	return nil
}

// giveBackUnused gives back the window units of r's slot, which its caller
// will not fire on (it woke later than MaxLateness, or a pause covers it),
// before move takes a fresh slot: a settle to nothing, which gives a
// window its units back while it is the latest, and a bucket what later
// reservations have not built on (adjust.lua). Without it the fresh slot
// was charged a second unit, and on a window with none left it went to the
// next window: otelpacer's first Wait on a daily window of 1, 5 ms late
// on a loaded machine, slept a day (TestContractRedis/SleepLateWindow).
// Only a policy with a window band charged pays this call: a bucket's
// passed slot is rarely the last one granted, and then nothing comes back.
// A fair request's turns stay as they were (its fresh slot is off-turn).
// A give-back that fails leaves the units charged, which only costs
// capacity; with Redis unavailable it is made when Redis answers again.
// (A slot Redis lost, MovedLost, is not in its state; a local slot handed
// back, MovedBack, is in the floor Redis was given.)
func (r *Reservation) giveBackUnused(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spec == nil || r.state != live || r.spec.windowEnd(r.amounts, r.at).IsZero() {
		return
	}
	r.givingBack = true
	defer func() { r.givingBack = false }()
	_ = r.adjust(ctx, names.OpSettle, make([]float64, len(r.amounts)))
}

// move gives r a fresh slot (its own has been paused over, or passed
// unused): the same cost on the same key, within ctx's deadline. A fair
// request's turn was spent on the slot it gives up: the fresh slot is taken
// at the key's queue, not in a second turn, which would charge its tenant
// twice and make it wait a whole round of the others.
func (r *Reservation) move(ctx context.Context) error {
	l := r.lim
	maxWait := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		maxWait = max(0, time.Until(d))
	}
	r.mu.Lock()
	amounts := r.amounts
	r.mu.Unlock()
	n, err := l.reserve(ctx, names.OpReserve, r.key, r.spec, amounts, nil, maxWait)
	if l.opts.Logger.Enabled(ctx, slog.LevelDebug) {
		r.mu.Lock()
		from, seq := r.slotNS, r.seq
		r.mu.Unlock()
		to, toSeq := int64(0), int64(0)
		if n != nil {
			to, toSeq = n.slotNS, n.seq
		}
		l.opts.Logger.Debug("pacer: a sleeper moved to a fresh slot", "key", r.key, "from_ns", from, "seq", seq,
			"to_ns", to, "to_seq", toSeq, "local", n != nil && n.localID != "", "err", err, "limiter", l.id)
	}
	if err != nil {
		var tooLong *WaitTooLongError
		if errors.As(err, &tooLong) {
			tooLong.Deadline = true
		}
		return fmt.Errorf("reserve: moving %q to a fresh slot: %w", r.key, err)
	}
	// A hold redeemed was deleted by its claim; the fresh slot is nobody's.
	r.mu.Lock()
	r.at, r.slotNS, r.seq, r.localID, r.holdID, r.afterPaused, r.shifted = n.at, n.slotNS, n.seq, n.localID, "", n.afterPaused, 0
	r.placedLate = n.placedLate
	r.epoch = n.epoch
	r.offTurn = r.fair != nil
	r.band, r.source = n.band, n.source
	r.mu.Unlock()
	return nil
}

// pausedAfter reports whether a pause now in force on r's key covers r's
// slot: one on Redis (the read is shared by the Limiter's sleepers on the
// key), or one made on the local fallback (while Redis is unavailable, and
// until Redis has it). It also moves r earlier when the read shows that a
// resume moved r's reservation (see lua/resume.lua).
func (l *Limiter) pausedAfter(ctx context.Context, r *Reservation) (bool, error) {
	r.mu.Lock()
	slotNS, seq, local := r.slotNS, r.seq, r.localID != ""
	r.mu.Unlock()
	// Looked up once: a read in flight holds the key in the table
	// (keyState.idle), and nothing here sleeps.
	ks := l.states.get(r.key)
	end := l.localPauseEnd(ks)
	redisEnd := int64(-1) // not read
	checked := !local || !l.isDegraded()
	var err error
	if checked && !r.takeReplyCheck() {
		err = l.readPause(ctx, ks)
	}
	// The reply's check, or the read's: the key's state holds it. A read
	// that failed leaves the pause as last seen, and a resume the Limiter
	// heard of (the fleet's event) moves r all the same. One lock: on a
	// hot key every sleeper takes it.
	ks.mu.Lock()
	pe, shift := ks.pause.endNS, ks.pause.shift
	hasOwn := ks.own != nil
	ks.mu.Unlock()
	if checked {
		switch {
		case err == nil:
			end, redisEnd = max(end, pe), pe
		case errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
			// Redis cannot tell: the local fallback's pause stands.
		default:
			return false, err
		}
		if !local && shift.applies(seq) && r.shiftBy(shift) {
			slotNS -= shift.d
			l.opts.Logger.Debug("pacer: a resume moved a sleeper earlier", "key", r.key, "seq", seq,
				"to_ns", slotNS, "d_ns", shift.d, "resume", fmt.Sprintf("%d:%d", shift.q, shift.r), "limiter", l.id)
		}
	}
	if !hasOwn {
		return end > slotNS, nil // the common case: no clock to read
	}
	nowNS, _ := l.serverNow()
	ks.mu.Lock()
	own, s, again := ks.ownEnd(redisEnd, nowNS, slotNS)
	ks.mu.Unlock()
	if own > 0 {
		end = max(end, own)
		if again {
			// Redis lost a pause this Limiter made (restarted empty): the
			// provider's word still holds; tell the fleet again.
			go func() {
				ctx, cancel := context.WithTimeout(l.loopCtx, l.opts.CallTimeout)
				defer cancel()
				_ = l.pauseRedis(ctx, r.key, s, time.Duration(own-nowNS))
			}()
		}
	}
	return end > slotNS, nil
}

// shiftBy moves r earlier by a resume's shift, once: it reports whether it
// did.
func (r *Reservation) shiftBy(s resumeShift) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shifted >= s.r {
		return false
	}
	r.shifted = s.r
	r.at = r.at.Add(-time.Duration(s.d))
	r.slotNS -= s.d
	return true
}
