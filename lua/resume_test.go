package lua_test

// A resume (resume.lua) moves the reservations granted during the pause
// earlier, by the same d for all of them, and never onto another slot's
// instant: not onto a held member's (the lattice), not onto those granted
// before the pause. The group runs on a real redis-server, a held member
// on a luastore Store of its own.

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestResumeKeepsLattice: a resume moves the reservations granted during
// the pause earlier by a whole number of the lattice's periods when they
// were granted on one, so they stay on the instants of the ranks not held,
// and a held member pacing locally on its own never fires beside one. The
// combination runner's seed 195: a resume moved them by the pause's unused
// part, and two calls came 16 ms apart on a burst of 1 at 30/s. A resume
// moves nothing when they were granted on lattices of two periods.
func TestResumeKeepsLattice(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	p := permits(30, 1)
	u := int64(33333334) // the lattice's spacing, ns
	for _, c := range []struct {
		name   string
		shares []string // the group's share at each reservation during the pause, in turn
		resume int64    // ns after the pause began
		moves  bool
	}{
		{"one lattice", []string{group(3, 0)}, 700_123_456, true},
		{"one lattice, resumed late", []string{group(3, 0)}, 1_950_000_001, false},
		{"two lattices", []string{group(3, 0), group(4, 0)}, 700_123_456, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			at := start + 123_456_789
			g := onRedis(t, srv)
			g.pause(at, c.shares[0], p, 2_000_000)
			var slots []int64 // the group's, as they stand after the resume
			for i := range 12 {
				now := at + int64(i)*10_000_000
				slots = append(slots, g.reserve1(now, c.shares[i%len(c.shares)], p))
			}
			resumed := at + c.resume
			moved := g.resume(resumed, c.shares[0], p)
			if moved%(3*u) != 0 || (moved > 0) != c.moves {
				t.Fatalf("moved %d ns: want a whole number of periods (%d ns), more than 0: %v", moved, 3*u, c.moves)
			}
			if len(c.shares) > 1 {
				return // the fleet changed size: members pace on both (TestMembersAcrossFleetChange)
			}
			for i := range slots {
				slots[i] -= moved
			}
			for now := resumed; len(slots) < 40; now += 5_000_000 {
				slot := g.reserve1(now, c.shares[0], p)
				slots = append(slots, slot)
				now = max(now, slot)
			}
			// Rank 0, held, pacing locally from the pause's start.
			m := local(t)
			last := slots[len(slots)-1]
			for now := at; now < last; {
				slot := m.reserve1(now, member(3, 0, 0), p)
				slots = append(slots, slot)
				now = slot + 1
			}
			slices.Sort(slots)
			for i := 1; i < len(slots); i++ {
				if d := slots[i] - slots[i-1]; d < u {
					t.Fatalf("slots %d and %d (ns after the pause began) only %d ns apart: want at least %d", slots[i-1]-at, slots[i]-at, d, u)
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
	t.Parallel()
	p := permits(30, 1)
	u := int64(33333333) // the spacing, ns (a hair under 1/30 s)
	st := onRedis(t, redistest.New(t))
	at := start + 987_654_321
	slots := map[int64]int64{} // seq -> slot, ns
	reserve := func(now int64) {
		t.Helper()
		g := st.reserve(now, whole, p, 1)[0]
		if g.seq <= 0 {
			t.Fatalf("reserve: %+v", g)
		}
		slots[g.seq] = g.slot
	}
	for i := range 10 { // a queue into the pause
		reserve(at + int64(i)*1_000_000)
	}
	st.pause(at+20_000_000, whole, p, 500_000)
	for i := range 4 { // granted during the first pause: after its end
		reserve(at + 30_000_000 + int64(i)*1_000_000)
	}
	st.pause(at+40_000_000, whole, p, 700_000) // longer
	for i := range 4 {
		// After the longer pause's end.
		reserve(at + 50_000_000 + int64(i)*1_000_000)
	}
	moved := st.resume(at+100_000_000, whole, p)
	state := st.state(at + 100_000_000)
	var from, to int64
	i := strings.Index(state, "~s ")
	if i < 0 {
		t.Fatalf("no resume record in %q", state)
	}
	if _, err := fmt.Sscanf(state[i+3:], "%d:%d", &from, &to); err != nil {
		t.Fatalf("no resume record in %q: %v", state, err)
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
			t.Fatalf("slots %d and %d ns after the start only %d ns apart (moved %d ns, reservations %d to %d): want at least %d", all[i-1]-at, all[i]-at, d, moved, from+1, to, u)
		}
	}
}

// TestResumeWindowQueue: a resume frees a key whose window band's queue,
// granted during the pause, fills more than one window: the reservations
// move earlier by whole windows, each window's units with them, and never
// into a window holding reservations granted before the pause. The
// combination runner's seeds 22 and 28: a queue of dozens of calls behind
// an operator's 11.7 s pause, on a band of a 2 s window, did not move at
// all (d 0), and the key carried almost nothing until the pause's first
// end, after the operator had resumed it. Without the pause's record of
// its windows ("~w", which a pause of an earlier release does not write),
// a resume keeps the old rule and moves such a queue not at all; nor does
// one with no band (an operator's, when the fleet reports no policy: the
// window's length is not known), which moved it by the pause's time left,
// out of its windows.
func TestResumeWindowQueue(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	const lenNS = int64(2_000_000_000)
	for _, c := range []struct {
		name    string
		p       policy
		n       int   // a window's N
		before  int   // reservations granted before the pause
		queued  int   // granted during it
		windows int64 // whole windows the queue must move (0: none)
		oldRule bool  // the pause's "~w" record taken away
		noBand  bool  // paused and resumed with no band, as an operator is when the fleet reports no policy (admin.Client)
		pauseNo bool  // paused with no band, resumed under the policy (the fleet's report came between)
	}{
		// Before the pause: slots at +0, +0.1 s and +0.2 s (at 10/s, burst
		// 1), in window 0. The pause ends at +11.3 s (window 6 of those
		// after at's) and the queue fills windows 6 to 9: it moves into 1
		// to 4, the resume being made at +1 s.
		{"bucket and window", policy{[]string{"requests"}, []band{bucket("rps", 1, 10, 1), window("win", 1, 12, 2_000_000, 0)}}, 12, 3, 40, 5, false, false, false},
		// Before the pause: 10 units in windows 0 to 3 (3, 3, 3, 1). The
		// queue, in windows 6 to 12, moves to 4 to 10: not into 3.
		{"window alone, queued before the pause", policy{[]string{"requests"}, []band{window("win", 1, 3, 2_000_000, 0)}}, 3, 10, 20, 2, false, false, false},
		{"a pause of an earlier release", policy{[]string{"requests"}, []band{bucket("rps", 1, 10, 1), window("win", 1, 12, 2_000_000, 0)}}, 12, 3, 40, 0, true, false, false},
		{"an operator's", policy{[]string{"requests"}, []band{bucket("rps", 1, 10, 1), window("win", 1, 12, 2_000_000, 0)}}, 12, 3, 40, 0, false, true, false},
		{"an operator's, queued before the pause", policy{[]string{"requests"}, []band{window("win", 1, 3, 2_000_000, 0)}}, 3, 10, 20, 0, false, true, false},
		// The combination runner's seed 23: a pause made before the fleet
		// reported its policy, a resume after. The pause's "~w" needs no
		// window's length: its windows move as under the policy.
		{"paused with no band", policy{[]string{"requests"}, []band{bucket("rps", 1, 10, 1), window("win", 1, 12, 2_000_000, 0)}}, 12, 3, 40, 5, false, false, true},
		{"paused with no band, queued before the pause", policy{[]string{"requests"}, []band{window("win", 1, 3, 2_000_000, 0)}}, 3, 10, 20, 2, false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := onRedis(t, srv)
			at := start + 987_654_321 // in window 0 (start is on a boundary)
			var before, queued []int64
			for i := range c.before {
				before = append(before, st.reserve1(at+int64(i)*1_000, whole, c.p))
			}
			none := policy{}
			if c.noBand || c.pauseNo {
				st.pause(at+300_000_000, whole, none, 11_000_000)
			} else {
				st.pause(at+300_000_000, whole, c.p, 11_000_000)
			}
			if c.oldRule {
				st.dropRecord(at+300_000_000, "~w")
			}
			for i := range c.queued {
				queued = append(queued, st.reserve1(at+400_000_000+int64(i)*10_000_000, whole, c.p))
			}
			resumed := at + 1_000_000_000
			var moved int64
			if c.noBand {
				moved = st.resume(resumed, whole, none)
			} else {
				moved = st.resume(resumed, whole, c.p)
			}
			if moved != c.windows*lenNS {
				t.Fatalf("moved %d ns: want %d windows of %d ns (state %q)", moved, c.windows, lenNS, st.state(resumed))
			}
			all := slices.Clone(before)
			for _, s := range queued {
				all = append(all, s-moved)
			}
			last := all[len(all)-1]
			for now := resumed; len(all) < c.before+c.queued+2*c.n; now += 5_000_000 {
				all = append(all, st.reserve1(now, whole, c.p))
			}
			if fresh := all[c.before+c.queued]; fresh < last {
				t.Fatalf("a fresh reservation at %d ns after at, before the queue's last at %d", fresh-at, last-at)
			} else if c.windows > 0 && fresh > last+lenNS {
				t.Fatalf("a fresh reservation at %d ns after at, more than a window after the queue's last at %d", fresh-at, last-at)
			}
			count := map[int64]int{}
			for _, s := range all {
				count[s/lenNS]++
				if count[s/lenNS] > c.n {
					t.Fatalf("window %d holds more than %d reservations (slots, ns after at: %v)", s/lenNS-start/lenNS, c.n, offsets(all, at))
				}
			}
			slices.Sort(all)
			if c.p.bands[0].kind == "b" {
				for i := 1; i < len(all); i++ {
					if d := all[i] - all[i-1]; d < 100_000_000 {
						t.Fatalf("slots %d and %d ns after at only %d ns apart at 10/s, burst 1", all[i-1]-at, all[i]-at, d)
					}
				}
			}
		})
	}
}

// offsets returns slots as ns after at.
func offsets(slots []int64, at int64) []int64 {
	out := make([]int64, len(slots))
	for i, s := range slots {
		out[i] = s - at
	}
	return out
}
