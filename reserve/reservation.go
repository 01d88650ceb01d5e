package reserve

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var adjustScript = redis.NewScript(lua.Adjust)

// A Reservation holds a slot granted by a Limiter and the cost reserved for
// it. Its cost should be spent at Time() and not before; Delay says how long
// until then. A Reservation is safe for concurrent use.
//
// Sleep may move a reservation to a later slot: when a pause comes to cover
// its slot, or when it wakes too late to use it (see Options.MaxLateness).
// Time then returns the new slot.
type Reservation struct {
	lim     *Limiter
	key     string
	spec    *spec
	amounts []float64 // the cost reserved, in spec's unit order
	fair    *fairness // a fair request's tenant, lane and weight

	mu      sync.Mutex
	at      time.Time // the slot, on the Limiter's clock
	slotNS  int64     // the slot on Redis's clock (Unix ns; estimated when local); with seq, its identity
	seq     int64     // the reservation's number on its key; 0 when local
	localID string    // set when the local fallback granted it: its id on the key
	holdID  string    // the slot was kept for this holder (package hold): Cancel drops the hold
	// share is the share (ARGV[2]'s) the slot was granted at, "" if not
	// known: an adjust at the same share gets its units back at that
	// share's spacing, any other at the whole rate's (adjust.lua's "@").
	share string
	// afterPaused says the slot was granted after a pause in force: Sleep
	// looks for a resume meanwhile.
	afterPaused bool
	shifted     int64 // the last resume that moved the slot (its "~s" r)
	// ranNS is when the script that granted the slot on Redis ran (Redis's
	// clock, Unix ns; 0: granted otherwise). replyChecked says that reply
	// stands for Sleep's first pause check (see Limiter.replyCovers).
	ranNS        int64
	replyChecked bool
	state        resState
	lateMoves    int // how many times Sleep took a fresh slot for lateness (MaxLateMoves)
	// placedLate: the slot was placed this much later than the clock
	// estimate places the instant Redis granted (its reply arrived late:
	// see MaxEarly). Sleep counts it as lateness.
	placedLate time.Duration
	epoch      uint64 // the key's epoch when Redis granted the slot (keyState.epoch)
	offTurn    bool   // a fair request moved to a fresh slot: its turn was spent on the one it gave up
	givingBack bool   // giveBackUnused runs: its settle leaves the tenant's turns alone
	band       string // the binding band (see Band)
	source     Source
	// seat is the in-flight band's ticket the call holds (nil: none);
	// seatUnit and seatCost the unit and seats it charges. spec is nil
	// when the in-flight band is the policy's only one: no slot.
	seat     *seatTicket
	seatUnit string
	seatDone atomic.Bool
	// backMove: the handback told the sleeper of this local grant to take
	// a slot on Redis instead (localKey.backFloor). noted: Sleep noted it
	// among the key's local sleepers (localKey.asleep), as asleepAs, which
	// is read and written with the key's lock held.
	backMove atomic.Bool
	noted    atomic.Bool
	asleepAs string
}

type resState int

const (
	live resState = iota
	canceled
	settled
)

// Key returns the key the cost was reserved on.
func (r *Reservation) Key() string { return r.key }

// Cost returns the cost reserved (after Settle, the actual cost).
func (r *Reservation) Cost() Cost {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := Cost{}
	if r.spec != nil {
		c = r.spec.cost(r.amounts)
	}
	if r.seat != nil {
		c[r.seatUnit] = float64(r.seat.cost)
	}
	return c
}

// Done ends the call the reservation was for: the seats it holds on its
// policy's in-flight band go back to the fleet, to the next caller waiting
// in any process. It is idempotent, never fails (while Redis is unavailable
// the seats go back on the local fallback, or from Redis's count at the
// handback), and does nothing for a reservation without seats. Settle and
// Cancel end the call too; Done after them does nothing.
func (r *Reservation) Done() {
	if r.seat != nil && r.seatDone.CompareAndSwap(false, true) {
		r.lim.releaseTicket(r.seat)
	}
}

// Time returns the slot: the time, on the Limiter's clock, from which the
// cost may be spent. With Redis server time (no Options.Clock) it is the
// local time the reply arrived plus the wait Redis computed, so it is never
// earlier than the slot Redis granted.
func (r *Reservation) Time() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.at
}

// DelayFrom returns how long after t the cost may be spent; zero if it
// already may.
func (r *Reservation) DelayFrom(t time.Time) time.Duration {
	return max(0, r.Time().Sub(t))
}

// Delay is DelayFrom the Limiter's clock's now.
func (r *Reservation) Delay() time.Duration {
	return r.DelayFrom(r.lim.clock.Now())
}

// Band returns the binding band: the name of the band whose queue or
// window set the slot, PauseBinding when a pause did, or "" when the slot
// was free at once. After a move (see Sleep) it is the fresh slot's. A
// leased slot (Source SourceLease) names the key's bucket when it waits;
// a slot kept by package hold names none.
func (r *Reservation) Band() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.band
}

// Source returns what granted the slot: Redis, the local fallback or a
// lease. After a move (see Sleep) it is the fresh slot's.
func (r *Reservation) Source() Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.source
}

// Local reports whether the local fallback granted the reservation (Redis
// was unavailable).
func (r *Reservation) Local() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.localID != ""
}

// Cancel gives the cost back, as x/time/rate's CancelAt does, band by band:
// a bucket gets back what later reservations have not already built on,
// never more than the burst and never once the slot has passed, and never
// into a pause; a window gets its units back while the window lasts. A
// reservation Claim kept for a holder loses its hold. Calls after one that
// succeeded do nothing, and so does a call Redis runs twice (a resend): each
// key remembers the reservations it adjusted. If Cancel fails (Redis
// unreachable), it may be called again. Cancel after Settle returns ErrDone.
func (r *Reservation) Cancel(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch r.state {
	case canceled:
		return nil
	case settled:
		return fmt.Errorf("reserve: cancel %q: %w (settled)", r.key, ErrDone)
	}
	// The call will not be made: its seats go back whatever the adjust
	// does (a Cancel that failed may be called again for the slot).
	r.Done()
	if r.spec != nil {
		if err := r.adjust(ctx, names.OpCancel, nil); err != nil {
			return err
		}
	}
	r.state = canceled
	return nil
}

// Settle replaces the cost reserved with the actual cost, once the call has
// told it (the tokens a completion used). Units not in actual keep their
// reserved amount. A larger amount moves each bucket charging it later by
// the difference, so later reservations pay for it, and adds to the current
// window; a smaller one gives back what later reservations have not built
// on, under Cancel's rule, even after the slot (the call was made at its
// slot; what it did not use goes back). Settle is idempotent: a resent
// settle changes nothing, and a second Settle returns ErrDone, as does
// Settle after Cancel.
//
// Settles that lower a cost, and cancels, keep every band's invariant on
// actual costs exactly. A raise is paid by the reservations granted after
// it is settled: until then a band can run ahead of burst + rate × T (or
// of a window's N) by the raises not yet settled, that is, in any interval,
// by the raises of its calls settled after the last of them was granted:
// at most the calls in flight times the largest raise
// (testPolicyProperties asserts that bound).
func (r *Reservation) Settle(ctx context.Context, actual Cost) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.state != live {
		return fmt.Errorf("reserve: settle %q: %w", r.key, ErrDone)
	}
	amounts := append([]float64(nil), r.amounts...)
	// In sorted order, as spec.costs checks a reservation's: the error a
	// bad settle gets names the same unit every time.
	for _, unit := range slices.Sorted(maps.Keys(actual)) {
		v := actual[unit]
		if r.seat != nil && unit == r.seatUnit && (r.spec == nil || r.spec.unitIndex(unit) < 0) {
			continue // seats are given back whole
		}
		i := -1
		if r.spec != nil {
			i = r.spec.unitIndex(unit)
		}
		if i < 0 {
			return fmt.Errorf("reserve: settle %q: %w: unit %q is charged by no band", r.key, ErrInvalidCost, unit)
		}
		if v < 0 || v != v || v > 1e300 {
			return fmt.Errorf("reserve: settle %q: %w: %s %v (want a finite amount >= 0)", r.key, ErrInvalidCost, unit, v)
		}
		amounts[i] = v
	}
	if r.spec != nil {
		if err := r.adjust(ctx, names.OpSettle, amounts); err != nil {
			return err
		}
	}
	r.amounts = amounts
	r.state = settled
	r.Done()
	return nil
}

// adjust cancels (actual nil) or settles r, r.mu held: on Redis, or on the
// local fallback for a reservation it granted and still holds. While Redis
// is unavailable, an adjustment of a reservation Redis granted waits for
// Redis to answer again (it is made then: a raise settled meanwhile is paid
// for, a give-back given back), and the call returns nil.
func (r *Reservation) adjust(ctx context.Context, op string, actual []float64) error {
	l := r.lim
	if r.ofRedis() && l.lostSince(r.key, r.epoch, false) {
		// A reservation of a state Redis lost since (this Limiter has seen
		// the loss: keyState.epoch) gives nothing back: the state that
		// holds the key now never charged it, and adjust.lua cannot always
		// tell (a number the new state has reached, a slot within its
		// queue: TestCancelAfterLossSeenGivesNothing). A settle's raises
		// are still charged, which costs capacity, never adds any; a cancel
		// or a settle that raises nothing sends nothing, unless a hold is
		// to go with the reservation (a settle to the costs reserved then,
		// which changes nothing else).
		raised := false
		kept := append([]float64(nil), r.amounts...)
		for i, a := range actual {
			if a > kept[i] {
				kept[i], raised = a, true
			}
		}
		if !raised && r.holdID == "" {
			return nil
		}
		actual = kept
	}
	ks := l.states.get(r.key)
	ks.mu.Lock()
	ks.forgetRefusals()
	if r.localID != "" && ks.local != nil && ks.local.held {
		defer ks.mu.Unlock()
		return l.adjustLocal(ctx, ks, r, actual)
	}
	ks.mu.Unlock()
	if l.opts.FailClosed || !l.isDegraded() {
		err := r.adjustRedis(ctx, r.id(), actual)
		if err == nil || !errors.Is(err, ErrUnavailable) || l.opts.FailClosed {
			return err
		}
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if r.localID != "" && ks.local != nil && ks.local.held {
		return l.adjustLocal(ctx, ks, r, actual)
	}
	l.addPending(ks, pendingAdjust{spec: r.spec, slotNS: r.slotNS, id: r.id(), share: r.share,
		amounts: append([]float64(nil), r.amounts...), actual: actual})
	return nil
}

// turnAdjust reports whether cancelling (actual nil) or settling r moves
// its tenant's turns: a fair request's settle does, and its cancel unless
// its turn was spent on a slot it gave up (Sleep moved it); the give-back
// of a slot Sleep gives up does not (giveBackUnused).
func (r *Reservation) turnAdjust(actual []float64) bool {
	return r.fair != nil && !r.givingBack && (actual != nil || !r.offTurn)
}

// id is r's identity on its key for adjust.lua: its number, or its local id.
func (r *Reservation) id() string {
	if r.localID != "" {
		return r.localID
	}
	return strconv.FormatInt(r.seq, 10)
}

// adjustArgs are adjust.lua's ARGV for the reservation id of r's key, slot
// and amounts at share; actual nil cancels.
func (l *Limiter) adjustArgs(r *Reservation, id string, actual []float64, share string, local bool) []any {
	op := names.OpCancel
	if actual != nil {
		op = names.OpSettle
	}
	args := l.argsWith(r.key, l.clock.Now(), r.spec, 4+2*len(r.amounts), share, local)
	if share != "1" && share == r.share {
		op += "@" // made at this share: its units come back at its spacing
	}
	args = append(args, op, strconv.FormatInt(r.slotNS/1000, 10), strconv.FormatInt(r.slotNS%1000, 10), id)
	for _, a := range r.amounts {
		args = append(args, formatFloat(a))
	}
	for _, a := range actual {
		args = append(args, formatFloat(a))
	}
	if r.turnAdjust(actual) {
		// Its tenant's turns count what it cost (adjust.lua).
		args = append(args, strconv.Itoa(r.fair.lane.index())+" "+formatFloat(r.fair.weight), r.fair.tenant)
	}
	return args
}

// adjustKeys are adjust.lua's KEYS for r: its key's state, stored limit,
// adjusted reservations, and its hold, if any, or for a fair request its
// lane's turns (fairKeys: ":fair", ":fp:<lane>", ":weights", ":fw:<lane>").
func (l *Limiter) adjustKeys(r *Reservation, actual []float64) []string {
	more := []string{":done"}
	switch {
	case r.holdID != "":
		more = append(more, holdSuffix(r.holdID))
	case r.turnAdjust(actual):
		lane := r.fair.lane.index()
		more = append(more, fairKeys[1], fairKeys[4+lane], fairKeys[8], fairKeys[1+lane])
	}
	return l.keys(r.key, more...)
}

// adjustRedis runs adjust.lua on Redis for the reservation id of r's key,
// slot and amounts; actual nil cancels. The state its reply shows is what
// the key's state knows of it from then on.
func (r *Reservation) adjustRedis(ctx context.Context, id string, actual []float64) error {
	l := r.lim
	op := names.OpCancel
	if actual != nil {
		op = names.OpSettle
	}
	share, _ := l.shareArg()
	args, keys := l.adjustArgs(r, id, actual, share, false), l.adjustKeys(r, actual)
	var sent time.Time
	res, err := l.run(ctx, op, r.key, func(ctx context.Context) (any, error) {
		sent = time.Now()
		return adjustScript.Run(ctx, l.scripts, keys, args...).Result()
	}, nil)
	if err != nil {
		return err
	}
	if reply, ok := res.([]any); ok && len(reply) == 2 {
		if state, ok := reply[1].(string); ok {
			ks := l.states.get(r.key)
			ks.mu.Lock()
			ks.noteSeen(state, ks.stored, sent)
			ks.mu.Unlock()
		}
	}
	return nil
}

// cancelDetached cancels r on behalf of a caller that left: best effort,
// bounded by CallTimeout.
func (r *Reservation) cancelDetached() {
	ctx, cancel := context.WithTimeout(context.Background(), r.lim.opts.CallTimeout)
	defer cancel()
	_ = r.Cancel(ctx)
}

// maxLateness is how late after its slot r may be used (see
// Options.MaxLateness); negative: no limit.
func (r *Reservation) maxLateness() time.Duration {
	if m := r.lim.opts.MaxLateness; m != 0 {
		return m
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spec == nil {
		return -1
	}
	late := r.spec.lateness(r.amounts)
	if end := r.spec.windowEnd(r.amounts, r.at); !end.IsZero() {
		if d := end.Sub(r.at); late < 0 || d < late {
			late = d
		}
	}
	return late
}
