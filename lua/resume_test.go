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
