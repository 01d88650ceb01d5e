package reserve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
)

// In-flight bands (Band.InFlight): at most N units of calls open at once,
// fleet-wide. A call takes its seats first, in the key's queue (lua/seats.lua),
// then its slot on the policy's other bands, and gives the seats back when it
// ends (Reservation.Done, Settle or Cancel). The seats are held by the
// Limiter's membership in the fleet: see docs/design.md, "In-flight bands".

var seatsScript = redis.NewScript(lua.Seats)

// seatPoll is how often a waiter that heard nothing asks again: the
// fallback for a hand-off announcement lost (the events channel drops
// messages while its connection is down). A waiter's heartbeat renews its
// tickets every HeartbeatInterval as well, which hands it seats granted and
// not announced.
var seatPoll = 5 * time.Second

// seatReq is a Request's in-flight band and the rest of it.
type seatReq struct {
	band string
	n    int // the band's N, from the code
	cost int // the seats the call takes (0: none)
	// rest is the request on the policy's other bands (hasRest false:
	// none; the seats are the whole reservation).
	rest    Request
	hasRest bool
}

// seatPart returns req's in-flight band, checked, and the request on its
// other bands (nil: req has no in-flight band).
func (req Request) seatPart() (*seatReq, error) {
	idx := -1
	for i, b := range req.Policy {
		if b.InFlight == 0 {
			continue
		}
		if idx >= 0 {
			return nil, fmt.Errorf("%w: two in-flight bands (%q and %q): a policy has at most one", ErrInvalidPolicy, req.Policy[idx].Name, b.Name)
		}
		idx = i
	}
	if idx < 0 {
		return nil, nil
	}
	if err := checkKey(req.Key); err != nil {
		return nil, err
	}
	b := req.Policy[idx]
	if !validName(b.Name) {
		return nil, fmt.Errorf("%w: band name %q (want letters, digits, '.', '_' or '-')", ErrInvalidPolicy, b.Name)
	}
	if b.InFlight < 0 || b.InFlight > maxInFlight {
		return nil, fmt.Errorf("%w: band %q: in flight %d (want 1 to %d)", ErrInvalidPolicy, b.Name, b.InFlight, maxInFlight)
	}
	if b.Limit != (Limit{}) || b.Window != (Window{}) {
		return nil, fmt.Errorf("%w: band %q needs exactly one of Limit, Window and InFlight", ErrInvalidPolicy, b.Name)
	}
	unit := b.Unit
	if unit == "" {
		unit = b.Name
	}
	if !validName(unit) {
		return nil, fmt.Errorf("%w: band %q: unit %q (want letters, digits, '.', '_' or '-')", ErrInvalidPolicy, b.Name, unit)
	}
	sr := &seatReq{band: b.Name, n: b.InFlight}
	v, ok := req.Cost[unit]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: no amount for unit %q (give 0 to charge nothing)", ErrInvalidCost, unit)
	case math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v != math.Trunc(v):
		return nil, fmt.Errorf("%w: %s %v (an in-flight band's seats: want a whole number >= 0)", ErrInvalidCost, unit, v)
	case v > float64(b.InFlight):
		return nil, fmt.Errorf("%w: %s %v is above band %q's in flight %d", ErrExceedsBurst, unit, v, b.Name, b.InFlight)
	}
	sr.cost = int(v)
	rest := slices.Delete(slices.Clone(req.Policy), idx, idx+1)
	restUnits := map[string]bool{}
	for _, rb := range rest {
		u := rb.Unit
		if u == "" {
			u = rb.Name
		}
		restUnits[u] = true
	}
	cost := Cost{}
	for _, u := range slices.Sorted(maps.Keys(req.Cost)) {
		a := req.Cost[u]
		switch {
		case restUnits[u]:
			cost[u] = a
		case u != unit:
			return nil, fmt.Errorf("%w: unit %q is charged by no band", ErrInvalidCost, u)
		}
	}
	for _, rb := range rest {
		if rb.Name == b.Name {
			return nil, fmt.Errorf("%w: two bands named %q", ErrInvalidPolicy, b.Name)
		}
	}
	if len(rest) > 0 {
		sr.rest, sr.hasRest = req, true
		sr.rest.Policy, sr.rest.Cost = rest, cost
		if _, _, err := sr.rest.check(); err != nil {
			return nil, err
		}
	} else if req.Fair() {
		return nil, fmt.Errorf("%w: a fair request needs a band beside its in-flight band (its turn is on a rate)", ErrInvalidFairness)
	}
	if sr.cost == 0 && !sr.hasRest {
		return nil, fmt.Errorf("%w: the cost charges nothing", ErrInvalidCost)
	}
	return sr, nil
}

// maxInFlight bounds an in-flight band's N.
const maxInFlight = 1_000_000

// A seatState is where a ticket is.
type seatState int8

const (
	seatPending seatState = iota // its acquire is in flight
	seatWaiting                  // queued for seats
	seatHeld                     // holds its seats
)

// A seatTicket is one call's claim to seats on a key.
type seatTicket struct {
	id    string
	key   string
	band  string
	n     int // the band's N
	cost  int
	state seatState
	local atomic.Bool   // held on the local fallback's store (read without ks.mu)
	got   chan struct{} // closed when the ticket holds its seats (handed off)
	at    time.Time     // when it started waiting
	// counted: SeatMetrics was told the ticket holds its seats.
	counted atomic.Bool
	waited  bool // it queued for its seats (set by awaitSeats' goroutine only)
	// Whether the call may be open on the seats (read and written with
	// ks.mu held): open once Sleep returned; before, not while a Sleep (or
	// the worker's) holds it back (asleep), nor before openAt, the slot
	// its Reservation was handed out with (zero: still being reserved).
	// A renew lists a held ticket whose call is not open as waiting, so
	// that Redis does not record again seats it dropped meanwhile (see
	// unopened).
	open   bool
	asleep bool
	openAt time.Time
	// sure is when this Limiter sent the last call Redis answered that
	// showed the ticket holding its seats (an acquire that granted it, a
	// renew whose reply names it), or, for seats handed to it, the last
	// that renewed its holder's record before it heard of the hand-off
	// (keyState.seatsHeard): Redis keeps the seats for 1.5 heartbeat
	// intervals after it at least (see seatSure). A holder's record that
	// Redis dropped and a later call of its made again holds none of the
	// seats it had, so a call that renewed the record says nothing of a
	// ticket's seats (the combination runner on a Cluster, seed 27). Read
	// and written with ks.mu held.
	sure time.Time
}

// unopened reports whether t holds its seats and its call has not opened
// on them yet. A renew lists such a ticket as waiting ("w"): its seats
// are kept if Redis still records them, and it queues again if Redis
// dropped them (the fleet took its holder for gone and may have handed
// them on), where a held one ("h") would be recorded again, over N. ks.mu
// is held.
func (t *seatTicket) unopened(now time.Time) bool {
	return t.state == seatHeld && !t.open && (t.asleep || t.openAt.IsZero() || now.Before(t.openAt))
}

// keySeats is a keyState's in-flight part: the tickets this Limiter has
// on the key (taken, waiting, or being asked for), and whether the local
// fallback's store holds the key's seats.
type keySeats struct {
	tickets map[string]*seatTicket
	store   bool // the store holds this Limiter's seats (an outage)
	dirty   bool // a release failed: Redis may count seats this Limiter gave back until its next renew
	// excess is seats.lua's ARGV[4] in the store, fixed when the store
	// took the key (seatExcess).
	excess string
}

// seatsOf returns ks's in-flight part, made if need be. ks.mu is held.
func (ks *keyState) seatsOf() *keySeats {
	if ks.seats == nil {
		ks.seats = &keySeats{tickets: map[string]*seatTicket{}}
	}
	return ks.seats
}

// grantTicket marks a waiting ticket as holding its seats and wakes its
// caller. ks.mu is held.
func (ks *keyState) grantTicket(id string) {
	if ks.seats == nil {
		return
	}
	t := ks.seats.tickets[id]
	if t == nil || t.state == seatHeld {
		return
	}
	t.state = seatHeld
	t.sure = ks.seatsHeard
	close(t.got)
}

// dropTicket forgets a ticket. ks.mu is held.
func (ks *keyState) dropTicket(id string) {
	if ks.seats == nil {
		return
	}
	delete(ks.seats.tickets, id)
	if len(ks.seats.tickets) == 0 && !ks.seats.store && !ks.seats.dirty {
		ks.seats = nil
	}
}

// seatKeys are the Redis keys of key's in-flight band: the seats, the
// queue, an operator's N and the tickets (seats.lua's KEYS[1...4]), all in
// the key's hash slot.
func (l *Limiter) seatKeys(key string) []string {
	seats, queue, storedN := layout.SeatKeys(l.opts.KeyPrefix, key)
	return []string{seats, queue, storedN, layout.SeatTickets(l.opts.KeyPrefix, key)}
}

// seatArgs are seats.lua's ARGV[2...7] for a call on Redis on ks's key.
func (l *Limiter) seatArgs(ks *keyState, n int) []any {
	holder, size, taken, held, lost := l.fleet.seatView(l.id)
	mode := "r"
	if lost {
		mode = "x"
	}
	var known int64
	if ks != nil {
		ks.mu.Lock()
		known = ks.seatsStart
		ks.mu.Unlock()
	}
	return []any{l.id + " " + holder + " " + strconv.Itoa(size) + " " + mode, taken, held,
		strconv.Itoa(n), l.seatKeep(), l.seatLapse() + " " + strconv.FormatInt(known, 10) + l.seatHold()}
}

// seatsOnRedis runs seats.lua on Redis for key with args (the operation,
// seatArgs', its own), its ARGV[7] ending with the call's deadline
// (scriptDeadline): a call Redis runs after a stall changes nothing. Its
// view of the fleet is from before the stall, and the holders silent
// across it would be dropped as gone, their seats forgotten while their
// calls are open (combination runner, seed 128: 7 calls open on N = 6 after
// a freeze of 1.53 s; TestSeatsStaleCallDropsNothing).
func (l *Limiter) seatsOnRedis(ctx context.Context, key string, args []any) (any, error) {
	if ms, ok := l.scriptDeadline(ctx); ok {
		args[6] = args[6].(string) + " " + strconv.FormatInt(ms, 10)
	}
	return seatsScript.Run(ctx, l.scripts, l.seatKeys(key), args...).Result()
}

// seatKeep is how long the seat keys outlive their last write: a member
// cut off from Redis keeps its seats while the fleet holds it.
func (l *Limiter) seatKeep() string {
	if l.onStore != nil {
		return strconv.FormatInt(storeSeatLife.Milliseconds(), 10)
	}
	return strconv.FormatInt((l.opts.SilentHold + 4*l.opts.HeartbeatInterval).Milliseconds(), 10)
}

// storeSeatLife stands for the heartbeat interval of the Limiters on a
// store (package pacertest), in seatKeep and seatLapse. They send no
// heartbeats, so nothing renews their seats: at their options' interval,
// a call open for 3.5 of them lost its seat to another Limiter on the
// store (TestInFlight in pacertest). A store lives in one process, which
// cannot crash apart from its Limiters: their seats last as long as their
// calls.
const storeSeatLife = 100 * 365 * 24 * time.Hour

// seatLapse is seats.lua's ARGV[7]: the heartbeat interval, from which it
// tells how long a holder may go without a call on the key, and how long
// after a server's start no seat is granted: every holder renews its seats
// by then (at its next heartbeat, or at its handback: a probe within 1.25
// ProbeInterval).
func (l *Limiter) seatLapse() string {
	beat := max(l.opts.HeartbeatInterval.Milliseconds(), 1)
	if l.onStore != nil {
		beat = storeSeatLife.Milliseconds()
	}
	young := (3*l.opts.HeartbeatInterval + 3*l.opts.ProbeInterval).Milliseconds()
	return strconv.FormatInt(beat, 10) + " " + strconv.FormatInt(young, 10)
}

// seatHold is the last field of seats.lua's ARGV[7]: SilentHold, ms.
func (l *Limiter) seatHold() string {
	return " " + strconv.FormatInt(l.opts.SilentHold.Milliseconds(), 10)
}

var ticketSeq atomic.Uint64

// takeSeats takes sr's seats on key, waiting in the key's queue for at
// most maxWait (-1: as long as ctx allows; 0: not at all). A caller who
// can wait never gets an outage's error: it waits for Redis, or for a
// local share.
func (l *Limiter) takeSeats(ctx context.Context, key string, sr *seatReq, maxWait time.Duration) (*seatTicket, error) {
	t := &seatTicket{
		key: key, band: sr.band,
		n: sr.n, cost: sr.cost, got: make(chan struct{}), at: time.Now(),
	}
	ks := l.states.get(key)
	ks.mu.Lock()
	// Numbered and listed in one step: a renew that lists the key's
	// tickets reads the last number under ks.mu too, so that every ticket
	// it has not listed is numbered after it (renewSeats).
	t.id = l.id + "." + strconv.FormatUint(ticketSeq.Add(1), 36)
	ks.seatsOf().tickets[t.id] = t
	ks.mu.Unlock()
	return l.awaitSeats(ctx, ks, t, maxWait, true)
}

// awaitSeats asks for t's seats until it holds them, waiting in the key's
// queue for at most maxWait (as takeSeats). When it gives up, it cancels
// t if cancel is set.
func (l *Limiter) awaitSeats(ctx context.Context, ks *keyState, t *seatTicket, maxWait time.Duration, cancel bool) (*seatTicket, error) {
	key := ks.name
	var limit <-chan time.Time
	if maxWait > 0 {
		tm := time.NewTimer(maxWait)
		defer tm.Stop()
		limit = tm.C
	}
	sm, _ := l.opts.Metrics.(SeatMetrics)
	waiting := false
	defer func() {
		if waiting && sm != nil {
			sm.SeatWaiters(key, t.band, -1)
		}
	}()
	gotIt := func(handedOff bool) (*seatTicket, error) {
		if sm != nil && t.counted.CompareAndSwap(false, true) {
			sm.SeatsTaken(key, t.band, t.cost, time.Since(t.at), handedOff, t.local.Load())
			sm.SeatsHeld(key, t.band, t.cost)
		}
		return t, nil
	}
	giveUp := func(err error) (*seatTicket, error) {
		if cancel {
			l.cancelTicket(t)
		}
		return nil, err
	}
	var waited *noShareError // the share the last try waited for, if any
	var refused error        // the refusal of Redis the last try waited out, if any
	// saysWhy wraps a context's error with what the caller waited for.
	saysWhy := func(err error) error {
		if waited != nil {
			return waitedErr(err, waited)
		}
		return refusedErr(err, refused)
	}
	for {
		local := l.isDegraded() && !l.opts.FailClosed
		moved := l.shareChanged()
		granted, queued, err := l.acquireSeats(ctx, ks, t, maxWait != 0, local)
		if err == nil && granted {
			return gotIt(waiting)
		}
		if queued && !waiting {
			waiting, t.waited = true, true
			if sm != nil {
				sm.SeatWaiters(key, t.band, 1)
			}
		}
		if err != nil && (waited != nil || refused != nil) && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			// Cancelled while this try was on its way: say what the
			// last one waited for, as the wait between tries does.
			return giveUp(saysWhy(err))
		}
		waited, refused = nil, nil
		if err != nil {
			var ns *noShareError
			noShare := errors.As(err, &ns)
			if !noShare && !(errors.Is(err, ErrUnavailable) && !l.opts.FailClosed) {
				return giveUp(err)
			}
			waited = ns
			if !noShare {
				refused = err
			}
			if maxWait == 0 {
				return giveUp(&WaitTooLongError{Wait: l.opts.ProbeInterval, MaxWait: 0, Band: OutageBinding})
			}
		} else if !queued {
			return giveUp(&WaitTooLongError{MaxWait: maxWait, Band: t.band, seats: true})
		}
		every := seatPoll
		if err != nil {
			every = min(every, max(l.opts.ProbeInterval/4, 10*time.Millisecond)) // waiting for a share
		}
		poll := time.NewTimer(every)
		ks.mu.Lock()
		got := t.got // made again when the ticket loses its seats (unholdTicket)
		ks.mu.Unlock()
	wait:
		for {
			select {
			case <-got:
				poll.Stop()
				return gotIt(true)
			case <-moved:
				// A heartbeat, or a switch to or from the local fallback:
				// ask again only after a switch (the same ticket keeps its
				// place), or while waiting for a share.
				if err != nil || (l.isDegraded() && !l.opts.FailClosed) != local {
					break wait
				}
				moved = l.shareChanged()
			case <-poll.C:
				break wait
			case <-limit:
				poll.Stop()
				return giveUp(&WaitTooLongError{Wait: maxWait, MaxWait: maxWait, Band: t.band, seats: true})
			case <-ctx.Done():
				poll.Stop()
				if waited != nil || refused != nil {
					return giveUp(saysWhy(fmt.Errorf("reserve: seats %q: %w", key, ctx.Err())))
				}
				return giveUp(ctx.Err())
			}
		}
		poll.Stop()
		ks.mu.Lock()
		held := t.state == seatHeld
		ks.mu.Unlock()
		if held {
			return gotIt(true)
		}
	}
}

// acquireSeats runs one acquire of t: on Redis, or (local) on the store at
// this Limiter's share.
func (l *Limiter) acquireSeats(ctx context.Context, ks *keyState, t *seatTicket, wait bool, local bool) (granted, queued bool, err error) {
	w := "0"
	if wait {
		w = "1"
	}
	if !local {
		args := append(l.seatArgs(ks, t.n), t.id, strconv.Itoa(t.cost), w)
		sent := time.Now()
		res, err := l.run(ctx, names.OpSeats, ks.name, func(ctx context.Context) (any, error) {
			return l.seatsOnRedis(ctx, ks.name, append([]any{"acquire"}, args...))
		}, func(res any) {
			// The caller left before the reply: give back what it granted.
			if r, ok := res.([]any); ok && len(r) > 0 && r[0] == int64(1) {
				go l.releaseTicket(t)
			} else {
				go l.cancelTicket(t)
			}
		})
		if err != nil {
			return false, false, err
		}
		return l.noteAcquire(ks, t, res, sent)
	}
	if l.probesStalled() {
		return false, false, l.stalledErr(ks.name)
	}
	if !l.fleet.localSeatsReady() {
		return false, false, &noShareError{fmt.Errorf("reserve: %q: %w: the fleet has not heard yet that this Limiter paces locally: until it counts it as held, the members on Redis may take its share of band %q", ks.name, l.unavailableErr(), t.band)}
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if err := l.seatStore(ctx, ks); err != nil {
		return false, false, err
	}
	arg, err := l.seatLocalArg(ks.name)
	if err != nil {
		return false, false, err
	}
	res, err := seatsScript.Run(ctx, l.store, l.seatKeys(ks.name), "acquire", arg, "*", ks.seats.excess, ks.storeN(t.n),
		l.seatKeep(), l.seatLapse()+" 0"+l.seatHold(), t.id, strconv.Itoa(t.cost), w).Result()
	if err != nil {
		return false, false, l.localError(names.OpSeats, ks.name, err)
	}
	r, _ := res.([]any)
	if len(r) > 1 && r[0] == int64(0) && r[1] == int64(-1) {
		return false, false, &noShareError{fmt.Errorf("reserve: %q: %w: this Limiter's share of band %q is below the call's %d seats", ks.name, l.unavailableErr(), t.band, t.cost)}
	}
	return l.noteAcquireLocked(ks, t, res, true)
}

// seatLocalArg is seats.lua's ARGV[2] in the store: this Limiter's rank
// and the fleet's size its local share counts.
func (l *Limiter) seatLocalArg(key string) (string, error) {
	sh, ok := l.fleet.localShare()
	if !ok && l.fleet.newcomer() {
		return "", l.noShareErr(key)
	}
	if !ok {
		return "", &noShareError{fmt.Errorf("reserve: %q: %w: Redis has never answered this Limiter, so it does not know how many share the limit (set Options.FleetSize to pace locally meanwhile)", key, l.unavailableErr())}
	}
	n, rank := 1, 0
	if sh.IsMember && sh.N > 1 {
		n, rank = sh.N, sh.Member
	}
	return l.id + " " + strconv.Itoa(rank) + " " + strconv.Itoa(n) + " l", nil
}

// seatStore makes sure the store holds key's seats: the tickets this
// Limiter held on Redis count against its local share. ks.mu is held.
func (l *Limiter) seatStore(ctx context.Context, ks *keyState) error {
	sts := ks.seatsOf()
	if sts.store {
		return nil
	}
	arg, err := l.seatLocalArg(ks.name)
	if err != nil {
		return err
	}
	n := 1
	for _, t := range sts.tickets {
		n = max(n, t.n)
	}
	sts.excess = l.seatExcess(ks)
	if _, err := seatsScript.Run(ctx, l.store, l.seatKeys(ks.name), "renew", arg, "*", sts.excess, ks.storeN(n),
		l.seatKeep(), l.seatLapse()+" 0"+l.seatHold(), seedList(sts)).Result(); err != nil {
		return l.localError(names.OpSeats, ks.name, err)
	}
	sts.store = true
	return nil
}

// ticketList is renew's ARGV[8]: every ticket of sts, held ("h"), waiting
// ("w", or in the store's seeding: not carried over) or being asked for
// ("p"). On Redis (not seed) a held ticket whose call has not opened goes
// as waiting (see unopened); unsure lists them. ks.mu is held.
func ticketList(sts *keySeats, seed bool) (list string, unsure []string) {
	var b strings.Builder
	now := time.Now()
	for _, id := range slices.Sorted(maps.Keys(sts.tickets)) {
		t := sts.tickets[id]
		s := "p"
		switch {
		case t.state == seatHeld && !seed && t.unopened(now):
			s = "w"
			unsure = append(unsure, id)
		case t.state == seatHeld:
			s = "h"
		case t.state == seatWaiting:
			s = "w"
		}
		if seed && s != "h" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(t.id + ":" + strconv.Itoa(t.cost) + ":" + s)
	}
	return b.String(), unsure
}

// seedList is ticketList for the store's seeding: the held tickets.
func seedList(sts *keySeats) string {
	list, _ := ticketList(sts, true)
	return list
}

// noteAcquire applies the reply of an acquire on Redis, sent at sent, to
// t.
func (l *Limiter) noteAcquire(ks *keyState, t *seatTicket, res any, sent time.Time) (granted, queued bool, err error) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if r, ok := res.([]any); ok && len(r) > 1 && (r[0] == int64(1) || r[1] != int64(0)) {
		ks.heardSeats(sent) // granted or queued: the holder's record was renewed
	}
	granted, queued, err = l.noteAcquireLocked(ks, t, res, false)
	if granted {
		t.sure = sent
	}
	return granted, queued, err
}

// heardSeats notes a call on the key's seats, sent at sent, that renewed
// this Limiter's record there. ks.mu is held.
func (ks *keyState) heardSeats(sent time.Time) {
	if sent.After(ks.seatsHeard) {
		ks.seatsHeard = sent
	}
}

// noteAcquireLocked applies an acquire's reply to t. ks.mu is held.
func (l *Limiter) noteAcquireLocked(ks *keyState, t *seatTicket, res any, local bool) (granted, queued bool, err error) {
	r, ok := res.([]any)
	if !ok || len(r) < 6 {
		return false, false, fmt.Errorf("reserve: seats %q: unexpected reply %v", ks.name, res)
	}
	if st, ok := r[4].(int64); ok && st != 0 && !local {
		ks.seatsStart = st
	}
	if !local {
		ks.noteExcess(r[5])
		if n, ok := r[3].(int64); ok {
			ks.seatsN = n
		}
	}
	switch {
	case r[0] == int64(1) && !local && !ks.redisHandOff():
		// Redis granted it, but the store holds the key's seats now (the
		// Limiter went local while the call was on its way): the seat is
		// in no share (see redisHandOff). The ticket waits, and asks the
		// store.
		if t.state == seatPending {
			t.state = seatWaiting
		}
		return false, true, nil
	case r[0] == int64(1):
		t.local.Store(local)
		if t.state != seatHeld {
			t.state = seatHeld
			close(t.got)
		}
		return true, false, nil
	case r[1] != int64(0):
		if t.state == seatPending {
			t.state = seatWaiting
		}
		t.local.Store(local)
		return false, true, nil
	}
	return false, false, nil
}

// releaseTicket gives t's seats back (a call that ended) and hands them
// to the queue's head. It does not fail: while Redis is unavailable the
// seats go back on the store, or are dropped from Redis's count by this
// Limiter's next renew (the handback).
func (l *Limiter) releaseTicket(t *seatTicket) { l.endTicket(t, "release") }

// cancelTicket takes t out of the queue, or gives its seats back if it
// holds them.
func (l *Limiter) cancelTicket(t *seatTicket) { l.endTicket(t, "cancel") }

func (l *Limiter) endTicket(t *seatTicket, op string) {
	if sm, ok := l.opts.Metrics.(SeatMetrics); ok && t.counted.CompareAndSwap(true, false) {
		sm.SeatsHeld(t.key, t.band, -t.cost)
	}
	ks := l.states.get(t.key)
	ks.mu.Lock()
	if t.state != seatHeld {
		// It waits for its seats again (see unopened): a release would
		// leave it in the queue.
		op = "cancel"
	}
	offRedis := (ks.seats == nil || !ks.seats.store) && l.isDegraded() && !l.opts.FailClosed
	if offRedis && ks.seats != nil {
		// Redis counts the ticket until the handback's renew, which
		// renews only the keys that keep a seats part: keep it, or a
		// call that was the key's last would hold its seats in Redis
		// until this Limiter's next call on the key
		// (TestSeatsEndedWhileLocal).
		ks.seats.dirty = true
	}
	ks.dropTicket(t.id)
	if ks.seats != nil && ks.seats.store {
		// The store holds the key's seats: give them back there; Redis's
		// count follows at the handback.
		defer ks.mu.Unlock()
		arg, err := l.seatLocalArg(t.key)
		if err != nil {
			return
		}
		res, err := seatsScript.Run(context.Background(), l.store, l.seatKeys(t.key), op, arg, "*", ks.seats.excess,
			ks.storeN(t.n), l.seatKeep(), l.seatLapse()+" 0"+l.seatHold(), t.id).Result()
		if err == nil {
			l.handedOff(ks, res, 2, false)
		}
		return
	}
	ks.mu.Unlock()
	if offRedis {
		return // not on the store: Redis's count drops it at the handback
	}
	l.endOnRedis(ks, op, t.id, t.n)
}

// endOnRedis sends a ticket's release or cancel to Redis (seats.lua's op,
// ticket id, n the band's N as the caller's code gives it).
func (l *Limiter) endOnRedis(ks *keyState, op, id string, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), l.callTimeout()+time.Second)
	defer cancel()
	res, err := l.run(ctx, names.OpSeats, ks.name, func(ctx context.Context) (any, error) {
		return l.seatsOnRedis(ctx, ks.name, append([]any{op}, append(l.seatArgs(ks, n), id)...))
	}, nil)
	if err != nil {
		// Redis's count keeps the seats until this Limiter's next renew
		// (its heartbeat, or the handback after an outage), which lists
		// the tickets it has: this one is gone.
		ks.mu.Lock()
		ks.seatsOf().dirty = true
		ks.mu.Unlock()
		return
	}
	ks.mu.Lock()
	if r, ok := res.([]any); ok && len(r) > 1 {
		ks.noteExcess(r[1])
	}
	l.handedOff(ks, res, 2, true)
	ks.mu.Unlock()
}

// handedOff wakes this Limiter's tickets among the hand-offs of a reply
// (from its index from on): the store's, or Redis's (onRedis; see
// redisHandOff). ks.mu is held.
func (l *Limiter) handedOff(ks *keyState, res any, from int, onRedis bool) {
	r, _ := res.([]any)
	for i := from; i < len(r); i++ {
		if id, ok := r[i].(string); ok && (!onRedis || ks.redisHandOff()) {
			ks.grantTicket(id)
		}
	}
}

// redisHandOff reports whether a seat Redis hands to one of this
// Limiter's tickets may be used: not while the key's seats are on the
// local fallback's store. The store counts this Limiter's seats against
// its share of N, and a seat Redis hands over is in no share: the members
// pacing locally each use theirs. A release that Redis ran late (it was
// paused; its sender paced locally by then, on a share its store counted
// free) handed a seat to a ticket waiting on a member pacing locally, and
// 5 calls were open on a band of 4 (the combination runner's seed 21,
// after a 3.6 s CLIENT PAUSE). The ticket waits for a seat of its share;
// Redis's count follows the store's at the handback. ks.mu is held.
func (ks *keyState) redisHandOff() bool {
	return ks.seats == nil || !ks.seats.store
}

// onSeatEvent applies a hand-off announced on the events channel: the
// tickets named hold their seats now (see redisHandOff).
func (l *Limiter) onSeatEvent(key, arg string) {
	ks := l.states.peek(key)
	if ks == nil {
		return
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if !ks.redisHandOff() {
		return
	}
	for id := range strings.FieldsSeq(arg) {
		ks.grantTicket(id)
	}
}

// renewSeats renews this Limiter's tickets on every key it has some on:
// the fleet sees it still holds them, a Redis that lost them gets them back
// exactly, seats handed to its waiters and not announced reach them, and
// the seats of members gone are dropped and handed on. After an outage
// (the handback) it also makes Redis's count what the store's was, and the
// store forgets the key.
func (l *Limiter) renewSeats(ctx context.Context) {
	for _, ks := range l.states.all() {
		ks.mu.Lock()
		sts := ks.seats
		if sts == nil {
			ks.mu.Unlock()
			continue
		}
		list, unsure := ticketList(sts, false)
		// The last ticket number made when the list was: a ticket made
		// since (numbered after it) may be granted on Redis before this
		// renew runs, and must not go as one not listed.
		upTo := strconv.FormatUint(ticketSeq.Load(), 36)
		n, store := 1, sts.store
		for _, t := range sts.tickets {
			n = max(n, t.n)
		}
		listed := slices.Collect(maps.Keys(sts.tickets))
		ks.mu.Unlock()
		args := append([]any{"renew"}, append(l.seatArgs(ks, n), list, upTo)...)
		sent := time.Now()
		res, err := l.run(ctx, names.OpSeats, ks.name, func(ctx context.Context) (any, error) {
			return l.seatsOnRedis(ctx, ks.name, args)
		}, nil)
		if err != nil {
			continue
		}
		ks.mu.Lock()
		ks.heardSeats(sent)
		if r, ok := res.([]any); ok && len(r) > 1 {
			if st, ok := r[0].(int64); ok && st != 0 {
				ks.seatsStart = st
			}
			ks.noteExcess(r[1])
		}
		l.heardTickets(ks, res, unsure, sent)
		if ks.seats != nil {
			ks.seats.dirty = false
		}
		if store && ks.seats != nil {
			// Handed back: Redis counts this Limiter's seats again.
			keys := l.seatKeys(ks.name)
			l.store.Del(keys[0], keys[1], keys[3])
			ks.seats.store = false
			for _, t := range ks.seats.tickets {
				t.local.Store(false)
			}
		}
		// After the handback: its hand-offs are on Redis's count, which
		// is the store's now.
		l.handedOff(ks, res, 2, true)
		// A call that ended while the renew was on its way: its release
		// (or cancel) may have reached Redis first, and the renew, which
		// listed it, recorded its seats or queued it again. End it again.
		var ended []string
		for _, id := range listed {
			if ks.seats == nil || ks.seats.tickets[id] == nil {
				ended = append(ended, id)
			}
		}
		if ks.seats != nil && len(ks.seats.tickets) == 0 && !ks.seats.store && !ks.seats.dirty {
			ks.seats = nil
		}
		ks.mu.Unlock()
		for _, id := range ended {
			l.endOnRedis(ks, "cancel", id, n)
		}
	}
}

// heardTickets applies a renew's reply (sent at sent) to the tickets it
// names as holding seats (they are sure as of sent), and to those it
// listed as waiting while they held seats (unsure: their calls had not
// opened) and whose seats its reply does not name: Redis dropped them,
// the fleet having taken this Limiter for gone (its calls on the key went
// unanswered for 3.5 heartbeats), and the renew queued them again. Their
// callers wait for seats again before they open their calls
// (confirmSeats). ks.mu is held.
func (l *Limiter) heardTickets(ks *keyState, res any, unsure []string, sent time.Time) {
	if ks.seats == nil {
		return
	}
	r, _ := res.([]any)
	holds := map[string]bool{}
	for _, v := range r[min(2, len(r)):] {
		if v == "|" {
			break
		}
		if id, ok := v.(string); ok {
			holds[id] = true
			if t := ks.seats.tickets[id]; t != nil && t.state == seatHeld && sent.After(t.sure) {
				t.sure = sent
			}
		}
	}
	for _, id := range unsure {
		if t := ks.seats.tickets[id]; t != nil && t.state == seatHeld && !holds[id] {
			l.unholdTicket(t)
		}
	}
}

// unholdTicket makes held ticket t wait for its seats again. ks.mu is
// held.
func (l *Limiter) unholdTicket(t *seatTicket) {
	t.state = seatWaiting
	t.got = make(chan struct{})
	if sm, ok := l.opts.Metrics.(SeatMetrics); ok && t.counted.CompareAndSwap(true, false) {
		sm.SeatsHeld(t.key, t.band, -t.cost)
	}
}

// seatSure is how long after the last call Redis answered that showed a
// ticket holding its seats (seatTicket.sure) a call may open on them
// without asking Redis again: 1.25 heartbeat intervals.
// seats.lua drops a holder's seats once its record has gone 1.5 intervals
// without a call (a holder the caller's fleet does not list) or 3.5 (one
// it does not hold), and a heartbeat renews the record every interval. On
// a store (package pacertest) seats are never dropped.
func (l *Limiter) seatSure() time.Duration {
	if l.onStore != nil {
		return time.Duration(math.MaxInt64)
	}
	return l.opts.HeartbeatInterval * 5 / 4
}

// confirmSeats is the last step before a call opens on t's seats (Sleep):
// if Redis may have dropped them since it last showed them t's
// (seatTicket.sure, seatSure), it asks again, with an acquire of the same
// ticket: Redis keeps seats it still records, and queues the ticket again
// if it dropped them. It then waits for its seats as takeSeats does, in the
// key's queue, for Redis or a local share, as long as ctx allows. Seats
// the local fallback's store holds are the store's to count, and sure.
// waited reports that it asked. Before, a holder that lost Redis on the
// key for long enough went on to open calls on seats the fleet had handed
// to others (the combination runner on a Cluster, seed 27: a holder
// stopped, then the key's master frozen; 4 calls open with N = 3).
func (l *Limiter) confirmSeats(ctx context.Context, t *seatTicket) (waited bool, err error) {
	ks := l.states.get(t.key)
	ks.mu.Lock()
	t.asleep = true
	store := ks.seats != nil && ks.seats.store
	if t.state == seatHeld && (store || t.local.Load() || time.Since(t.sure) < l.seatSure()) {
		ks.mu.Unlock()
		return false, nil
	}
	if t.state == seatHeld {
		l.unholdTicket(t)
		t.state = seatPending
	}
	ks.mu.Unlock()
	maxWait := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(d), 0)
	}
	_, err = l.awaitSeats(ctx, ks, t, maxWait, false)
	return true, err
}

// openTicket notes that t's call opens (Sleep returns): from now on its
// renews list it as held.
func (l *Limiter) openTicket(t *seatTicket) {
	ks := l.states.get(t.key)
	ks.mu.Lock()
	t.open, t.asleep = true, false
	ks.mu.Unlock()
}

// closeSeats, at Close, renews the tickets of every key whose seats Redis
// may count otherwise than this Limiter's calls left them: kept on the
// store (it paces locally), a release Redis did not answer (dirty), or
// calls open still. A Limiter that closes while it paces locally would
// leave in Redis the seats its calls gave back on the store and the
// tickets that gave up waiting, until another member's call on the key
// found it gone, and for ever when none is left (combination runner on a
// Cluster, seed 34; TestSeatsCloseWhileLocal). Tried while Redis may
// answer again (the handback's calls), within budget. renewSeats skips the
// keys without a seats part: a Limiter with none makes no call.
func (l *Limiter) closeSeats(budget time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	l.renewSeats(context.WithValue(ctx, recoveryKey{}, true))
}

// reserveSeats takes sr's seats, then reserves the rest of req on its
// other bands, within maxWait in all (-1: none; as ReserveN).
func (l *Limiter) reserveSeats(ctx context.Context, req Request, sr *seatReq, maxWait time.Duration) (*Reservation, error) {
	if l.closed.Load() {
		return nil, ErrClosed
	}
	start := time.Now()
	var t *seatTicket
	if sr.cost > 0 {
		var err error
		if t, err = l.takeSeats(ctx, req.Key, sr, maxWait); err != nil {
			return nil, err
		}
	}
	var r *Reservation
	if sr.hasRest {
		left := maxWait
		if maxWait > 0 {
			left = max(maxWait-time.Since(start), 0)
		}
		s, amounts, f, err := l.check(sr.rest)
		if err == nil {
			r, err = l.reserve(ctx, names.OpReserve, req.Key, s, amounts, f, left)
		}
		if err != nil {
			if t != nil {
				l.releaseTicket(t)
			}
			return nil, err
		}
	} else {
		r = &Reservation{lim: l, key: req.Key, at: l.clock.Now(), source: SourceRedis}
		if t.local.Load() {
			r.source = SourceLocal
		}
		r.band = sr.band
	}
	if t != nil && t.waited && r.Delay() == 0 {
		// The seats were what the call waited for: the binding band.
		r.band = sr.band
	}
	if t != nil {
		unit := ""
		for _, b := range req.Policy {
			if b.InFlight != 0 {
				unit = b.Unit
				if unit == "" {
					unit = b.Name
				}
			}
		}
		r.seat, r.seatUnit = t, unit
		// From its slot on, the call may be open on its seats, unless a
		// Sleep holds it back (see unopened).
		ks := l.states.get(req.Key)
		ks.mu.Lock()
		t.openAt = time.Now().Add(r.Delay())
		ks.mu.Unlock()
	}
	return r, nil
}

// Acquire is WaitN for a call that must end: it takes req's seats on its
// in-flight band (if its policy has one), then its slot on the other
// bands, sleeps until the slot, and returns the Reservation, whose Done
// (or Settle) gives the seats back when the call ends. ctx's deadline is
// the longest it waits for both, as for WaitN; nothing is held when it
// returns an error. A policy without an in-flight band gives a Reservation
// whose Done does nothing.
//
//	r, err := lim.Acquire(ctx, req)
//	if err != nil {
//		return err
//	}
//	defer r.Done()
func (l *Limiter) Acquire(ctx context.Context, req Request) (*Reservation, error) {
	maxWait := time.Duration(-1)
	if deadline, ok := ctx.Deadline(); ok {
		maxWait = max(time.Until(deadline), 0)
	}
	var (
		r   *Reservation
		err error
	)
	if maxWait < 0 {
		r, err = l.ReserveN(ctx, req)
	} else {
		r, err = l.TryReserveN(ctx, req, maxWait)
		var tl *WaitTooLongError
		if errors.As(err, &tl) {
			tl.Deadline = true
			err = fmt.Errorf("reserve: acquire %q: %w: %w", req.Key, context.DeadlineExceeded, err)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := r.Sleep(ctx); err != nil {
		r.Done()
		return nil, err
	}
	return r, nil
}

// noteExcess records what a reply on Redis says the other holders hold
// beyond their shares of N. ks.mu is held.
func (ks *keyState) noteExcess(v any) {
	if e, ok := v.(int64); ok && e >= 0 {
		ks.seatsExcess, ks.seatsExcessAt = e, time.Now()
	}
}

// seatExcess is seats.lua's ARGV[4] in the store: what the other holders
// held beyond their shares when Redis last answered on the key, by which
// this Limiter's local share is cut. Known well enough only by a Limiter
// that had tickets on the key when its outage began (it renews them every
// heartbeat, and each reply says it) and heard within an interval (+10%)
// before Redis last answered it: what the others took in that span is in
// no figure this Limiter has. Otherwise the whole band, so that this
// Limiter takes nothing locally and its callers wait for Redis. The age
// is judged at Redis's last answer, not at the switch to local pacing: a
// loaded machine, or a call that had to time out, notices an outage late,
// and that makes the figure no older (TestSeatsOutageExcess). ks.mu is
// held.
func (l *Limiter) seatExcess(ks *keyState) string {
	ref := time.Now()
	l.health.mu.Lock()
	if l.health.degraded {
		ref = l.health.upUntil // as known when the outage began: the others' excess only drains meanwhile
	}
	l.health.mu.Unlock()
	active := false
	if ks.seats != nil {
		for _, t := range ks.seats.tickets {
			active = active || t.at.Before(ref)
		}
	}
	if ks.seatsExcessAt.IsZero() || ref.Sub(ks.seatsExcessAt) > l.opts.HeartbeatInterval*11/10 || !active {
		return strconv.Itoa(maxInFlight)
	}
	return strconv.FormatInt(ks.seatsExcess, 10)
}

// storeN is seats.lua's ARGV[5] in the store: the N the key's last reply
// on Redis gave (an operator's, if one is stored), else the code's n.
// ks.mu is held.
func (ks *keyState) storeN(n int) string {
	if ks.seatsN > 0 {
		return strconv.FormatInt(ks.seatsN, 10)
	}
	return strconv.Itoa(n)
}
