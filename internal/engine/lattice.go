package engine

import "math"

// A lattice places a member's slots on the server's clock so that the
// fleet's members, each pacing locally on its share, add up to the limit
// exactly (see core.lua's ARGV[3]). Without it, n members whose buckets hold
// a burst of one each could all fire at the same instant: n calls where the
// limit's burst allows fewer. The fleet's spacing u = 1/rate is shared out
// by rank, member k taking the instants (j*n + k)*u, so that two members
// never share an instant and in any interval of length T the members' slots
// hold at most burst + rate*T (each member's bucket, of burst B_k = 1 + its
// share of burst - 1, gives at most B_k - 1 more than its lattice points).
//
// Only a bucket band whose burst is under the fleet's size needs one; with
// several such bands, the slowest gets it (a slot is one instant) and the
// others may pass their limit by the members' fencepost, n - burst units in
// the worst alignment. Slots are placed on the server's clock as this
// process estimates it: an error in that estimate under half of u keeps the
// bound.
type lattice struct {
	band  *band
	step  int64 // n*u, in ns
	phase int64 // k*u
}

// maxStep bounds a lattice's step, so that the arithmetic stays in int64.
const maxStep = int64(1) << 50

// newLattice returns the lattice of a member's slots, nil if it needs none.
// The band it places gets the lattice's spacing as its own (step/1000 µs
// per unit), so that its schedule keeps to the lattice.
func (g *Group) newLattice() *lattice {
	if !g.share.IsMember || g.share.N < 2 {
		return nil
	}
	var slow *band
	for _, b := range g.bands {
		if b.bucket && b.burst < float64(g.share.N) && (slow == nil || b.rate < slow.rate) {
			slow = b
		}
	}
	if slow == nil {
		return nil
	}
	u := math.Ceil(1e9 / slow.rate)
	if u*float64(g.share.N) > float64(maxStep) {
		return nil
	}
	l := &lattice{band: slow, step: int64(u) * int64(g.share.N), phase: int64(u) * int64(g.share.Member)}
	slow.upp = float64(l.step) / 1000
	slow.fill = slow.eff * slow.upp
	slow.z, slow.e = -slow.fill, -slow.fill
	return l
}

// up returns the first instant of the lattice at or after t (Unix ns).
func (l *lattice) up(t int64) int64 {
	d := t - l.phase
	j := d / l.step
	if d%l.step > 0 {
		j++ // (Go truncates toward zero: for d < 0, j is already the ceiling)
	}
	return j*l.step + l.phase
}
