package reserve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
)

// The key's pause, as this Limiter knows it, is the pause of the state
// Redis last showed it (keyState.seen): every reply that carries the state,
// the fleet's events (events.go), and the reads sleepers make before their
// slots (one GET shared by the key's sleepers) all note the state there,
// newest by the state's own write time. A pause this Limiter made is also
// kept (own) until it ends: a Redis restarted empty forgets it, and the
// provider's 429 that asked for it still holds.

// checkShare is how old the key's state, as seen, may be and still answer a
// sleeper's check without a read.
const checkShare = 500 * time.Microsecond

// pauseView is what the key's seen state says of its pause, kept as it is
// noted (keyState.noteSeen), and the read that refreshes it.
type pauseView struct {
	endNS int64       // the end of the pause in force, server clock (Unix ns); 0: none
	shift resumeShift // the last resume's move (the state's "~s")
	err   error       // the last read's error: the pause is not known
	read  *pauseRead  // a read in flight
}

// pauseRead is one GET of the key's state, shared by the sleepers that
// need it: done is closed once the key's state holds its answer.
type pauseRead struct {
	done chan struct{}
	err  error
}

// resumeShift is a resume's move (a state's "~s q:r d"): reservations
// numbered q+1 to r, d ns earlier. r is 0 when the state has none.
type resumeShift struct{ q, r, d int64 }

func (s resumeShift) applies(seq int64) bool { return s.d > 0 && seq > s.q && seq <= s.r }

// ownPause is a pause this Limiter made.
type ownPause struct {
	endNS      int64 // server clock, Unix ns
	seq        int64 // the key's last reservation number when it was made; -1: made locally
	spec       *spec
	reasserted bool // sent to Redis again after Redis forgot it
}

// mine records a pause this Limiter made on the key, ending at endNS, when
// the key's last reservation was number seq (-1: on the local fallback).
// ks.mu is held.
func (ks *keyState) mine(endNS, seq int64, s *spec) {
	if ks.own != nil && ks.own.endNS > endNS {
		return
	}
	ks.own = &ownPause{endNS: endNS, seq: seq, spec: s}
}

// knownPause returns the end of the pause as last seen (server clock, Unix
// ns; 0 if none, never seen, or the last read failed). ks.mu is held.
func (ks *keyState) knownPause() int64 {
	if ks.seenAt.IsZero() || ks.pause.err != nil {
		return 0
	}
	return ks.pause.endNS
}

// checkLead is how long before a slot Sleep checks for a pause:
// PreciseWake, plus how far away Redis is (the shortest round trip of its
// calls lately, clockSync.low), so that the check's answer is back
// PreciseWake before the slot. (A slot is placed on the local clock late
// by the return trip of the reply that anchors the clock estimate, so the
// read reaches Redis about PreciseWake before the slot on Redis's clock, as
// on a Redis close by.) Before, the check was made PreciseWake before the
// slot whatever the round trip: on a Redis farther than PreciseWake and
// MaxLateness together, every sleeper woke late for its slot on the
// check's answer and moved, MaxLateMoves times, spending a slot each time
// (TestFarRedisChecksAhead).
func (l *Limiter) checkLead() time.Duration {
	return l.opts.checkAt() + l.sync.lowRTT()
}

// replyCovers marks r, a Wait's reservation about to sleep, as checked by
// the reply that granted it when the script ran checkLead (PreciseWake and
// a round trip) or less before the slot: a read sent when that reply
// arrives would come back after the check's moment, late for the slot on
// a Redis far away (it moved for lateness), and on a Redis close by the
// script ran about when the read would have. That reply showed the key's
// state as Redis held it then, and it is noted in the key's state
// (keyState.noteSeen) as a read's answer is. Sleep's first check then
// reads nothing: a Wait whose slot is now, on a cold key with no pause,
// makes one round trip however long the reply took to reach Sleep. A
// Reservation a caller sleeps on itself (Reserve, then Sleep) is not
// marked: its Sleep may come any time later.
func (l *Limiter) replyCovers(r *Reservation) {
	r.mu.Lock()
	r.replyChecked = r.ranNS > 0 && r.slotNS-r.ranNS <= int64(l.checkLead())
	r.mu.Unlock()
}

// pauseKnownCovers reports whether a pause this Limiter knows of, with no
// read, covers r's slot: one it made itself (keyState.own: a caller's 429,
// on Redis or the local engine) or one a reply or read showed it since.
// Sleep's last look, at the slot: a pause made after the check, PreciseWake
// and a round trip before the slot, is honoured by its maker's sleepers
// (TestSleepOwnPauseAfterCheck; before, the combination runner's seed 21,
// beside a CPU hog whose round trips made that lead over 10 ms, fired a
// sleeper 13.8 ms into its own process's pause). The other processes learn
// it at their checks. A local grant while the Limiter paces locally looks
// at its own pauses only, as pausedAfter does: the local engine's slots
// already lie after the Redis pause it was seeded with.
func (l *Limiter) pauseKnownCovers(r *Reservation) bool {
	ks := l.states.peek(r.key)
	if ks == nil {
		return false
	}
	r.mu.Lock()
	slotNS, local := r.slotNS, r.localID != ""
	r.mu.Unlock()
	seen := !local || !l.isDegraded()
	ks.mu.Lock()
	defer ks.mu.Unlock()
	end, _, _ := ks.ownEnd(-1, 0, slotNS)
	if seen {
		end = max(end, ks.knownPause())
	}
	return end > slotNS
}

// takeReplyCheck reports whether r's reply stands for this pause check
// (replyCovers), once.
func (r *Reservation) takeReplyCheck() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := r.replyChecked
	r.replyChecked = false
	return ok
}

// readPause makes sure the key's state (ks) holds its pause as Redis
// showed it at most checkShare ago: a state seen that recently, or a read.
// One read serves every sleeper of the Limiter on the key that asks
// meanwhile; it runs on no caller's context (a caller whose context ends
// stops waiting for it, the others do not), bounded by CallTimeout. The
// error is the read's, or ctx's.
func (l *Limiter) readPause(ctx context.Context, ks *keyState) error {
	ks.mu.Lock()
	if ks.pause.read == nil && !ks.seenAt.IsZero() && ks.pause.err == nil && time.Since(ks.seenAt) <= checkShare {
		ks.mu.Unlock()
		return nil
	}
	pr := ks.pause.read
	if pr == nil {
		pr = l.startRead(ks)
	}
	ks.mu.Unlock()
	select {
	case <-pr.done:
		return pr.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startRead starts a read of the key's state, which the key's state notes
// when it arrives. ks.mu is held.
func (l *Limiter) startRead(ks *keyState) *pauseRead {
	pr := &pauseRead{done: make(chan struct{})}
	ks.pause.read = pr
	go func() {
		sent := time.Now()
		state, err := l.getState(l.loopCtx, ks.name)
		ks.mu.Lock()
		if err == nil {
			ks.pause.err = nil
			ks.noteSeen(state, ks.stored, sent)
		} else {
			ks.pause.err = err
		}
		ks.pause.read = nil
		pr.err = err
		ks.mu.Unlock()
		close(pr.done)
	}()
	return pr
}

// ownEnd returns the end of this Limiter's own pause on the key if it ends
// after slotNS (0: none), and whether Redis should be told it again: the
// pause is still in force, Redis showed an earlier end (redisEnd >= 0) and
// no resume since the pause (it lost the pause: restarted empty), and it
// has not been told yet. A pause that has ended by now still covers a slot
// before its end: a sleeper whose check came late (Redis could not be read
// for a while, a stalled process) must not fire on it. ks.mu is held.
func (ks *keyState) ownEnd(redisEnd, nowNS, slotNS int64) (int64, *spec, bool) {
	o := ks.own
	if o == nil || o.endNS <= slotNS {
		return 0, nil, false
	}
	if s := ks.pause.shift; s.r > 0 && s.r >= o.seq {
		// An operator resumed the key after this pause.
		ks.own = nil
		return 0, nil, false
	}
	again := o.endNS > nowNS && redisEnd >= 0 && redisEnd < o.endNS-int64(time.Millisecond) && !o.reasserted
	if again {
		o.reasserted = true
	}
	return o.endNS, o.spec, again
}

// getState reads key's state: one GET ("" if none).
func (l *Limiter) getState(ctx context.Context, key string) (string, error) {
	res, err := l.run(ctx, names.OpCheck, key, func(ctx context.Context) (any, error) {
		if l.onStore != nil {
			v, _ := l.onStore.Get(l.RedisKey(key))
			return v, nil
		}
		v, err := l.rdb.Get(ctx, l.RedisKey(key)).Result()
		if errors.Is(err, redis.Nil) {
			return "", nil
		}
		return v, err
	}, nil)
	if err != nil {
		return "", err
	}
	state := res.(string)
	if state == "" {
		return "", nil
	}
	if _, err := layout.ParseState(state); err != nil {
		return "", fmt.Errorf("reserve: %w: %w", ErrWrongType, err)
	}
	return state, nil
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
