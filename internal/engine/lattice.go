package engine

import "math"

// A lattice places slots on the server's clock so that the fleet's members,
// some pacing locally each on its own share and the others on Redis as a
// group, add up to the limit exactly (see core.lua's ARGV[3]). Without it, n
// members whose buckets hold a burst of one each could all fire at the same
// instant: n calls where the limit's burst allows fewer. The fleet's spacing
// u = ceil(1e9/rate) ns is shared out by rank: the instants (j*n + k)*u
// belong to rank k. A member takes its own rank's instants; a group on Redis
// takes those of the ranks not held. Two of them never share an instant,
// and in any interval of length T all of them together fire at most
// rate*T + 1 times, within burst + rate*T.
//
// The lattice's rate is the caller's (the code's) for the band, even when a
// stored limit sets another: members pace by the stored limit they last
// learned, and one set just before Redis failed, or during the outage, is
// known to some and not to others (the group on Redis knows it at once).
// Each takes its own instants of the one lattice and thins them to the
// rate it paces by (its bucket); lattices of different rates would cross,
// and two members fire within a few ms on a burst of one. A stored limit
// above the code's is kept to the code's lattice while members are held.
//
// Only a bucket band whose burst is under the fleet's size needs one (a
// larger burst is split by rank, a part of at least one each); with several
// such bands, the slowest gets it (a slot is one instant) and the others
// may pass their limit by the members' fencepost, n - burst units in the
// worst alignment. Slots are placed on the server's clock as each process
// estimates it: an error in that estimate under half of u keeps the bound.
// The period n*u stays under 2^40 ns (rates of a few per hour and up) for
// the arithmetic to be exact in the scripts' doubles; slower bands get no
// lattice.
type lattice struct {
	band   *band
	u      int64                // ns
	period int64                // n*u
	phase  int64                // now's position in the period
	takes  func(idx int64) bool // whether the instant idx*u is this caller's
}

// maxPeriod bounds a lattice's period (core.lua's 1099511627776).
const maxPeriod = int64(1) << 40

// newLattice returns the lattice of a share's slots, nil if it needs none:
// a member's (its own rank's instants) or a group's (the ranks not held).
func (g *Group) newLattice() *lattice {
	s := g.share
	if s.Whole() {
		return nil
	}
	also := 0 // a member's other fleet size (Share.Also)
	if s.IsMember && s.Also > 1 {
		also = s.Also
	}
	var slow *band
	for _, b := range g.bands {
		if b.bucket && b.burst < float64(max(s.N, also)) && (slow == nil || b.lat < slow.lat) {
			slow = b
		}
	}
	if slow == nil {
		return nil
	}
	u := int64(math.Ceil(1e9 / slow.lat))
	// The period: the fleet's size, or, for a member between two, the
	// least common multiple of those whose lattices it keeps to.
	n, m := int64(1), int64(1)
	if slow.burst < float64(s.N) {
		n = int64(s.N)
	}
	if also > 0 && slow.burst < float64(also) {
		m = int64(also)
	}
	period := n * m / gcd(n, m)
	if u*period > maxPeriod {
		return nil
	}
	l := &lattice{band: slow, u: u, period: u * period}
	if s.IsMember {
		k := int64(s.Member)
		l.takes = func(idx int64) bool { return idx%n == k%n && idx%m == k%m }
	} else {
		// The lattice keeps the group to its share: one slot per instant of
		// the ranks not held, which are u apart at the closest. So its
		// bucket spaces slots at the whole rate, one at a time (a burst of
		// 1: no two slots at one instant): at the share's rate a group of 2
		// ranks of 3 could never take two instants u apart, and got half
		// its share. Under a stored rate below the lattice's, the lattice
		// alone would give the group more than its share of the stored
		// rate: its bucket keeps the share's spacing instead, still one at
		// a time (a larger burst would reach back before another caller's
		// slot on the same state: a caller whose view of the fleet differs
		// for a heartbeat takes the whole rate). The group then stays within
		// its share but cannot use runs of its instants: with 1 rank of 3
		// held and 25/s stored under the code's 30/s, it gets 60% of its
		// share while the member is held.
		if slow.rate >= slow.lat {
			slow.upp = 1e6 / slow.rate
		}
		slow.eff, slow.fill = 1, slow.upp
		slow.z, slow.e = -slow.fill, -slow.fill
		held := make(map[int]bool, len(s.Held))
		for _, k := range s.Held {
			held[k] = true
		}
		l.takes = func(idx int64) bool { return !held[int(idx%int64(s.N))] }
	}
	m1 := g.nowUS % l.period
	if m1 < 0 {
		m1 += l.period
	}
	l.phase = (m1*1000 + g.nowNS) % l.period
	return l
}

// snap is core.lua's snap: q (µs relative to now, on the grid) moved up to
// the lattice's next instant of a rank the caller takes.
func (g *Group) snap(q float64) float64 {
	l := g.lattice
	w := g.tell(q)
	pos := (l.phase + w) % l.period
	idx := (pos + l.u - 1) / l.u
	for !l.takes(idx) {
		idx++
	}
	return float64(w+idx*l.u-pos) / 1000
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
