package reserve

import (
	"testing"
	"time"
)

// TestOutageSoonAfterOutage: a Limiter back from one outage loses Redis
// again within the few heartbeats it keeps back the members Redis had not
// listed yet, and the first heartbeat after the second outage comes later
// than that. Redis (restarted empty) lists only this Limiter: it must still
// take only its own rank's share of the fleet it knew, since the others may
// be pacing locally on theirs. Before, that heartbeat found the first
// recovery's time over and forgot the fleet remembered when the second
// outage began: this Limiter took the whole of each key on Redis (the
// combination runner, seed 13: three members' slots at one instant).
func TestOutageSoonAfterOutage(t *testing.T) {
	f := &fleetView{remember: 300 * time.Millisecond}
	f.update(3, 1, 3, 0, nil)
	f.leaving() // the first outage
	f.recovered()
	f.update(3, 1, 3, 0, nil)
	f.backAt = time.Now().Add(-100 * time.Millisecond)
	f.leaving()            // the second, 100 ms after the first ended
	time.Sleep(f.remember) // the first heartbeat that answers comes later
	// Redis restarted empty: this Limiter alone, at the rank it asked for.
	f.update(2, 1, 1, 0, nil)
	f.recovered()
	f.update(2, 1, 1, 0, nil)
	if got := f.redisShare().Arg(); got != "3 0 2" {
		t.Fatalf("back from the second outage, the share on Redis is %q; want rank 1's of 3 (\"3 0 2\")", got)
	}
	ls, _ := f.localShare()
	if ls.N != 3 || ls.Member != 1 {
		t.Fatalf("the local share is rank %d of %d; want 1 of 3", ls.Member, ls.N)
	}
}

// TestJoinWaitStartsAgain: a Limiter started while Redis was down waits
// after its first heartbeat that succeeds before it learns the fleet; when
// Redis fails again meanwhile (restarted empty), the wait starts again from
// the next heartbeat that succeeds. Before, the wait ran on through the
// second outage, and the Limiter learned a fleet of one from its first
// heartbeat after it, while the others still paced locally (combination
// runner, seed 2).
func TestJoinWaitStartsAgain(t *testing.T) {
	f := &fleetView{born: true, join: 50 * time.Millisecond}
	f.update(3, 2, 3, 0, nil) // the first heartbeat that succeeds
	if f.joining() == 0 {
		t.Fatal("no join wait")
	}
	f.joinFailed() // Redis fails again
	time.Sleep(f.join)
	f.update(1, 2, 1, 0, nil) // back, restarted empty: alone
	if _, known := f.size(); known {
		t.Fatal("learned the fleet from its first heartbeat after the second outage")
	}
	if f.joining() == 0 {
		t.Fatal("the join wait did not start again")
	}
}

// TestOutageWhileMembersMissing: back from an outage on a Redis restarted
// empty, a Limiter takes its own rank's share of the fleet it knew while
// members are missing; when Redis fails again before they are back, it
// paces locally on that same share, not on the smaller fleet Redis listed
// (before, a fleet of 2 of 3: its local slots fell on the lattice instants
// of the third member's rank, combination runner seed 29).
func TestOutageWhileMembersMissing(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(3, 0, 3, 0, nil)
	f.leaving()
	f.update(2, 0, 2, 0, nil) // restarted empty: two of three back
	f.recovered()
	if got := f.redisShare().Arg(); got != "3 1 2" {
		t.Fatalf("on Redis with a member missing: share %q, want rank 0's of 3", got)
	}
	f.leaving() // Redis fails again
	ls, _ := f.localShare()
	if ls.N != 3 || ls.Member != 0 {
		t.Fatalf("pacing locally: rank %d of %d, want 0 of 3", ls.Member, ls.N)
	}
}
