package reserve

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
)

// One key, one state (docs/design.md, "The state of a key"). Everything a
// Limiter knows about a key lives in the key's keyState, under its one
// lock, for one lifetime: what Redis last showed of it, its pause (as read,
// and the one this Limiter made), the refusals remembered, the calls
// queued to share a round trip, the leases, the fair queues, the local
// fallback's part and the cancels Redis has not seen. Every event on the
// key is applied there, by a method of keyState: a reply, a pause read or
// made, a resume, a cancel or settle, a lease granted or dropped, a switch
// to local pacing and the handback, a stored limit seen. A feature reads
// the key's state and adds its fields and events to it; it keeps no table
// of its own.
//
// A keyState is found by name in the Limiter's table (keyTable.get), and
// lives while it is in use or was used within keyIdle; the loop sweeps the
// others. Nobody holds one across a sleep: sleepers and pumps look their
// key up again each time they wake, so a swept keyState is never written.
type keyState struct {
	name string
	// rkeys is Reserve's KEYS for the key (state, stored limit, shadow),
	// made at its first reservation and never changed.
	rkeys atomic.Pointer[[]string]

	// used is when the key was last looked up (keyTable.get; monoNow),
	// marked under the table's lock.
	used atomic.Int64

	mu sync.Mutex

	// What Redis last showed of the key: the state and the stored limit
	// that every granting script's reply carries (the local fallback
	// starts from them), when, and whether a call sent after that reply
	// may have changed them.
	seen     string
	stored   string
	seenT    int64     // seen's write time (Unix µs, the clock that wrote it)
	seenSeq  int64     // seen's last reservation number
	seenLast int64     // the latest slot seen records (its buckets' last events; Unix ns)
	seenAt   time.Time // when it arrived (system clock); zero: never
	// extra is the latest slot Redis granted this Limiter by a call whose
	// reply carries no state (a hold, a claim) since seen (server clock,
	// Unix ns): with the latest slot seen records, the key's horizon.
	// ahead is the latest slot of the last reply: how deep the key's queue
	// was then (gatherFor).
	extra, ahead int64
	// epoch counts the states Redis was found to have lost (noteSeen): a
	// reservation Redis granted, and a lease, carries the epoch it was
	// granted in, and a sleeper of an earlier one takes a fresh slot
	// (Reservation.sleep), since the state that Redis may have granted its
	// instants to others from since knows nothing of it. lost says the
	// state seen is such a state, and lostSeq is its own number, so that
	// one loss counts once: the states that follow it (numbered on from
	// it) are the same loss, and one numbered before it another. A loss
	// is a state written after the one seen (its write time later), or
	// none.
	epoch   uint64
	lost    bool
	lostSeq int64

	pause pauseView // what seen says of the key's pause, and the read that refreshes it (pauses.go)
	own   *ownPause // the pause this Limiter made, kept while it lasts
	// wake is closed, and replaced, when what the key's waiters wait for
	// may have changed: a pause learned, ended or moved by a resume. Every
	// sleeper behind a pause and every fair pump waits on it as well as on
	// its timer.
	wake chan struct{}

	refused map[string]refusal      // maximum waits known too short (refusals.go)
	queues  map[string]*queue       // callers sharing a round trip, by policy (batch.go)
	leases  map[string]*leaseSlot   // hot keys' leases, by policy (lease.go)
	fair    map[fairTurn]*fairQueue // fair requests waiting for their turn (fair.go)
	// fairPumps are the goroutines that book the fair queues, by policy
	// (fair.go).
	fairPumps map[string]*fairPump

	local   *localKey       // the local fallback's part while it holds the key (local.go)
	pending []pendingAdjust // cancels and settles of Redis's grants made while Redis was unavailable

	report report // the policy the code passes, reported to operators (heartbeat.go)

	seats *keySeats // an in-flight band's tickets of this Limiter's (seats.go)
	// seatsStart is the start of the server the key's seats last showed
	// (seats.lua's "u"; 0: none): a call that finds a younger server may
	// find seats lost, and waits for their holders to renew them.
	seatsStart int64
	// seatsExcess is what the other holders held beyond their shares of
	// the band as Redis last showed it (seatsExcessAt): the local
	// fallback takes that much less of this Limiter's share.
	seatsExcess   int64
	seatsExcessAt time.Time
	seatsN        int64 // the band's N as the last reply on Redis gave it (an operator's, if stored)
	// seatsHeard is when this Limiter sent the last of its calls on the
	// key's seats that Redis answered and that renewed its holder's record
	// there (an acquire that granted or queued, a renew): the record's
	// time on Redis is no earlier. A ticket handed seats is sure of them as
	// of then (seatTicket.sure).
	seatsHeard time.Time
}

// monoNow is the monotonic clock in ns since the package's start: a
// lookup's mark of use (keyState.used). Cheaper to read than time.Now,
// which reads the wall clock as well, and a hot key's every call marks
// it.
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

var monoEpoch = time.Now()

// keyIdle is how long a keyState is kept after its last call when nothing
// else holds it: a report lives that long in the fleet's hash.
const keyIdle = reportKeep

// maxKeys bounds the table: beyond it, the sweep drops idle keys used
// least recently first, whatever their age.
const maxKeys = 100_000

// keyTable holds a Limiter's keyStates by name.
type keyTable struct {
	mu sync.RWMutex
	m  map[string]*keyState
	// gotHook, for tests, runs in get once the table's lock is released.
	gotHook func(*keyState)
}

// get returns key's state, made if needed, and marks it used now. The use
// is marked under the table's lock: a sweep, which holds it to drop a key,
// sees it, so the state get returns is the one the table holds.
func (t *keyTable) get(key string) *keyState {
	now := monoNow()
	t.mu.RLock()
	ks := t.m[key]
	if ks != nil {
		ks.used.Store(now)
	}
	t.mu.RUnlock()
	if ks == nil {
		t.mu.Lock()
		if ks = t.m[key]; ks == nil {
			if t.m == nil {
				t.m = make(map[string]*keyState)
			}
			ks = &keyState{name: key, wake: make(chan struct{})}
			t.m[key] = ks
		}
		ks.used.Store(now)
		t.mu.Unlock()
	}
	if t.gotHook != nil {
		t.gotHook(ks)
	}
	return ks
}

// peek returns key's state if the table holds it, without marking it used.
func (t *keyTable) peek(key string) *keyState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.m[key]
}

// all returns every keyState the table holds.
func (t *keyTable) all() []*keyState {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]*keyState, 0, len(t.m))
	for _, ks := range t.m {
		out = append(out, ks)
	}
	return out
}

// sweepKeys drops the keyStates idle since before now - keyIdle (and,
// over maxKeys, the least recently used idle ones), and the parts of the
// others that have lapsed.
func (l *Limiter) sweepKeys() {
	t := &l.states
	now := time.Now()
	mono := monoNow()
	nowNS, _ := l.serverNow()
	type idleKey struct {
		ks   *keyState
		used int64
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// The idle keys are listed only when the table is over its bound (the
	// sweep's deletions only shrink it): a list of every key, each sweep,
	// was the cold shape's largest allocation after the calls' own.
	var idle []idleKey
	full := len(t.m) > maxKeys
	clock := l.clock.Now()
	for name, ks := range t.m {
		ks.mu.Lock()
		l.lapse(ks, now, clock, nowNS)
		free := ks.idle(nowNS)
		used := ks.used.Load()
		if free && time.Duration(mono-used) > keyIdle {
			ks.forget()
			delete(t.m, name)
		} else if free && full {
			idle = append(idle, idleKey{ks, used})
		}
		ks.mu.Unlock()
	}
	if over := len(t.m) - maxKeys; over > 0 {
		slices.SortFunc(idle, func(a, b idleKey) int { return cmp.Compare(a.used, b.used) })
		for _, k := range idle[:min(over, len(idle))] {
			k.ks.mu.Lock()
			k.ks.forget()
			k.ks.mu.Unlock()
			delete(t.m, k.ks.name)
		}
	}
}

// idle reports whether nothing holds ks but what may be read again from
// Redis: no call queued, no lease, no fair queue, no local state, no
// pending adjustment, no pause of its own still in force. ks.mu is held.
func (ks *keyState) idle(nowNS int64) bool {
	live := false
	for _, slot := range ks.leases {
		live = live || slot.live != nil
	}
	return len(ks.queues) == 0 && !live && len(ks.fair) == 0 && len(ks.fairPumps) == 0 && ks.local == nil &&
		len(ks.pending) == 0 && ks.seats == nil && (ks.own == nil || ks.own.endNS <= nowNS) && ks.pause.read == nil
}

// forget wakes whoever waits on ks before it leaves the table: they look
// their key up again. ks.mu is held.
func (ks *keyState) forget() {
	close(ks.wake)
	ks.wake = make(chan struct{})
}

// lapse drops what has lapsed at now (the system clock; clock on the
// Limiter's, nowNS on the server's): refusals, slots granted that have
// passed, pauses of its own long over, views too old to trust, leases
// whose slots have all lapsed. ks.mu is held.
func (l *Limiter) lapse(ks *keyState, now, clock time.Time, nowNS int64) {
	for k, r := range ks.refused {
		if clock.Sub(r.at) > refusalTTL || clock.Before(r.at) {
			delete(ks.refused, k)
		}
	}
	if ks.extra <= nowNS {
		ks.extra = 0
	}
	if ks.own != nil && ks.own.endNS < nowNS-int64(time.Minute) {
		ks.own = nil
	}
	if !ks.seenAt.IsZero() && now.Sub(ks.seenAt) > seenAge {
		ks.seen, ks.stored, ks.seenAt, ks.seenT, ks.seenSeq, ks.seenLast, ks.ahead = "", "", time.Time{}, 0, 0, 0, 0
		ks.lost = false
	}
	for sig, slot := range ks.leases {
		if ls := slot.live; ls != nil && ls.base.at(ls.last).Add(ls.allow).Before(clock) {
			l.retireLease(slot, clock)
		}
		if slot.live == nil && now.Sub(slot.refusedAt) > notLeasableFor && clock.Sub(slot.sized) > keyIdle {
			delete(ks.leases, sig)
		}
	}
}

// noteSeen records the state and the stored limit that Redis showed: a
// reply, a read (sent: when its call was sent, system clock) or an event
// (sent zero). It keeps the newer of the two states: the one written later
// (the state's write time), or the one shown by a call sent after the
// current one arrived (whatever the clocks did). A pause it shows, ended or
// moved (a resume), wakes the key's waiters. A state of "" (no key) is what
// Redis holds then; the slots Redis granted this Limiter before still
// stand (see below). ks.mu is held.
func (ks *keyState) noteSeen(state, stored string, sent time.Time) {
	t, seq := layout.StateHead(state)
	newer := ks.seenAt.IsZero() || (state != "" && t >= ks.seenT) || (!sent.IsZero() && !sent.Before(ks.seenAt))
	if !newer {
		return
	}
	last := layout.LastEvent(state)
	lost := state == "" || (seq < ks.seenSeq && ks.horizon() > t*1000)
	if lost && (state == "" || t > ks.seenT) && (!ks.lost || state == "" || seq < ks.lostSeq) {
		// A loss not seen before: the slots granted until now belong to
		// the state Redis lost (see epoch). A state numbered before the
		// one seen but written no later is an older read of the same
		// state, arriving late (a read sent as a reply arrived, in the
		// same instant of the clock: pacertest's TestLeases): no loss.
		ks.epoch++
	}
	ks.lost, ks.lostSeq = lost, seq
	if lost {
		// No state, or one numbered before the one seen (numbers never go
		// back on a key) and written before slots Redis granted this
		// Limiter: Redis lost the key (restarted empty, flushed, a replica
		// promoted), and maybe others reserved on it since. (Or, with no
		// state, the key lapsed with its bucket full.) The slots Redis
		// granted this Limiter ahead are still its sleepers': their
		// horizon and number stay, so that the next call tells Redis the
		// lost key's floor. (A sleeper's check read such a state, and the
		// next call took a slot among theirs: TestLostKeyReadKeepsHorizon.)
		// A horizon passed is never sent, and a state written after it
		// (the key lapsed, then a new reservation) is taken whole: its
		// numbers start again (pacertest's TestXRateExact).
		seq, last = ks.seenSeq, max(ks.horizon(), last)
	}
	ks.seen, ks.stored, ks.seenT, ks.seenSeq, ks.seenAt, ks.extra = state, stored, t, seq, time.Now(), 0
	ks.seenLast = last
	end, shift := layout.PauseEnd(state), shiftOf(state)
	if end != ks.pause.endNS || shift != ks.pause.shift {
		ks.pause.endNS, ks.pause.shift = end, shift
		ks.changed()
	}
}

// noteGranted records a slot Redis granted this Limiter on key by a call
// whose reply carries no state (a hold, a claim), and returns the key's
// epoch, which the reservation carries.
func (l *Limiter) noteGranted(key string, slotNS int64) uint64 {
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.extra = max(ks.extra, slotNS)
	return ks.epoch
}

// lostSince reports whether Redis has lost the key's state since it
// granted r (a Redis reservation of an earlier epoch: see keyState.epoch).
func (r *Reservation) lostSince() bool {
	r.mu.Lock()
	epoch, redis := r.epoch, r.ofRedis()
	r.mu.Unlock()
	return redis && r.lim.lostSince(r.key, epoch, true)
}

// ofRedis reports whether Redis granted r (numbered by a state), not the
// local fallback. r.mu is held.
func (r *Reservation) ofRedis() bool { return r.localID == "" && r.seq > 0 }

// lostSince reports whether this Limiter has seen Redis lose key's state
// since epoch. A key not in the table (forgotten while idle) is looked up
// anew if lookup (its epoch starts again: a sleeper then takes a fresh
// slot, which costs a slot, never adds one), else reads as not lost.
func (l *Limiter) lostSince(key string, epoch uint64, lookup bool) bool {
	ks := l.states.peek(key) // a read: the check before it marked the key used
	if ks == nil && !lookup {
		return false
	}
	if ks == nil {
		ks = l.states.get(key)
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.epoch != epoch
}

// horizon returns the latest slot Redis is known to have granted on the
// key (server clock, Unix ns; 0: none): the last event the state seen
// records (cancels and resumes move it back), or a later slot granted
// since by a call whose reply carries no state. The local fallback starts
// no earlier; a Redis that lost the key is told it. ks.mu is held.
func (ks *keyState) horizon() int64 {
	return max(ks.seenLast, ks.extra)
}

// noteAhead records the latest slot a reply granted this Limiter on the
// key (server clock, Unix ns). ks.mu is held.
func (ks *keyState) noteAhead(last int64) { ks.ahead = last }

// seenAge is how long what a reply showed of a key is trusted as a
// start for local pacing: older, the key has most likely changed.
const seenAge = 10 * time.Minute

// changed wakes the key's waiters: what they wait for may have moved.
// ks.mu is held.
func (ks *keyState) changed() {
	close(ks.wake)
	ks.wake = make(chan struct{})
}
