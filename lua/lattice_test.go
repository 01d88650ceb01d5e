package lua_test

// The lattice (core.lua): while members pace locally on a bucket whose
// burst is under the fleet's size, each on its own rank's instants, the
// group on Redis takes the instants of the ranks not held, and no two of
// them fire at one instant. The group runs on a real redis-server, each
// held member on a luastore Store of its own.

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestGroupAndMembersAddUp: while some members pace locally (held), each on
// its own share, the others reserve on Redis as a group that leaves them
// their shares; group and members together never pass the limit. The
// combination runner found the group's slots beside a member's: on a burst
// of 1, the group's slots fell at any phase, and the members' on their
// lattice; now the group takes the lattice's instants of the ranks not held.
func TestGroupAndMembersAddUp(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	r := rand.New(rand.NewPCG(9, 21))
	for range trials(100, 10) {
		n := 2 + r.IntN(5)
		held := r.Perm(n)[:1+r.IntN(n-1)]
		slices.Sort(held)
		rate, burst := float64(1+r.IntN(300)), float64(1+r.IntN(2*n))
		p := permits(rate, burst)
		at := start + r.Int64N(1e9)
		// Who asks next: the group (index n) or a held member.
		stores := map[int]*store{n: onRedis(t, srv)}
		next := map[int]int64{n: at}
		for _, k := range held {
			stores[k] = local(t)
			next[k] = at + r.Int64N(1e8)
		}
		var slots []int64
		for len(slots) < 300 {
			who := n
			for k, when := range next {
				if when < next[who] || (when == next[who] && k < who) {
					who = k
				}
			}
			share := group(n, held...)
			if who < n {
				share = member(n, who, 0)
			}
			slot := stores[who].reserve1(next[who], share, p)
			slots = append(slots, slot)
			next[who] = max(next[who], slot)
			if r.IntN(6) == 0 {
				next[who] += r.Int64N(1e9)
			}
		}
		slices.Sort(slots)
		if i, j, over := overBucket(slots, rate, burst); over {
			T := float64(slots[j]-slots[i]) / 1e9
			t.Fatalf("n %d held %v rate %v burst %v: %d units within %.6f s, want at most %.6f", n, held, rate, burst, j-i+1, T, burst+rate*T)
		}
	}
}

// TestGroupSlotsOnLattice: a group's slots (batches, cancels, and calls at
// the whole share between them) lie on the lattice instants of the ranks
// not held, exactly. Before, a bucket's next slot a hair above its own ns
// (float noise) counted as a move on every pass of earliest, which gave up
// after 8 without snapping: a batch's slot fell half a spacing off the
// lattice, on no rank's instant, beside a held member's (the combination
// runner saw 2 calls within 17 ms at 30/s, burst 1).
func TestGroupSlotsOnLattice(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	r := rand.New(rand.NewPCG(1, 2))
	p := permits(30, 1)
	u := int64(33333334)
	share := group(3, 2)
	for trial := range trials(2000, 300) {
		s := onRedis(t, srv)
		now := start + r.Int64N(1e9)
		var granted []grant
		for step := range 12 {
			switch op := r.IntN(4); op {
			case 0:
				if len(granted) > 0 {
					s.cancel(now, share, p, granted[r.IntN(len(granted))])
				}
			default:
				m := 1 + r.IntN(4)
				sh := share
				if r.IntN(5) == 0 {
					sh = whole
				}
				for _, g := range s.reserve(now, sh, p, m) {
					if sh == share {
						k := (g.slot / u) % 3
						if g.slot%u != 0 || k == 2 {
							t.Fatalf("trial %d step %d: slot %d off lattice (rem %d, rank %d)", trial, step, g.slot, g.slot%u, k)
						}
					}
					granted = append(granted, g)
				}
			}
			now += r.Int64N(2e8)
		}
	}
}

// TestLatticeAcrossStoredLimits: members that pace one key by different
// rates, because some learned a stored limit the others did not (it was
// set just before Redis failed, or during the outage, while the group on
// Redis already paces by it), still never fire at one instant: the lattice
// is the code's, whatever the stored limit, and each member or group
// thins its own instants to the rate it paces by. Before, each took the
// lattice of the rate it knew, and the lattices crossed: two calls 2.8 ms
// apart on a burst of 1 at 30/s (pacercombo seeds 59 and 62).
func TestLatticeAcrossStoredLimits(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	code := permits(30, 1)
	u := int64(33333334) // the code's lattice spacing, ns
	for _, storedRate := range []float64{18.09, 25, 29.9, 45} {
		stored := permits(storedRate, 1).stored()
		for knows := range 1 << 4 { // which of the members and the group know the stored limit
			at := start + int64(knows)*7_777_777
			// Three members pacing locally, then the group on Redis.
			shares := []string{member(4, 0, 0), member(4, 1, 0), member(4, 2, 0), group(4, 0, 1, 2)}
			var slots []int64
			for i, sh := range shares {
				s := local(t)
				if i == 3 {
					s = onRedis(t, srv)
				}
				if knows&(1<<i) != 0 {
					s.setStored(at, stored)
				}
				now := at
				for range trials(40, 8) {
					slots = append(slots, s.reserve1(now, sh, code))
					now += 20_000_000
				}
			}
			slices.Sort(slots)
			for i := 1; i < len(slots); i++ {
				if d := slots[i] - slots[i-1]; d < u {
					t.Fatalf("stored %v/s known by %04b: slots %d and %d only %v ns apart (the code's spacing %d)", storedRate, knows, slots[i-1]-at, slots[i]-at, d, u)
				}
			}
		}
	}
}
