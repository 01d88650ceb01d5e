package reserve_test

import (
	"math/big"
	"time"
)

// exactLimiter is golang.org/x/time/rate's Limiter (reserveN, CancelAt,
// TokensAt), line for line, in exact rational arithmetic on nanoseconds, with
// the three changes pacer makes to CancelAt's rules (marked "pacer:" below):
// reserveN never moves lastEvent back, CancelAt never restores more than the
// reservation's n, and CancelAt moves lastEvent back no earlier than the last
// event before the canceled one's when that one's time to act lay later than
// it plus n/rate (lua/core.lua's "~e" bound). Without them, a reservation that lands in a hole left
// by a cancel sets lastEvent before a live reservation's slot, and canceling
// that live one then restores more than it held: more permits in a window
// than burst + rate*T (found by the property test).
//
// x/time/rate keeps float64 tokens and truncates durations to whole
// nanoseconds. That is harmless except in one place: CancelAt moves lastEvent
// back only if the canceled reservation's time equals lastEvent exactly, and
// after an earlier cancel has moved lastEvent back (a computed time), the two
// may differ by a nanosecond of rounding, so x/time/rate restores nothing
// where its own rule says it should. The differential test uses this model to
// tell such rounding from a bug in pacer.
type exactLimiter struct {
	rate      *big.Rat // permits per nanosecond
	burst     *big.Rat
	tokens    *big.Rat
	last      *big.Rat // ns; nil before the first call (a full bucket)
	lastEvent *big.Rat // ns
	bound     *big.Rat // ns; nil while none (pacer's "~e")
}

type exactReservation struct {
	n         int
	timeToAct *big.Rat // ns
}

func newExactLimiter(rate float64, burst int) *exactLimiter {
	r := new(big.Rat).SetFloat64(rate)
	r.Quo(r, big.NewRat(int64(time.Second), 1))
	b := big.NewRat(int64(burst), 1)
	return &exactLimiter{rate: r, burst: b, tokens: new(big.Rat).Set(b), lastEvent: new(big.Rat)}
}

func ratNS(t time.Time) *big.Rat { return big.NewRat(t.UnixNano(), 1) }

// ceilNS rounds t (ns) up to a whole nanosecond: a slot on pacer's grid.
func ceilNS(t *big.Rat) *big.Rat {
	q := new(big.Int).Quo(t.Num(), t.Denom()) // truncates toward zero
	r := new(big.Rat).SetInt(q)
	if r.Cmp(t) < 0 {
		r.Add(r, big.NewRat(1, 1))
	}
	return r
}

// nearNS reports whether a and b are within half a nanosecond: pacer's slots
// sit on a nanosecond grid, so it cannot tell such times apart.
func nearNS(a, b *big.Rat) bool {
	d := new(big.Rat).Sub(a, b)
	return d.Abs(d).Cmp(big.NewRat(1, 2)) < 0
}

func (l *exactLimiter) advance(t *big.Rat) *big.Rat {
	tokens := new(big.Rat).Set(l.tokens)
	if l.last != nil && t.Cmp(l.last) > 0 {
		elapsed := new(big.Rat).Sub(t, l.last)
		tokens.Add(tokens, elapsed.Mul(elapsed, l.rate))
	}
	if tokens.Cmp(l.burst) > 0 {
		tokens.Set(l.burst)
	}
	return tokens
}

func (l *exactLimiter) reserveN(at time.Time, n int) *exactReservation {
	t := ratNS(at)
	tokens := l.advance(t)
	tokens.Sub(tokens, big.NewRat(int64(n), 1))
	tta := new(big.Rat).Set(t)
	if tokens.Sign() < 0 {
		wait := new(big.Rat).Neg(tokens)
		tta.Add(tta, wait.Quo(wait, l.rate))
	}
	l.last, l.tokens = t, tokens
	was := l.lastEvent
	if tta.Cmp(l.lastEvent) > 0 { // pacer: x/time/rate sets lastEvent = tta unconditionally
		l.lastEvent = tta
	}
	// pacer: the latest reservation (to within pacer's 1.5 ns) whose time to
	// act lies later than the last event before it plus n/rate bounds how far
	// back its cancel moves lastEvent, while that last event is still ahead.
	tol := big.NewRat(3, 2)
	low := new(big.Rat).Sub(was, tol)
	prev := new(big.Rat).Quo(big.NewRat(int64(n), 1), l.rate)
	prev.Sub(l.lastEvent, prev)
	if tta.Cmp(low) >= 0 && prev.Cmp(low) < 0 && was.Cmp(new(big.Rat).Add(t, big.NewRat(1, 2))) > 0 &&
		(l.bound == nil || l.bound.Cmp(was) < 0) {
		l.bound = was
	}
	return &exactReservation{n: n, timeToAct: tta}
}

func (l *exactLimiter) cancelAt(r *exactReservation, at time.Time) { l.cancelWith(r, at, 0) }

// cancelWith cancels r at at and returns which of the cancel rule's yes-or-no
// decisions were taken within earlyNS of their boundary (bit i for decision
// i: 0, has the slot passed; 1, is it the latest slot; 2, does the slot
// before it fall before now; 3, does it lie beyond the last event). pacer's slots carry up to earlyNS of rounding,
// so there it may rightly take the other branch, and the balances then part
// by a whole token. A decision whose bit is set in flip takes the other
// branch if it was that close.
func (l *exactLimiter) cancelWith(r *exactReservation, at time.Time, flip uint8) (close uint8) {
	decide := func(i uint8, v, near bool) bool {
		if !near {
			return v
		}
		close |= 1 << i
		return v != (flip&(1<<i) != 0)
	}
	t := ratNS(at)
	// A slot granted at once is now exactly, in pacer too.
	if decide(0, r.timeToAct.Cmp(t) < 0, r.timeToAct.Cmp(t) != 0 && within(r.timeToAct, t, 0)) {
		return close
	}
	later := new(big.Rat).Sub(l.lastEvent, r.timeToAct)
	// pacer: a slot beyond the last event by more than the ns its grid
	// rounds up by (and half a ns of float noise) gives nothing back:
	// pacer takes it for a reservation of a state Redis lost, which it
	// cannot tell apart (adjust.lua; TestCancelBeyondLastEventGivesNothing).
	// One of this state lies there only after a cancel of the last moved
	// the last event back past a reservation granted into time an earlier
	// cancel gave back (PACER_SEED=1796397536428300528). Never over: less
	// comes back than x/time/rate gives.
	beyond := new(big.Rat).Neg(later)
	edge := big.NewRat(3, 2)
	if decide(3, beyond.Cmp(edge) > 0, within(beyond, edge, 0)) {
		return close
	}
	restore := new(big.Rat).Sub(big.NewRat(int64(r.n), 1), later.Mul(later, l.rate))
	if restore.Sign() <= 0 {
		return close
	}
	if nr := big.NewRat(int64(r.n), 1); restore.Cmp(nr) > 0 { // pacer: x/time/rate does not cap
		restore = nr
	}
	tokens := l.advance(t)
	tokens.Add(tokens, restore)
	if tokens.Cmp(l.burst) > 0 {
		tokens.Set(l.burst)
	}
	l.last, l.tokens = t, tokens
	// pacer: the latest slot to within half a ns, and the slot before it
	// no earlier than half a ns before now.
	half := big.NewRat(-1, 2)
	// The latest reservation's own slot is the latest slot, in pacer too;
	// a slot equal to one computed by an earlier cancel may not be.
	if decide(1, nearNS(r.timeToAct, l.lastEvent), r.timeToAct != l.lastEvent && within(r.timeToAct, l.lastEvent, 1)) {
		prev := new(big.Rat).Quo(big.NewRat(int64(r.n), 1), l.rate)
		prev.Sub(r.timeToAct, prev)
		if l.bound != nil && prev.Cmp(l.bound) < 0 { // pacer: the bound
			prev = l.bound
		}
		d := new(big.Rat).Sub(prev, t)
		if decide(2, d.Cmp(half) >= 0, within(d, half, 0)) {
			l.lastEvent = maxRat(prev, t)
		}
	}
	return close
}

// within reports whether |a-b| <= earlyNS + slack/2 ns.
func within(a, b *big.Rat, slack int64) bool {
	d := new(big.Rat).Sub(a, b)
	return d.Abs(d).Cmp(big.NewRat(2*earlyNS+slack, 2)) <= 0
}

// clone returns an independent copy of l (the rationals it holds are never
// modified in place).
func (l *exactLimiter) clone() *exactLimiter {
	c := *l
	return &c
}

func (l *exactLimiter) tokensAt(at time.Time) float64 {
	f, _ := l.advance(ratNS(at)).Float64()
	return f
}

// delayFrom returns the reservation's delay from at in (fractional) ns.
func (r *exactReservation) delayFrom(at time.Time) float64 {
	d := new(big.Rat).Sub(r.timeToAct, ratNS(at))
	if d.Sign() < 0 {
		return 0
	}
	f, _ := d.Float64()
	return f
}
