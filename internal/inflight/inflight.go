// Package inflight splits a request's in-flight band (reserve.Band.InFlight)
// from its other bands, for the packages that pace a call in steps
// (pacehttp, worker): they take the call's seats as a request of their own,
// held until the call ends, and its slot on the other bands as before, which
// they may give up and take again (a count's turn, an adaptive rate's cut, a
// slot kept for a rescheduled task: package hold takes no in-flight band)
// without losing the call's place in the key's queue for seats.
//
// The rules of seats stay in package reserve: a seats request is an ordinary
// reserve.Request (ReserveN, TryReserveN, Acquire), and reserve checks it.
package inflight

import (
	"fmt"

	"github.com/pacer-go/pacer/reserve"
)

// Unit is the unit a band charges: its Unit, or its Name.
func Unit(b reserve.Band) string {
	if b.Unit != "" {
		return b.Unit
	}
	return b.Name
}

// Split returns req's in-flight band as a request of its own on req's key
// (seats: the band alone, charging req's amount for its unit; ok false when
// req's policy has none), and req without it (rest: the other bands, and
// req's cost without the band's unit unless another band charges it).
// A call whose amount for the unit is 0 takes no seat: ok is false and rest
// is req without the band. A policy with two in-flight bands is refused
// with an error wrapping reserve.ErrInvalidPolicy. rest.Policy is empty when
// the in-flight band was the policy's only band. Tenant, Lane and Weight
// stay on rest: seats are handed out in the key's order.
func Split(req reserve.Request) (seats, rest reserve.Request, ok bool, err error) {
	idx := -1
	for i, b := range req.Policy {
		if b.InFlight == 0 {
			continue
		}
		if idx >= 0 {
			return reserve.Request{}, reserve.Request{}, false, fmt.Errorf("%w: two in-flight bands (%q and %q): a policy has at most one", reserve.ErrInvalidPolicy, req.Policy[idx].Name, b.Name)
		}
		idx = i
	}
	if idx < 0 {
		return reserve.Request{}, req, false, nil
	}
	band := req.Policy[idx]
	unit := Unit(band)
	rest = req
	rest.Policy = make(reserve.Policy, 0, len(req.Policy)-1)
	charged := false // another band charges unit
	for i, b := range req.Policy {
		if i == idx {
			continue
		}
		rest.Policy = append(rest.Policy, b)
		charged = charged || Unit(b) == unit
	}
	rest.Cost = make(reserve.Cost, len(req.Cost))
	for u, a := range req.Cost {
		if u != unit || charged {
			rest.Cost[u] = a
		}
	}
	seats = reserve.Request{Key: req.Key, Policy: reserve.Policy{band}}
	if a, has := req.Cost[unit]; has {
		if a == 0 {
			return reserve.Request{}, rest, false, nil
		}
		seats.Cost = reserve.Cost{unit: a}
	} else {
		// No amount: reserve refuses it, naming the unit.
		seats.Cost = reserve.Cost{}
	}
	return seats, rest, true, nil
}

// Band returns the in-flight band of policy p (ok false: none).
func Band(p reserve.Policy) (reserve.Band, bool) {
	for _, b := range p {
		if b.InFlight != 0 {
			return b, true
		}
	}
	return reserve.Band{}, false
}

// Done ends the call r was for (reserve.Reservation.Done), for a nil r too.
func Done(r *reserve.Reservation) {
	if r != nil {
		r.Done()
	}
}

// Charges reports whether a band of p charges unit.
func Charges(p reserve.Policy, unit string) bool {
	for _, b := range p {
		if Unit(b) == unit {
			return true
		}
	}
	return false
}

// SettleCost is actual for a settle of the slot taken on rest.Policy, the
// call's seats taken apart (seats, as Split gives it): the seats' unit is
// dropped unless a band of rest charges it, since seats are given back
// whole when the call ends, as reserve.Reservation.Settle does for a
// reservation that holds them.
func SettleCost(actual reserve.Cost, seats reserve.Request, rest reserve.Policy) reserve.Cost {
	if len(seats.Policy) == 0 {
		return actual
	}
	unit := Unit(seats.Policy[0])
	if _, has := actual[unit]; !has || Charges(rest, unit) {
		return actual
	}
	c := make(reserve.Cost, len(actual))
	for u, a := range actual {
		if u != unit {
			c[u] = a
		}
	}
	return c
}
