package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/engine"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/redis/go-redis/v9"
)

// Stage 4 of a call's way (see wait.go): sleeping and redeeming.

// Sleep sleeps until the slot and returns when the cost may be spent, on
// Go's timer and then, for the last Options.PreciseWake, on a precise timer
// of the operating system (tens of µs after the slot on Linux, where Go's
// timer alone wakes up to a millisecond late).
//
// Sleep never returns into a pause: PreciseWake before the slot it checks
// the key (one read, shared by the sleepers of this Limiter), and if a
// Pause made by any process since the reservation covers the slot (on
// Redis, or on this Limiter's local fallback while Redis is unavailable), it
// takes the first slot after the pause instead and sleeps on. A sleeper
// whose slot lies after a pause reads the key every few hundred
// milliseconds meanwhile: when an operator resumes the key
// (cmd/pacer resume), the slot moves earlier, as the resume moved the
// schedule. Nor does Sleep return much later than the slot: a sleeper that
// wakes more than Options.MaxLateness after it (a stalled process) takes a
// fresh slot, once, rather than fire together with callers that are on
// time. Time then returns the new slot. Either move respects ctx's
// deadline: when the new slot would come after it, Sleep returns an error
// wrapping *WaitTooLongError.
//
// If ctx ends first, Sleep cancels the reservation (its cost goes back, see
// Cancel; best effort, bounded by Options.CallTimeout) and returns
// ctx.Err(). A ctx that ends within the last PreciseWake is not noticed,
// and Sleep returns at the slot.
func (r *Reservation) Sleep(ctx context.Context) error {
	_, err := r.sleep(ctx, nil)
	return err
}

// sleep is Sleep, reporting to tr (nil: no Tracer); late is how long after
// its slot it woke.
func (r *Reservation) sleep(ctx context.Context, tr WaitTrace) (late time.Duration, err error) {
	l := r.lim
	if tr != nil {
		tr.Sleeping(r, r.Delay())
	}
	for {
		at := r.Time()
		deadline := l.localDeadline(at)
		check := deadline.Add(-l.opts.checkAt())
		if poll := l.clock.Now().Add(resumePoll); poll.Before(check) && r.afterPause() {
			// A slot after a pause: look for a resume meanwhile.
			if err := l.sleeper.Coarse(ctx, l.localDeadline(poll)); err != nil {
				r.cancelDetached()
				return 0, err
			}
			if _, err := l.pausedAfter(ctx, r); err != nil {
				r.cancelDetached()
				return 0, err
			}
			continue
		}
		if err := l.sleeper.Coarse(ctx, check); err != nil {
			r.cancelDetached()
			return 0, err
		}
		paused, err := l.pausedAfter(ctx, r)
		if err != nil {
			r.cancelDetached()
			return 0, err
		}
		if paused {
			l.opts.Metrics.Moved(r.key, MovedPause)
			if err := r.move(ctx); err != nil {
				return 0, err
			}
			if tr != nil {
				tr.Moved(r, MovedPause)
			}
			continue
		}
		if !r.Time().Equal(at) {
			continue // a resume moved the slot earlier
		}
		l.sleeper.Fine(deadline)
		late := l.clock.Now().Sub(at)
		if m := r.maxLateness(); m >= 0 && late > m && !r.moved {
			r.moved = true
			l.opts.Metrics.Moved(r.key, MovedLate)
			if err := r.move(ctx); err != nil {
				return 0, err
			}
			if tr != nil {
				tr.Moved(r, MovedLate)
			}
			continue
		}
		return max(late, 0), nil
	}
}

// resumePoll is how often a sleeper whose slot lies after a pause reads the
// key, to learn of a resume.
const resumePoll = 250 * time.Millisecond

// afterPause reports whether r's slot lies after a pause that has not ended
// yet, as r last knew it.
func (r *Reservation) afterPause() bool {
	r.mu.Lock()
	end, slot := r.pauseEnd, r.slotNS
	r.mu.Unlock()
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
	r.mu.Unlock()
	n, err := l.reserve(ctx, "reserve", r.key, r.spec, amounts, r.fair, maxWait)
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
	r.at, r.slotNS, r.seq, r.localID, r.holdID, r.pauseEnd, r.shifted = n.at, n.slotNS, n.seq, n.localID, "", n.pauseEnd, 0
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
	end := l.localPauseEnd(r.key)
	redisEnd := int64(-1) // not read
	var resumed resumeShift
	if !local || !l.isDegraded() {
		pr, err := l.pauses.read(ctx, l, r.key)
		switch {
		case err == nil:
			end, redisEnd, resumed = max(end, pr.endNS), pr.endNS, pr.shift
			if !local && pr.shift.applies(seq) && r.shiftBy(pr.shift) {
				slotNS -= pr.shift.d
				l.opts.Logger.Debug("pacer: a resume moved a sleeper earlier", "key", r.key, "seq", seq,
					"to_ns", slotNS, "d_ns", pr.shift.d, "resume", fmt.Sprintf("%d:%d", pr.shift.q, pr.shift.r), "limiter", l.id)
			}
			r.mu.Lock()
			if r.pauseEnd > 0 && pr.endNS < r.pauseEnd {
				r.pauseEnd = pr.endNS // the pause ended early (a resume)
			}
			r.mu.Unlock()
		case errors.Is(err, ErrUnavailable), errors.Is(err, ErrClosed):
			// Redis cannot tell: the local fallback's pause stands.
		default:
			return false, err
		}
	}
	if !l.pauses.anyOwn.Load() {
		return end > slotNS, nil
	}
	nowNS, _ := l.serverNow()
	if own, s, again := l.pauses.ownEnd(r.key, redisEnd, nowNS, slotNS, resumed); own > 0 {
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

// checkShare is how old a pause read may be and still answer a sleeper.
const checkShare = 500 * time.Microsecond

// pauseChecks shares the reads of keys' pauses among sleepers, and keeps
// the pauses this Limiter made until they end: a Redis restarted empty
// forgets them, and the provider's 429 that asked for one still holds.
type pauseChecks struct {
	mu     sync.Mutex
	m      map[string]*pauseRead
	own    map[string]*ownPause
	anyOwn atomic.Bool // own has been written: sleepers without it skip ownEnd
}

// ownPause is a pause this Limiter made.
type ownPause struct {
	endNS      int64 // server clock, Unix ns
	seq        int64 // the key's last reservation number when it was made; -1: made locally
	spec       *spec
	reasserted bool // sent to Redis again after Redis forgot it
}

// mine records a pause this Limiter made on key, ending at endNS, when the
// key's last reservation was number seq (-1: on the local fallback).
func (p *pauseChecks) mine(key string, endNS, seq int64, s *spec) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own == nil {
		p.own = make(map[string]*ownPause)
	}
	if o := p.own[key]; o != nil && o.endNS > endNS {
		return
	}
	p.own[key] = &ownPause{endNS: endNS, seq: seq, spec: s}
	p.anyOwn.Store(true)
	if len(p.own) > 1024 {
		now := time.Now().UnixNano() // the server's clock, near enough to drop the ended
		for k, o := range p.own {
			if o.endNS < now-int64(time.Minute) {
				delete(p.own, k)
			}
		}
	}
}

// ownEnd returns the end of this Limiter's own pause on key if it ends
// after slotNS (0: none), and whether Redis should be told it again: the
// pause is still in force, Redis showed an earlier end and no resume since
// the pause (it lost the pause: restarted empty), and it has not been told
// yet. resumed is the state's resume record. A pause that has ended by now
// still covers a slot before its end: a sleeper whose check came late (Redis
// could not be read for a while, a stalled process) must not fire on it.
func (p *pauseChecks) ownEnd(key string, redisEnd, nowNS, slotNS int64, resumed resumeShift) (int64, *spec, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	o := p.own[key]
	if o == nil || o.endNS <= slotNS {
		return 0, nil, false
	}
	if resumed.r > 0 && resumed.r >= o.seq {
		// An operator resumed the key after this pause.
		delete(p.own, key)
		return 0, nil, false
	}
	again := o.endNS > nowNS && redisEnd >= 0 && redisEnd < o.endNS-int64(time.Millisecond) && !o.reasserted
	if again {
		o.reasserted = true
	}
	return o.endNS, o.spec, again
}

type pauseRead struct {
	done  chan struct{}
	at    time.Time // when the read finished
	endNS int64     // the pause's end, Unix ns on the server's clock; 0: none
	shift resumeShift
	err   error
}

// resumeShift is a resume's move (a state's "~s q:r d"): reservations
// numbered q+1 to r, d ns earlier.
type resumeShift struct{ q, r, d int64 }

func (s resumeShift) applies(seq int64) bool { return s.d > 0 && seq > s.q && seq <= s.r }

// resumeShift's r is 0 when the state has no resume record.

// read returns key's pause and resume shift as the state shows them. One
// read serves every sleeper of the Limiter that asks within checkShare of
// it; it runs on no caller's context (a caller whose context ends stops
// waiting for it, the others do not), bounded by CallTimeout.
func (p *pauseChecks) read(ctx context.Context, l *Limiter, key string) (*pauseRead, error) {
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
		go func() {
			pr.endNS, pr.shift, pr.err = l.readPause(l.loopCtx, key)
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
		}()
	} else {
		p.mu.Unlock()
	}
	select {
	case <-pr.done:
		return pr, pr.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// observe takes a reservation's reply as a read of key's pause: the state
// the script left shows the pause's end (endNS; 0: none) and the resume
// shift, as a GET would have, so sleepers that check within checkShare of
// it make no GET of their own. sent is when the call was sent (system
// clock). Only a reply to a call sent after the last read's answer arrived
// replaces it: a reply that may have run before that read would hide a
// pause the read showed.
func (p *pauseChecks) observe(key string, endNS int64, shift resumeShift, sent time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]*pauseRead)
	}
	if pr := p.m[key]; pr != nil && (pr.at.IsZero() || sent.Before(pr.at)) {
		return
	}
	done := make(chan struct{})
	close(done)
	p.m[key] = &pauseRead{done: done, at: time.Now(), endNS: endNS, shift: shift}
}

// learn records a pause this Limiter made (or read) on key: it ends at
// endNS (server clock), whatever an older read said.
func (p *pauseChecks) learn(key string, endNS int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[string]*pauseRead)
	}
	if pr := p.m[key]; pr != nil && !pr.at.IsZero() && pr.err == nil && pr.endNS >= endNS {
		return
	}
	done := make(chan struct{})
	close(done)
	p.m[key] = &pauseRead{done: done, at: time.Now(), endNS: endNS}
}

// readPause reads key's state: one GET.
func (l *Limiter) readPause(ctx context.Context, key string) (int64, resumeShift, error) {
	res, err := l.run(ctx, "check", key, func(ctx context.Context) (any, error) {
		v, err := l.rdb.Get(ctx, l.RedisKey(key)).Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		return v, err
	}, nil)
	if err != nil {
		return 0, resumeShift{}, err
	}
	state := res.(string)
	if state == "" {
		return 0, resumeShift{}, nil
	}
	if _, err := layout.ParseState(state); err != nil {
		return 0, resumeShift{}, fmt.Errorf("reserve: %w: %w", ErrWrongType, err)
	}
	return engine.PauseEnd(state), shiftOf(state), nil
}

// shiftOf reads a state's resume shift ("~s q:r d"), if any.
func shiftOf(state string) resumeShift {
	i := strings.Index(state, " ~s ")
	if i < 0 {
		return resumeShift{}
	}
	f := strings.Fields(state[i+4:])
	if len(f) < 2 {
		return resumeShift{}
	}
	q, r, ok := strings.Cut(f[0], ":")
	qv, err1 := strconv.ParseInt(q, 10, 64)
	rv, err2 := strconv.ParseInt(r, 10, 64)
	d, err3 := strconv.ParseInt(f[1], 10, 64)
	if !ok || err1 != nil || err2 != nil || err3 != nil {
		return resumeShift{}
	}
	return resumeShift{qv, rv, d}
}
