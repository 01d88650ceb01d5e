package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestMemberSharesAddUp: n members, each pacing locally at its own share
// (rank k of n) from the same state, asking as fast as their shares allow
// (and sometimes idling), never hold together more than the limit: over
// every interval T, at most burst + rate*T units on a bucket band (the
// lattice keeps members with a burst of one from firing at one instant),
// and at most N units in each window of a window band. Before member
// shares, each local share rounded the burst and N up to 1 per process: 3
// processes on a Sliding(10, 1s) let 12 calls into a second, and a daily N
// of 5 across 20 processes became 20 (issue 21, finding 5).
func TestMemberSharesAddUp(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 21))
	cases := []struct {
		rate, burst float64
		n           int
	}{
		{9, 1, 3}, // Sliding(10, time.Second) across 3
		{9, 1, 7},
		{100, 5, 3}, // burst under n... and over
		{100, 5, 8},
		{50, 20, 4}, // burst >= n: split, no lattice
		{0.5, 1, 2},
		{1000, 3, 16},
	}
	for range 20 {
		cases = append(cases, struct {
			rate, burst float64
			n           int
		}{float64(1 + r.IntN(500)), float64(1 + r.IntN(12)), 2 + r.IntN(10)})
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("rate=%v/burst=%v/n=%d", c.rate, c.burst, c.n), func(t *testing.T) {
			bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: c.rate, Burst: c.burst}}
			slots := runMembers(t, r, c.n, bands, []string{"permits"}, 400)
			for i := range slots {
				for j := i; j < len(slots); j++ {
					T := float64(slots[j]-slots[i]) / 1e9
					if n := float64(j - i + 1); n > c.burst+c.rate*T+1e-6 {
						t.Fatalf("%v units in [%d, %d] (%.6f s): want at most burst + rate*T = %.6f", n, slots[i], slots[j], T, c.burst+c.rate*T)
					}
				}
			}
		})
	}
	for _, c := range []struct {
		n     float64
		lenUS int64
		procs int
	}{{5, 1_000_000, 20}, {10, 200_000, 3}, {7, 500_000, 7}, {30, 1_000_000, 4}, {1, 100_000, 3}} {
		t.Run(fmt.Sprintf("window=%v/len=%dus/n=%d", c.n, c.lenUS, c.procs), func(t *testing.T) {
			bands := []Band{{Name: "day", Unit: 0, N: c.n, LenUS: c.lenUS, OriginUS: 123}}
			slots := runMembers(t, r, c.procs, bands, []string{"requests"}, 150)
			per := map[int64]int{}
			for _, s := range slots {
				per[(s/1000-123)/c.lenUS]++
			}
			for w, k := range per {
				if float64(k) > c.n {
					t.Fatalf("window %d holds %d units, want at most %v (all: %v)", w, k, c.n, per)
				}
			}
		})
	}
}

// runMembers runs n members on Stores of their own from an empty state,
// each reserving one unit at a time, busy (the next request at its last
// slot) or after an idle gap, until total grants; it returns every slot
// (Unix ns), sorted.
func runMembers(t *testing.T, r *rand.Rand, n int, bands []Band, units []string, total int) []int64 {
	t.Helper()
	shares := make([]Share, n)
	for k := range shares {
		shares[k] = Share{N: n, Member: k, IsMember: true}
	}
	return runShares(t, r, shares, bands, units, total)
}

// runShares is runMembers with a share of its own for each member.
func runShares(t *testing.T, r *rand.Rand, shares []Share, bands []Band, units []string, total int) []int64 {
	t.Helper()
	n := len(shares)
	start := int64(1795400000_000_000_000) + r.Int64N(1e9)
	stores := make([]*Store, n)
	next := make([]int64, n)
	for k := range stores {
		stores[k] = NewStore()
		next[k] = start + r.Int64N(1e8)
	}
	var slots []int64
	for len(slots) < total {
		k := 0
		for i := range next {
			if next[i] < next[k] {
				k = i
			}
		}
		c := Call{Key: "k", Now: next[k], Share: shares[k], Units: units, Bands: bands}
		g, _, _, err := stores[k].Reserve(c, nil, []Request{{MaxWaitUS: -1, Cost: []float64{1}}})
		if err != nil || g[0].Seq <= 0 {
			t.Fatalf("member %d: %+v, %v", k, g, err)
		}
		slot := next[k] + g[0].WaitNS
		slots = append(slots, slot)
		next[k] = max(next[k], slot)
		if r.IntN(5) == 0 {
			next[k] += r.Int64N(2e9) // idle
		}
	}
	slices.Sort(slots)
	return slots
}

// TestShareRate: a busy caller gets its share's whole rate, also when the
// share's burst is under the cost (a group of 2 of 3 members on a burst of
// 1 keeps none of it: the held member's lattice has it). Charged at the
// slot with a fill shorter than the cost, each slot left a debt, and the
// group got half its rate (the partial-partition fault test saw 133/s of
// 200 in all, where the rate was due).
func TestShareRate(t *testing.T) {
	for _, c := range []struct {
		share Share
		want  int
	}{
		{Share{}, 200},
		{Share{N: 3, Held: []int{2}}, 133},
		{Share{N: 3, Held: []int{0, 1}}, 66},
		{Share{N: 3, Member: 1, IsMember: true}, 66},
	} {
		s := NewStore()
		start := int64(1795400000_000_000_000)
		now, n := start, 0
		bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 200, Burst: 1}}
		for {
			g, _, _, err := s.Reserve(Call{Key: "k", Now: now, Share: c.share, Units: []string{"permits"}, Bands: bands}, nil, []Request{{MaxWaitUS: -1, Cost: []float64{1}}})
			if err != nil {
				t.Fatal(err)
			}
			if now+g[0].WaitNS >= start+1e9 {
				break
			}
			now += g[0].WaitNS
			n++
		}
		if n < c.want || n > c.want+2 {
			t.Errorf("share %+v: %d slots in a second, want %d", c.share, n, c.want)
		}
	}
}

// TestMixedShares: callers on Redis whose views of the fleet differ (for a
// heartbeat, one counts a member held that another counts live) reserve on
// one state at different shares; together they never pass the whole
// limit, burst + rate*T over every interval. The combination runner found
// it: a caller at half the rate, then one at the whole, on a Limit{20, 2}
// got 3 slots within 25 ms (2.5 allowed), since each read the bucket's
// balance at its own rate. Also under a stored limit below the code's.
func TestMixedShares(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 21))
	for range 200 {
		rate, burst := float64(1+r.IntN(100)), float64(1+r.IntN(8))
		bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: rate, Burst: burst}}
		s := NewStore()
		if r.IntN(2) == 0 {
			// A stored limit below the code's: the group's lattice is the
			// code's, its bucket the stored rate's (see lattice.go).
			rate *= 0.5 + 0.49*r.Float64()
			s.SetStored("k", storedText("enforce", []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: rate, Burst: burst}}, []string{"permits"}))
		}
		now := int64(1795400000_000_000_000)
		var slots []int64
		for range 60 {
			share := Share{}
			if r.IntN(2) == 0 {
				n := 2 + r.IntN(4)
				held := r.Perm(n)[:1+r.IntN(n-1)]
				slices.Sort(held)
				share = Share{N: n, Held: held}
			}
			g, _, _, err := s.Reserve(Call{Key: "k", Now: now, Share: share, Units: []string{"permits"}, Bands: bands}, nil, []Request{{MaxWaitUS: -1, Cost: []float64{1}}})
			if err != nil {
				t.Fatal(err)
			}
			slots = append(slots, now+g[0].WaitNS)
			if r.IntN(3) == 0 {
				now += r.Int64N(2e9)
			}
		}
		slices.Sort(slots)
		for i := range slots {
			for j := i; j < len(slots); j++ {
				T := float64(slots[j]-slots[i]) / 1e9
				if n := float64(j - i + 1); n > burst+rate*T+1e-6 {
					t.Fatalf("rate %v burst %v: %v units within %.6f s, want at most %.6f", rate, burst, n, T, burst+rate*T)
				}
			}
		}
	}
}

// TestGroupAndMembersAddUp: while some members pace locally (held), each on
// its own share, the others reserve on Redis as a group that leaves them
// their shares; group and members together never pass the limit. The
// combination runner found the group's slots beside a member's: on a burst
// of 1, the group's slots fell at any phase, and the members' on their
// lattice; now the group takes the lattice's instants of the ranks not held.
func TestGroupAndMembersAddUp(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 21))
	for range 100 {
		n := 2 + r.IntN(5)
		held := r.Perm(n)[:1+r.IntN(n-1)]
		slices.Sort(held)
		rate, burst := float64(1+r.IntN(300)), float64(1+r.IntN(2*n))
		bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: rate, Burst: burst}}
		start := int64(1795400000_000_000_000) + r.Int64N(1e9)
		// Who asks next: the group (index n) or a held member.
		stores := map[int]*Store{n: NewStore()}
		next := map[int]int64{n: start}
		for _, k := range held {
			stores[k] = NewStore()
			next[k] = start + r.Int64N(1e8)
		}
		var slots []int64
		for len(slots) < 300 {
			who := n
			for k, at := range next {
				if at < next[who] || (at == next[who] && k < who) {
					who = k
				}
			}
			share := Share{N: n, Held: held}
			if who < n {
				share = Share{N: n, Member: who, IsMember: true}
			}
			g, _, _, err := stores[who].Reserve(Call{Key: "k", Now: next[who], Share: share, Units: []string{"permits"}, Bands: bands}, nil, []Request{{MaxWaitUS: -1, Cost: []float64{1}}})
			if err != nil || g[0].Seq <= 0 {
				t.Fatalf("%+v %v", g, err)
			}
			slot := next[who] + g[0].WaitNS
			slots = append(slots, slot)
			next[who] = max(next[who], slot)
			if r.IntN(6) == 0 {
				next[who] += r.Int64N(1e9)
			}
		}
		slices.Sort(slots)
		for i := range slots {
			for j := i; j < len(slots); j++ {
				T := float64(slots[j]-slots[i]) / 1e9
				if k := float64(j - i + 1); k > burst+rate*T+1e-6 {
					t.Fatalf("n %d held %v rate %v burst %v: %v units within %.6f s, want at most %.6f", n, held, rate, burst, k, T, burst+rate*T)
				}
			}
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
	r := rand.New(rand.NewPCG(1, 2))
	bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 30, Burst: 1}}
	u := int64(33333334)
	for trial := range 2000 {
		s := NewStore()
		now := int64(1795400000_000_000_000) + r.Int64N(1e9)
		share := Share{N: 3, Held: []int{2}}
		var ids []int64
		var slots []int64
		for step := range 12 {
			op := r.IntN(4)
			switch op {
			case 0:
				if len(ids) > 0 {
					i := r.IntN(len(ids))
					s.Adjust(Call{Key: "k", Now: now, Share: share, Units: []string{"permits"}, Bands: bands}, strconv.FormatInt(ids[i], 10), slots[i]/1000, slots[i]%1000, []float64{1}, nil)
				}
			default:
				m := 1 + r.IntN(4)
				reqs := make([]Request, m)
				for j := range reqs {
					reqs[j] = Request{MaxWaitUS: -1, Cost: []float64{1}}
				}
				sh := share
				if r.IntN(5) == 0 {
					sh = Share{}
				}
				g, _, _, err := s.Reserve(Call{Key: "k", Now: now, Share: sh, Units: []string{"permits"}, Bands: bands}, nil, reqs)
				if err != nil {
					t.Fatal(err)
				}
				for _, x := range g {
					slot := now + x.WaitNS
					if sh.N == 3 {
						k := (slot / u) % 3
						if slot%u != 0 || k == 2 {
							t.Fatalf("trial %d step %d: slot %d off lattice (rem %d, rank %d)", trial, step, slot, slot%u, k)
						}
					}
					ids = append(ids, x.Seq)
					slots = append(slots, slot)
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
	code := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 30, Burst: 1}}
	units := []string{"permits"}
	u := int64(33333334) // the code's lattice spacing, ns
	for _, storedRate := range []float64{18.09, 25, 29.9, 45} {
		stored := storedText("enforce", []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: storedRate, Burst: 1}}, units)
		for knows := range 1 << 4 { // which of the members and the group know the stored limit
			start := int64(1795400000_000_000_000) + int64(knows)*7_777_777
			shares := []Share{{N: 4, IsMember: true, Member: 0}, {N: 4, IsMember: true, Member: 1}, {N: 4, IsMember: true, Member: 2}, {N: 4, Held: []int{0, 1, 2}}}
			var slots []int64
			for i, sh := range shares {
				s := NewStore()
				if knows&(1<<i) != 0 {
					s.Seed("k", "", stored, true)
				}
				now := start
				for range 40 {
					g, _, _, err := s.Reserve(Call{Key: "k", Now: now, Share: sh, Units: units, Bands: code}, nil, []Request{{MaxWaitUS: -1, Cost: []float64{1}}})
					if err != nil {
						t.Fatal(err)
					}
					slots = append(slots, now+g[0].WaitNS)
					now += 20_000_000
				}
			}
			slices.Sort(slots)
			for i := 1; i < len(slots); i++ {
				if d := slots[i] - slots[i-1]; d < u {
					t.Fatalf("stored %v/s known by %04b: slots %d and %d only %v ns apart (the code's spacing %d)", storedRate, knows, slots[i-1]-start, slots[i]-start, d, u)
				}
			}
		}
	}
}

// TestMembersAcrossFleetChange: right after the fleet grew from n1 to n2
// members (or shrank), a member that has not heard of it yet paces on n1,
// one that has and whose view has settled on n2, and one between the two
// keeps within both (Share.Also). Those between and those on either size
// never pass the limit together: over every interval, burst + rate*T on a
// bucket band, N in each window of a window band. (A member on n1 alone
// and one on n2 alone never pace at once: the first has not heard from
// Redis for longer than the second has known.) Without Also, a member on
// a lattice of 2 and one on a lattice of 3 fired at one instant
// (pacercombo seed 15), and bursts of 1 + 2 came at once on a burst of 2
// (seed 2).
func TestMembersAcrossFleetChange(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 21))
	type view struct{ n1, n2 int }
	for _, v := range []view{{2, 3}, {3, 2}, {2, 4}, {4, 3}, {3, 5}} {
		lo := min(v.n1, v.n2)
		// Mixes: the old size's members (ranks under both) on n1 or between;
		// then the new size's on n2 or between.
		mixes := [][]Share{}
		for _, alone := range []int{v.n1, v.n2} {
			for between := range 1 << lo {
				var mix []Share
				for k := range alone {
					sh := Share{N: alone, Member: k, IsMember: true}
					if k < lo && between&(1<<k) != 0 {
						sh = Share{N: v.n2, Member: k, IsMember: true, Also: v.n1}
					}
					mix = append(mix, sh)
				}
				mixes = append(mixes, mix)
			}
		}
		for _, c := range []struct{ rate, burst float64 }{{30, 1}, {20, 2}, {100, 3}, {50, 7}} {
			for i, mix := range mixes {
				bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: c.rate, Burst: c.burst}}
				slots := runShares(t, r, mix, bands, []string{"permits"}, 200)
				for a := range slots {
					for b := a; b < len(slots); b++ {
						T := float64(slots[b]-slots[a]) / 1e9
						if n := float64(b - a + 1); n > c.burst+c.rate*T+1e-6 {
							t.Fatalf("%d→%d mix %d %+v, rate %v burst %v: %v units within %.6f s, want at most %.6f", v.n1, v.n2, i, mix, c.rate, c.burst, n, T, c.burst+c.rate*T)
						}
					}
				}
			}
		}
		for i, mix := range mixes {
			bands := []Band{{Name: "win", Unit: 0, N: 7, LenUS: 200_000, OriginUS: 123}}
			slots := runShares(t, r, mix, bands, []string{"requests"}, 120)
			per := map[int64]int{}
			for _, s := range slots {
				per[(s/1000-123)/200_000]++
			}
			for w, k := range per {
				if k > 7 {
					t.Fatalf("%d→%d mix %d %+v: window %d holds %d units, want at most 7", v.n1, v.n2, i, mix, w, k)
				}
			}
		}
	}
}

// TestResumeKeepsLattice: a resume moves the reservations granted during
// the pause earlier by a whole number of the lattice's periods when they
// were granted on one, so they stay on the instants of the ranks not held,
// and a held member pacing locally on its own never fires beside one. The
// combination runner's seed 195: a resume moved them by the pause's unused
// part, and two calls came 16 ms apart on a burst of 1 at 30/s. A resume
// moves nothing when they were granted on lattices of two periods.
func TestResumeKeepsLattice(t *testing.T) {
	bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 30, Burst: 1}}
	units := []string{"permits"}
	u := int64(33333334) // the lattice's spacing, ns
	one := []Request{{MaxWaitUS: -1, Cost: []float64{1}}}
	for _, c := range []struct {
		name   string
		shares []Share // the group's share at each reservation during the pause, in turn
		resume int64   // ns after the pause began
		moves  bool
	}{
		{"one lattice", []Share{{N: 3, Held: []int{0}}}, 700_123_456, true},
		{"one lattice, resumed late", []Share{{N: 3, Held: []int{0}}}, 1_950_000_001, false},
		{"two lattices", []Share{{N: 3, Held: []int{0}}, {N: 4, Held: []int{0}}}, 700_123_456, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := int64(1795400000_000_000_000) + 123_456_789
			group := NewStore()
			call := func(now int64, sh Share) Call {
				return Call{Key: "k", Now: now, Share: sh, Units: units, Bands: bands}
			}
			if _, err := group.Pause(call(start, c.shares[0]), 2_000_000); err != nil {
				t.Fatal(err)
			}
			var slots []int64 // the group's, as they stand after the resume
			seqs := 0
			for i := range 12 {
				now := start + int64(i)*10_000_000
				g, _, _, err := group.Reserve(call(now, c.shares[i%len(c.shares)]), nil, one)
				if err != nil || g[0].Seq <= 0 {
					t.Fatalf("reserve: %+v, %v", g, err)
				}
				slots = append(slots, now+g[0].WaitNS)
				seqs++
			}
			at := start + c.resume
			_, moved, err := group.Resume(call(at, c.shares[0]))
			if err != nil {
				t.Fatal(err)
			}
			if moved%(3*u) != 0 || (moved > 0) != c.moves {
				t.Fatalf("moved %d ns: want a whole number of periods (%d ns), more than 0: %v", moved, 3*u, c.moves)
			}
			if len(c.shares) > 1 {
				return // the fleet changed size: members pace on both (TestMembersAcrossFleetChange)
			}
			for i := range slots {
				slots[i] -= moved
			}
			for now := at; len(slots) < 40; now += 5_000_000 {
				g, _, _, err := group.Reserve(call(now, c.shares[0]), nil, one)
				if err != nil {
					t.Fatal(err)
				}
				slots = append(slots, now+g[0].WaitNS)
				now = max(now, now+g[0].WaitNS)
			}
			// Rank 0, held, pacing locally from the pause's start.
			member := NewStore()
			last := slots[len(slots)-1]
			for now := start; now < last; {
				g, _, _, err := member.Reserve(Call{Key: "k", Now: now, Share: Share{N: 3, Member: 0, IsMember: true}, Units: units, Bands: bands}, nil, one)
				if err != nil {
					t.Fatal(err)
				}
				slots = append(slots, now+g[0].WaitNS)
				now += g[0].WaitNS + 1
			}
			slices.Sort(slots)
			for i := 1; i < len(slots); i++ {
				if d := slots[i] - slots[i-1]; d < u {
					t.Fatalf("slots %d and %d (ns after the pause began) only %d ns apart: want at least %d", slots[i-1]-start, slots[i]-start, d, u)
				}
			}
		})
	}
}

// TestResumeAfterLongerPause: a pause made longer while in force (a 429,
// then the operator's longer pause) and then resumed moves only the
// reservations granted after it was made longer: those granted before lie
// between its first end and its last, and moved by as much they would fall
// before the slots granted before the pause. The combination runner's seed
// 110: two calls 4.8 ms apart on a burst of 1 at 30/s.
func TestResumeAfterLongerPause(t *testing.T) {
	bands := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 30, Burst: 1}}
	one := []Request{{MaxWaitUS: -1, Cost: []float64{1}}}
	u := int64(33333333) // the spacing, ns (a hair under 1/30 s)
	st := NewStore()
	start := int64(1795400000_000_000_000) + 987_654_321
	call := func(now int64) Call {
		return Call{Key: "k", Now: now, Units: []string{"permits"}, Bands: bands}
	}
	slots := map[int64]int64{} // seq -> slot, ns
	reserve := func(now int64) {
		t.Helper()
		g, _, _, err := st.Reserve(call(now), nil, one)
		if err != nil || g[0].Seq <= 0 {
			t.Fatalf("reserve: %+v, %v", g, err)
		}
		slots[g[0].Seq] = now + g[0].WaitNS
	}
	for i := range 10 { // a queue into the pause
		reserve(start + int64(i)*1_000_000)
	}
	if _, err := st.Pause(call(start+20_000_000), 500_000); err != nil {
		t.Fatal(err)
	}
	for i := range 4 { // granted during the first pause: after its end
		reserve(start + 30_000_000 + int64(i)*1_000_000)
	}
	if _, err := st.Pause(call(start+40_000_000), 700_000); err != nil { // longer
		t.Fatal(err)
	}
	for i := range 4 { // after the longer pause's end
		reserve(start + 50_000_000 + int64(i)*1_000_000)
	}
	_, moved, err := st.Resume(call(start + 100_000_000))
	if err != nil {
		t.Fatal(err)
	}
	state, _, _ := st.Get("k", start+100_000_000)
	var from, to int64
	if _, err := fmt.Sscanf(state[strings.Index(state, "~s ")+3:], "%d:%d", &from, &to); err != nil {
		t.Fatalf("no resume record in %q", state)
	}
	var all []int64
	for seq, s := range slots {
		if seq > from && seq <= to {
			s -= moved
		}
		all = append(all, s)
	}
	slices.Sort(all)
	for i := 1; i < len(all); i++ {
		if d := all[i] - all[i-1]; d < u {
			t.Fatalf("slots %d and %d ns after the start only %d ns apart (moved %d ns, reservations %d to %d): want at least %d", all[i-1]-start, all[i]-start, d, moved, from+1, to, u)
		}
	}
}

// TestMixedSharesCancel: callers on Redis whose views of the fleet differ
// (TestMixedShares), cancelling as well as reserving, under a stored limit
// below the code's, never pass the limit in force. A cancel gives back what
// later reservations have not built on, measured at the whole rate's
// spacing: a caller at a share measured it at its own, longer spacing,
// found a later reservation of a caller at the whole rate built on less
// than it was, and gave back time that caller then took again (the
// combination runner's seed 98: two calls 20.9 ms apart on a burst of 1
// at 16.5/s; 30 of 2,000 random runs here).
func TestMixedSharesCancel(t *testing.T) {
	for seed := range 2000 {
		r := rand.New(rand.NewPCG(uint64(seed), 98))
		burst := float64(1 + r.IntN(5))
		units := []string{"permits"}
		s := NewStore()
		s.SetStored("k", storedText("enforce", []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 16.5, Burst: burst}}, units))
		code := []Band{{Name: "permits", Unit: 0, Bucket: true, Rate: 30, Burst: burst}}
		now := int64(1795400000_000_000_000)
		type granted struct {
			seq, slot int64
			share     Share
		}
		var live []granted
		for range 40 {
			c := Call{Key: "k", Now: now, Units: units, Bands: code}
			if r.IntN(2) == 0 {
				c.Share = Share{N: 3, Held: [][]int{{0, 1}, {0}, {1}, {0, 2}}[r.IntN(4)]}
			}
			if i := r.IntN(len(live) + 1); r.IntN(4) == 0 && i < len(live) && live[i].slot > now {
				c.Share = live[i].share // cancelled by the caller that reserved it
				if _, err := s.Adjust(c, strconv.FormatInt(live[i].seq, 10), live[i].slot/1000, live[i].slot%1000, []float64{1}, nil); err != nil {
					t.Fatal(err)
				}
				live = slices.Delete(live, i, i+1)
			} else {
				g, _, _, err := s.Reserve(c, nil, []Request{{MaxWaitUS: -1, Cost: []float64{1}}})
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, granted{g[0].Seq, now + g[0].WaitNS, c.Share})
			}
			now += r.Int64N(4e7)
		}
		var slots []int64
		for _, g := range live {
			slots = append(slots, g.slot)
		}
		slices.Sort(slots)
		for i := range slots {
			for j := i; j < len(slots); j++ {
				T := float64(slots[j]-slots[i]) / 1e9
				if n := float64(j - i + 1); n > burst+16.5*T+1e-6 {
					t.Fatalf("seed %d, burst %v: %v units within %.6f s, want at most %.6f", seed, burst, n, T, burst+16.5*T)
				}
			}
		}
	}
}
