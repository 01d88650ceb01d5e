package reserve

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
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
	f.update(3, 1, 3, nil, 0, nil, false)
	f.leaving() // the first outage
	f.recovered()
	f.update(3, 1, 3, nil, 0, nil, false)
	f.backAt = time.Now().Add(-100 * time.Millisecond)
	f.leaving()            // the second, 100 ms after the first ended
	time.Sleep(f.remember) // the first heartbeat that answers comes later
	// Redis restarted empty: this Limiter alone, at the rank it asked for.
	f.update(2, 1, 1, nil, 0, nil, false)
	f.recovered()
	f.update(2, 1, 1, nil, 0, nil, false)
	if got := f.redisShare().Arg(); got != "3 0 2" {
		t.Fatalf("back from the second outage, the share on Redis is %q; want rank 1's of 3 (\"3 0 2\")", got)
	}
	ls, _ := f.localShare()
	if ls.N != 3 || ls.Member != 1 {
		t.Fatalf("the local share is rank %d of %d; want 1 of 3", ls.Member, ls.N)
	}
}

// TestMissingHeldWhileHeartbeatsFail: back first on a Redis restarted
// empty, this Limiter keeps back the members it knew that Redis does not
// list yet for remember; when the fleet's records then stop answering (a
// CLIENT PAUSE of their master on a Cluster, longer than remember) its
// heartbeats fail, and the others' too: they cannot be back. The first
// heartbeat that answers after the pause, listing this Limiter alone, must
// still keep their ranks back. Before, remember ran from the return and
// was over by then: it took the whole of each key on Redis beside a member
// still pacing locally (the combination runner's Cluster seed 50: two
// permits at one instant on a band of burst 1, 3 runs in 4).
func TestMissingHeldWhileHeartbeatsFail(t *testing.T) {
	f := backFirst(t)
	// The fleet's master is paused for one and a half remembers: a
	// heartbeat fails every quarter of one.
	for range 6 {
		f.ago(f.remember / 4)
		f.beatFailed()
		f.heartbeatFailed()
	}
	f.ago(f.remember / 8)
	f.update(1, 0, 1, nil, 0, nil, false) // the pause over: Redis lists this Limiter alone still
	f.taken([]int{0})
	if got := f.redisShare().Arg(); got != "3 1 2" {
		t.Fatalf("the first heartbeat after the pause: share %q, want rank 0's of 3 (\"3 1 2\"): the others could not be back", got)
	}
	if w := f.wantRank(); !strings.Contains(w, " keep ") {
		t.Fatalf("the heartbeat after the pause asks %q: want the missing ranks kept", w)
	}
	f.ago(f.remember + time.Second) // a remember of heartbeats that answered: the others had their chance
	f.update(1, 0, 1, nil, 0, nil, false)
	f.taken([]int{0})
	if got := f.redisShare().Arg(); got != "1" {
		t.Fatalf("a remember after the pause: share %q, want the whole (\"1\")", got)
	}
}

// TestNewcomerInDoubtTakesNothing: a member that joined in the fleet's
// latest change (within about a heartbeat: the reply still gives the size
// before it) takes nothing on Redis while its heartbeats fail, as it has
// no local share: a member that lost Redis meanwhile may never have heard
// of it and pace locally on a fleet without it. A member of the fleet
// before the change takes its own rank's share as before. Before, the
// Cluster's seed 31: the fleet's master froze in its first second, the
// first member paced locally on the whole key (it had heard of nobody),
// and the third took rank 2's share on Redis beside it.
func TestNewcomerInDoubtTakesNothing(t *testing.T) {
	for _, c := range []struct {
		rank int
		ok   bool
		arg  string
	}{{2, false, "3 0 1"}, {0, true, "3 1 2"}} {
		f := &fleetView{guessWait: time.Hour}
		f.update(3, c.rank, 3, nil, 2, nil, false) // a fleet of 3, 2 before the latest change
		f.heartbeatFailed()
		f.heartbeatFailed() // two in a row: no more waiting for the next
		s, ok := f.redisShareOK()
		if ok != c.ok || s.Arg() != c.arg {
			t.Errorf("rank %d of 3 (2 before), heartbeats failing: share %q, ok %v; want %q, ok %v", c.rank, s.Arg(), ok, c.arg, c.ok)
		}
		f.update(3, c.rank, 3, nil, 0, nil, false) // a heartbeat answers, the change old
		if s, ok := f.redisShareOK(); !ok || s.Arg() != "1" {
			t.Errorf("rank %d, a heartbeat answered: share %q, ok %v; want the whole", c.rank, s.Arg(), ok)
		}
	}
}

// TestMissingHeldAfterLongHandback: back first on a Redis restarted empty,
// this Limiter's handback runs on the loop that heartbeats, so none is
// made while it runs; a handback longer than remember (its keys' master
// paused, the fleet's too) must not use up the time the members not back
// yet have to come back: it counts from the handback's end, when this
// Limiter's calls go to Redis. Before, the first heartbeat after a handback
// of 3.3 s listed this Limiter alone, and it took the whole of each key
// (the combination runner's Cluster seed 50, 1 run in 8 once the case
// above was mended).
func TestMissingHeldAfterLongHandback(t *testing.T) {
	f := &fleetView{remember: time.Minute, settle: 2 * time.Second}
	f.update(3, 0, 3, nil, 0, nil, false)
	f.taken([]int{0, 1, 2})
	f.leaving()
	f.update(1, 0, 1, nil, 0, nil, false) // the probe's heartbeat: alone
	f.taken([]int{0})
	f.recovered()
	f.ago(f.remember * 3 / 2) // the handback: no heartbeat meanwhile
	f.back()
	f.update(1, 0, 1, nil, 0, nil, false) // the first heartbeat on Redis
	f.taken([]int{0})
	if got := f.redisShare().Arg(); got != "3 1 2" {
		t.Fatalf("the first heartbeat after a long handback: share %q, want rank 0's of 3 (\"3 1 2\")", got)
	}
}

// backFirst returns a view back first on a Redis restarted empty: rank 0
// of the 3 it knew, alone on Redis.
func backFirst(t *testing.T) *fleetView {
	t.Helper()
	f := &fleetView{remember: time.Minute, settle: 2 * time.Second}
	f.update(3, 0, 3, nil, 0, nil, false) // rank 0 of 3, every member on Redis
	f.taken([]int{0, 1, 2})
	f.leaving() // the fleet's master restarts empty
	f.recovered()
	f.back()
	f.update(1, 0, 1, nil, 0, nil, false) // back first: alone, at its old rank
	f.taken([]int{0})
	if got := f.redisShare().Arg(); got != "3 1 2" {
		t.Fatalf("back first: share %q, want rank 0's of 3 (\"3 1 2\")", got)
	}
	return f
}

// ago moves the view's instants back by d: as if d passed.
func (f *fleetView) ago(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backAt, f.lastBeat = f.backAt.Add(-d), f.lastBeat.Add(-d)
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
	f.update(3, 2, 3, nil, 0, nil, false) // the first heartbeat that succeeds
	if f.joining() == 0 {
		t.Fatal("no join wait")
	}
	f.joinFailed() // Redis fails again
	time.Sleep(f.join)
	f.update(1, 2, 1, nil, 0, nil, false) // back, restarted empty: alone
	if _, known := f.size(); known {
		t.Fatal("learned the fleet from its first heartbeat after the second outage")
	}
	if f.joining() == 0 {
		t.Fatal("the join wait did not start again")
	}
}

// TestJoinWaitUntilLearned: the join wait ends only with a heartbeat that
// teaches the fleet, not when its time is up. Before, a heartbeat that ran
// just before the wait's end (so it taught nothing) followed by a slow
// probe of a key (a loaded machine) found the wait over: the Limiter went
// back on Redis without having learned the fleet, on the view it had
// before the outage, and took the whole rate beside a member still pacing
// locally (TestOutageFirstBack, beside CPU hogs: 3 failures in 40).
func TestJoinWaitUntilLearned(t *testing.T) {
	f := &fleetView{born: true, join: 10 * time.Millisecond}
	if f.joining() == 0 {
		t.Fatal("no join wait before any heartbeat succeeded")
	}
	f.update(2, 1, 2, nil, 0, nil, false) // the first heartbeat that succeeds
	time.Sleep(2 * f.join)                // the wait's time is up, with no heartbeat since
	if f.joining() == 0 {
		t.Fatal("the join wait ended with no heartbeat to learn the fleet from")
	}
	f.update(2, 1, 2, nil, 0, []int{0}, false) // the heartbeat after the wait
	if w := f.joining(); w != 0 {
		t.Fatalf("joining %v after the fleet was learned", w)
	}
	if n, known := f.size(); !known || n != 2 {
		t.Fatalf("size %d (known %v), want 2", n, known)
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
	f.update(3, 0, 3, nil, 0, nil, false)
	f.leaving()
	f.update(2, 0, 2, nil, 0, nil, false) // restarted empty: two of three back
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

// TestHeartbeatFleetChange: the heartbeat reports the fleet's size before
// its latest change while that change is younger than two suspect
// intervals, so that a member losing Redis then keeps to both sizes. In a
// fleet switched to format 3 too (the heartbeat's indexes).
func TestHeartbeatFleetChange(t *testing.T) {
	for _, format := range []string{"2", "3"} {
		t.Run("format="+format, func(t *testing.T) { testHeartbeatFleetChange(t, format) })
	}
}

func testHeartbeatFleetChange(t *testing.T, format string) {
	s := redistest.New(t)
	ctx := context.Background()
	keys := layout.FleetKeys(redistest.Prefix(t))
	if err := s.Client.Set(ctx, keys[6], format, 0).Err(); err != nil {
		t.Fatal(err)
	}
	beat := func(id string, suspectMS int) (n, before int64) {
		t.Helper()
		r, err := heartbeatScript.Run(ctx, s.Client, keys, id, "redis", "0 0 0", 60000, 60000, suspectMS, 60000, "").Slice()
		if err != nil {
			t.Fatal(err)
		}
		return r[4].(int64), r[8].(int64)
	}
	check := func(what string, n, before, wantN, wantBefore int64) {
		t.Helper()
		if n != wantN || before != wantBefore {
			t.Fatalf("%s: n %d, before %d; want %d, %d", what, n, before, wantN, wantBefore)
		}
	}
	n, b := beat("a", 60000)
	check("a alone", n, b, 1, 0)
	n, b = beat("b", 60000)
	check("b joins", n, b, 2, 1)
	n, b = beat("a", 60000)
	check("a hears of b", n, b, 2, 1)
	time.Sleep(5 * time.Millisecond)
	n, b = beat("a", 1)
	check("the change settled", n, b, 2, 0)
	n, b = beat("c", 60000)
	check("c joins", n, b, 3, 2)
	if _, err := heartbeatScript.Run(ctx, s.Client, keys, "c", "leave").Result(); err != nil {
		t.Fatal(err)
	}
	n, b = beat("b", 60000)
	check("c left at once", n, b, 2, 3)
}

// TestOutageRightAfterFleetChange: a member that loses Redis while the
// fleet's latest change is young keeps its local share within both sizes
// (core.lua's member share with an "also" size); one that joined in that change has none, and says
// why. Before, a member that had heard of a third member paced on a lattice
// of 3 while one that had not paced on a lattice of 2, and both fired at one
// instant (combination runner, seeds 2 and 15).
func TestOutageRightAfterFleetChange(t *testing.T) {
	f := &fleetView{}
	f.update(3, 1, 3, nil, 2, nil, false) // rank 1 of 3, the fleet was 2 just now
	f.leaving()
	ls, ok := f.localShare()
	if !ok || ls.N != 3 || ls.Member != 1 || ls.Also != 2 {
		t.Fatalf("local share %+v (ok %v); want rank 1 of 3, also within 2", ls, ok)
	}
	f.update(3, 1, 3, nil, 0, nil, false) // back: the change settled
	f.recovered()
	f.back()
	if ls, _ := f.localShare(); ls.Also != 0 {
		t.Fatalf("back on Redis the local share keeps %d", ls.Also)
	}
	f.update(2, 1, 2, nil, 3, nil, false) // rank 1 of 2, the fleet was 3 just now
	f.leaving()
	if ls, _ := f.localShare(); ls.N != 2 || ls.Also != 3 {
		t.Fatalf("after a member left: %+v, want 2 also within 3", ls)
	}
	for _, c := range []struct{ n, rank, before int }{{3, 2, 2}, {2, 1, 1}} {
		g := &fleetView{}
		g.update(c.n, c.rank, c.n, nil, c.before, nil, false) // the newcomer
		g.leaving()
		if _, ok := g.localShare(); ok || !g.newcomer() {
			t.Fatalf("a member that joined just now (rank %d of %d, %d before) paces locally", c.rank, c.n, c.before)
		}
	}
	h := &fleetView{}
	h.update(4, 0, 3, []int{3}, 0, []int{1}, false) // rank 1 paces locally on a fleet of 3 it knew
	if ls, ok := h.localShare(); !ok || ls.N != 4 || ls.Also != 3 {
		t.Fatalf("beside a member pacing on 3: %+v (ok %v), want 4 also within 3", ls, ok)
	}
	h.update(4, 3, 3, []int{3}, 0, []int{1}, false) // the member that joined after it
	if _, ok := h.localShare(); ok || !h.newcomer() {
		t.Fatal("a member that joined after a held member paces locally")
	}
	g := &fleetView{}
	g.update(2, 0, 2, nil, 1, nil, false) // was alone just now
	g.leaving()
	if ls, ok := g.localShare(); !ok || ls.N != 2 || ls.Member != 0 {
		t.Fatalf("the member that was alone: %+v (ok %v), want rank 0 of 2", ls, ok)
	}
}

// TestBackTogether: two members back on a Redis restarted empty, while the
// third is not, each leave only the missing one's share, so that together
// they take two thirds of a key. Before, each left all the others' shares
// and charged its calls at a third's spacing on the one state: a third
// together, and a queue seconds long when they were whole again
// (combination runner seed 100: 0.36 of the limit used).
func TestBackTogether(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(3, 2, 3, nil, 0, nil, false)
	f.leaving()
	f.update(3, 2, 1, nil, 0, nil, false) // back first, at its old rank 2
	f.taken([]int{2})
	f.recovered()
	if got := f.redisShare().Arg(); got != "3 0 1" {
		t.Fatalf("alone back: share %q, want rank 2's of 3 (\"3 0 1\")", got)
	}
	f.update(3, 2, 2, nil, 0, nil, false) // rank 1 back too
	f.taken([]int{1, 2})
	if got := f.redisShare().Arg(); got != "3 0" {
		t.Fatalf("two back: share %q, want ranks 1 and 2's (\"3 0\")", got)
	}
	f.update(3, 2, 3, nil, 0, []int{0}, false) // rank 0 heard from, pacing locally (held)
	f.taken([]int{0, 1, 2})
	if got := f.redisShare().Arg(); got != "3 0" {
		t.Fatalf("rank 0 held: share %q, want \"3 0\"", got)
	}
}

// TestNewcomerWaitsToJoin: a member that joined just before Redis failed
// (others may pace locally without it) waits, when Redis answers again, as
// one started while Redis was down does: it learns the fleet only after the
// join wait (it stays off Redis meanwhile: the health loop keeps a Limiter
// that is joining degraded), and refuses locally. Before, it came back as a
// member of the fleet it remembered (a lattice of 3) while the others still
// paced locally on 2: a call of each at one instant (combination runner,
// seed 71).
func TestNewcomerWaitsToJoin(t *testing.T) {
	f := &fleetView{join: 50 * time.Millisecond, remember: time.Minute}
	f.update(3, 2, 3, nil, 2, nil, false) // rank 2 of 3, the fleet was 2 just now
	f.leaving()
	if !f.born {
		t.Fatal("the newcomer does not wait to join")
	}
	f.update(3, 2, 1, nil, 0, nil, false) // Redis restarted empty: back alone
	if f.joining() == 0 {
		t.Fatal("no join wait")
	}
	if _, ok := f.localShare(); ok || !f.newcomer() {
		t.Fatal("the newcomer paces locally while it waits")
	}
	time.Sleep(f.join)
	f.update(2, 0, 2, nil, 0, nil, false)
	if f.born || f.joining() != 0 {
		t.Fatal("did not join after the wait")
	}
}

// TestHeartbeatStale: a heartbeat Redis runs after its deadline (it stalled:
// frozen, a long fork, and ran the commands queued meanwhile when it
// resumed) is refused and changes nothing: its Limiter has given up on it,
// and may be pacing locally by then. Before, a heartbeat sent before a
// freeze ran after it in mode "redis", and the others took that member's
// share while it still paced locally (combination runner, seed 72).
func TestHeartbeatStale(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	keys := layout.FleetKeys(redistest.Prefix(t))
	k := keys[0]
	now := time.Now().UnixMilli()
	err := heartbeatScript.Run(ctx, s.Client, keys, "a", "redis", "0 0 0", 60000, 60000, 60000, 60000, "", now-10_000).Err()
	if err == nil || !strings.HasPrefix(err.Error(), "PACER_STALE") {
		t.Fatalf("a heartbeat past its deadline: %v, want PACER_STALE", err)
	}
	if n, _ := s.Client.Exists(ctx, k, k+":info", k+":ids").Result(); n != 0 {
		t.Fatalf("the stale heartbeat wrote %d keys", n)
	}
	if err := heartbeatScript.Run(ctx, s.Client, keys, "a", "redis", "0 0 0", 60000, 60000, 60000, 60000, "", now+60_000).Err(); err != nil {
		t.Fatalf("a heartbeat within its deadline: %v", err)
	}
	if _, err := s.Client.ZScore(ctx, k, "a").Result(); err != nil {
		t.Fatalf("the heartbeat within its deadline was not recorded: %v", err)
	}
}

// TestHeartbeatDeadlineIsTheCalls: a heartbeat's deadline is when its
// Limiter gives up on it, the call's timeout, which a slow machine
// lengthens (callTimeout), not CallTimeout. Here Redis holds the heartbeat
// back 300 ms (CLIENT PAUSE) while this Limiter, which learned slow round
// trips, waits up to 2 s for it: it must be recorded. Before, its
// deadline was CallTimeout (50 ms) after it was sent and Redis refused it
// (PACER_STALE): on a loaded machine, heartbeats their Limiters still
// waited for failed by the hundreds, and views in doubt followed
// (pacerbench's cluster phase, 300 processes).
func TestHeartbeatDeadlineIsTheCalls(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	l, err := New(s.Client, Options{KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler), CallTimeout: 50 * time.Millisecond, HeartbeatInterval: time.Hour, SilentHold: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	// A call that reads the server's clock: the estimate.
	if _, err := l.Reserve(ctx, "deadline.example", Limit{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := l.sync.bestServer(l.clock.Now()); !ok || !l.serverTime {
		t.Fatal("no estimate of the server's clock: the heartbeat carries no deadline")
	}
	l.roundTrip(time.Second) // a slow machine: the call timeout is 2 s
	if got := l.callTimeout(); got != maxCallTimeout {
		t.Fatalf("call timeout %v after a slow round trip, want %v", got, maxCallTimeout)
	}
	if err := s.Client.Do(ctx, "CLIENT", "PAUSE", 300, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.heartbeat(ctx); err != nil {
		t.Fatalf("a heartbeat Redis ran 300 ms late, within the 2 s its Limiter waited: %v", err)
	}
}

// TestShutBesideHeldFleet: a member that joined after the others lost
// Redis (they pace locally on a fleet of 3 without it, every rank of which
// is held) takes nothing on Redis until one of them is back. Before, its
// share came out whole: with every rank of their lattice held, the group
// had none left, and the empty share read as the whole (combination
// runner, seed 151: 26 calls in 627 ms of 19.8).
func TestShutBesideHeldFleet(t *testing.T) {
	f := &fleetView{}
	f.update(4, 3, 4, []int{3}, 3, []int{0, 1, 2}, false)
	if _, ok := f.redisShareOK(); ok {
		t.Fatalf("the newcomer beside a held fleet of 3 may take %q on Redis", f.redisShare().Arg())
	}
	f.update(4, 3, 4, []int{3}, 3, []int{0, 2}, false) // rank 1 is back
	if share, ok := f.redisShareOK(); !ok || share.Arg() != "3 0 2" {
		t.Fatalf("with rank 1 back: share %q (ok %v); want rank 1's instants of 3 (\"3 0 2\")", share.Arg(), ok)
	}
}

// TestLocalShareKeptUntilBack: a Limiter pacing locally keeps the share it
// left with until it is back on Redis, whatever a heartbeat (its probe)
// says of the fleet meanwhile: the others pace on their shares of the fleet
// they left, not of the one Redis lists now. Before, the probe that found
// Redis restarted empty (2 members listed of 3) moved its local share to
// rank 0 of 2 for the moment until it was back, and a call it granted then
// fell on an instant of a member's lattice of 3 (combination runner, seed
// 26: two calls at one instant on a burst of 1).
func TestLocalShareKeptUntilBack(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(3, 0, 3, nil, 0, nil, false)
	f.leaving()
	want, _ := f.localShare()
	f.update(2, 0, 2, nil, 0, nil, false) // the probe: Redis restarted empty
	if got, ok := f.localShare(); !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("pacing locally after the probe: share %+v (ok %v), want %+v as it left", got, ok, want)
	}
	f.recovered()
	if got, _ := f.localShare(); !reflect.DeepEqual(got, want) {
		t.Fatalf("handing back: share %+v, want %+v as it left", got, want)
	}
	f.back()
	f.update(2, 0, 2, nil, 0, nil, false)
	f.taken([]int{0, 1})
	if got, _ := f.localShare(); got.N != 3 || got.Member != 0 {
		t.Fatalf("back, the third member missing: share %+v, want rank 0 of the 3 remembered", got)
	}
}

// TestHeartbeatFailedHoldsOthers: after a heartbeat that failed, a
// Limiter on Redis leaves every other member its share until a heartbeat
// answers: the others may have lost Redis too and pace locally, and it
// would learn so only then. Before, it went on taking the whole group's
// part (combination runner, seed 16: after an out-of-memory Redis, two
// members back on Redis took the whole rate for a second beside one still
// pacing locally).
func TestHeartbeatFailedHoldsOthers(t *testing.T) {
	f := &fleetView{}
	f.update(3, 1, 3, nil, 0, nil, false)
	if got := f.redisShare().Arg(); got != "1" {
		t.Fatalf("all on Redis: the share is %q; want the whole (\"1\")", got)
	}
	f.heartbeatFailed()
	if got := f.redisShare().Arg(); got != "3 0 2" {
		t.Fatalf("after a failed heartbeat: the share is %q; want rank 1's of 3 (\"3 0 2\")", got)
	}
	f.update(3, 1, 3, nil, 0, nil, false)
	if got := f.redisShare().Arg(); got != "1" {
		t.Fatalf("a heartbeat answered again: the share is %q; want the whole (\"1\")", got)
	}
}

// TestLateUpdateDoubts: a heartbeat's reply that came back late (see
// Limiter.lateView) is applied and doubted as after one that failed: every
// other rank keeps its share, calls that take slots wait for the next
// heartbeat, and not once two in a row were late (or failed).
func TestLateUpdateDoubts(t *testing.T) {
	f := &fleetView{guessWait: time.Hour}
	f.update(3, 1, 3, nil, 0, nil, false)
	f.update(4, 1, 4, nil, 0, nil, true) // late: the fleet grew, as it was then
	if n, _ := f.size(); n != 4 {
		t.Fatalf("a late reply's fleet is not applied: size %d, want 4", n)
	}
	if s, ok := f.redisShareOK(); ok || s.Arg() != "4 0 2 3" {
		t.Fatalf("after a late reply: share %q (ok %v), want rank 1's of 4 (\"4 0 2 3\") after a heartbeat", s.Arg(), ok)
	}
	f.update(4, 1, 4, nil, 0, nil, true) // late again
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "4 0 2 3" {
		t.Fatalf("after two late replies in a row: share %q (ok %v), want rank 1's of 4 taken at once", s.Arg(), ok)
	}
	f.update(4, 1, 4, nil, 0, nil, false)
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "1" {
		t.Fatalf("a heartbeat answered in time: share %q (ok %v), want the whole", s.Arg(), ok)
	}
}

// TestHeartbeatFailedWhileMembersMissing: back on a Redis restarted
// empty with a member missing, a Limiter leaves on Redis the missing
// member's rank and takes the others' but those pacing locally; after a
// heartbeat that failed, it leaves every rank but its own, as when none is
// missing (TestHeartbeatFailedHoldsOthers): a member back on Redis may have
// lost it too and pace locally on its rank. Before, it took that member's
// rank until a heartbeat answered (combination runner, seed 7: Redis froze
// 2.3 s; the member pacing locally on rank 1 and this one on Redis granted
// permits at the same instants).
func TestHeartbeatFailedWhileMembersMissing(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(3, 2, 3, nil, 0, nil, false)
	f.leaving()
	f.update(3, 2, 2, nil, 0, nil, false) // back: rank 0's member missing
	f.taken([]int{1, 2})
	f.recovered()
	if got := f.redisShare().Arg(); got != "3 0" {
		t.Fatalf("on Redis with rank 0's member missing: share %q, want \"3 0\"", got)
	}
	f.heartbeatFailed()
	if got := f.redisShare().Arg(); got != "3 0 1" {
		t.Fatalf("after a failed heartbeat, a member missing: share %q, want rank 2's of 3 (\"3 0 1\")", got)
	}
	f.update(3, 2, 2, nil, 0, nil, false)
	if got := f.redisShare().Arg(); got != "3 0" {
		t.Fatalf("a heartbeat answered again: share %q, want \"3 0\"", got)
	}
}

// TestBackAcrossTwoSizes: this Limiter lost Redis just after the fleet
// grew from 3 to 4 (it paced locally on rank 1 of 4 and of 3), and came
// back on a Redis restarted empty before the others. A member that had not
// heard of the fourth still paces locally on rank 0 of 3, which Redis does
// not show (its kept ranks count 4): this Limiter takes nothing on Redis
// until the members are back or forgotten, and should it lose Redis again
// it keeps within both sizes. Before, it took rank 1's instants of 4 on
// Redis ("4 0 2 3"), which meet rank 0's of 3 every 12/rate (combination
// runner, seed 13: a Go member on Redis and a Python member pacing locally
// at one instant, a second after Redis came back).
func TestBackAcrossTwoSizes(t *testing.T) {
	f := &fleetView{remember: time.Minute, join: time.Minute}
	f.update(4, 1, 4, nil, 3, []int{2}, false) // rank 1 of 4, the fleet was 3 just now; rank 2 held
	f.leaving()
	if ls, ok := f.localShare(); !ok || ls.N != 4 || ls.Member != 1 || ls.Also != 3 {
		t.Fatalf("local share %+v (ok %v); want rank 1 of 4 also within 3", ls, ok)
	}
	f.update(4, 1, 2, []int{4}, 0, []int{0, 2, 3}, false) // restarted empty: kept ranks 0, 2 and 3 of 4
	f.taken([]int{0, 1, 2, 3})
	f.recovered()
	if s, ok := f.redisShareOK(); ok {
		t.Fatalf("back on Redis beside members that may pace on 3 or 4: share %q with ok, want a wait", s.Arg())
	}
	if sizes, ok := f.splitSizes(); !ok || !slices.Equal(sizes, []int{3, 4}) {
		t.Fatalf("splitSizes = %v, %v; want [3 4], true", sizes, ok)
	}
	// Past join, the members alive are back: the one still missing is
	// gone (a killed member's kept rank), and the wait ends.
	f.join = time.Nanosecond
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "4 0 2 3" {
		t.Fatalf("back on Redis past join: share %q (ok %v), want \"4 0 2 3\"", s.Arg(), ok)
	}
	f.join = time.Minute
	f.back()
	f.leaving() // lost again while they are missing
	if ls, ok := f.localShare(); !ok || ls.N != 4 || ls.Member != 1 || ls.Also != 3 {
		t.Fatalf("local share lost again while members are missing: %+v (ok %v); want rank 1 of 4 also within 3", ls, ok)
	}
	// Without the change just before (TestBackBesideHeldFleet's case), the
	// member back takes its rank's share of the fleet it remembers.
	g := &fleetView{remember: time.Minute}
	g.update(4, 1, 4, nil, 0, []int{2}, false)
	g.leaving()
	g.update(4, 1, 2, []int{4}, 0, []int{0, 2, 3}, false)
	g.taken([]int{0, 1, 2, 3})
	g.recovered()
	if s, ok := g.redisShareOK(); !ok || s.Arg() != "4 0 2 3" {
		t.Fatalf("back on Redis beside members missing on one size: share %q (ok %v), want \"4 0 2 3\"", s.Arg(), ok)
	}
	// Nor when the fleet had just grown from 1: a member that had not
	// heard of it paces on the whole, rank 0's (this one's), and the one
	// that joined has no local share.
	h := &fleetView{remember: time.Minute}
	h.update(2, 0, 2, nil, 1, nil, false)
	h.leaving()
	h.update(1, 0, 1, nil, 0, nil, false)
	h.taken([]int{0})
	h.recovered()
	if s, ok := h.redisShareOK(); !ok || s.Arg() != "2 1" {
		t.Fatalf("back on Redis after the fleet grew from 1: share %q (ok %v), want \"2 1\"", s.Arg(), ok)
	}
}

// TestNewcomerHidesMissing: back first on a Redis restarted empty, this
// Limiter (rank 0 of the 2 it knew) finds two members listed, itself and
// one that joined meanwhile (rank 2): as many as it remembers, but rank 1
// is not back, and may pace locally still. It is missing: this Limiter
// keeps to the fleet it knew, leaving rank 1 its share. Before, the counts
// matched, and it took ranks 0 and 2 of 3 on Redis, whose instants meet
// rank 1's of 2 (combination runner, seed 13).
func TestNewcomerHidesMissing(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(2, 0, 2, nil, 0, nil, false)
	f.taken([]int{0, 1})
	f.leaving()
	f.update(3, 0, 2, nil, 0, nil, false) // restarted empty: itself and a newcomer at rank 2
	f.taken([]int{0, 2})
	f.recovered()
	if s := f.redisShare().Arg(); s != "2 1" {
		t.Fatalf("back beside a newcomer, rank 1 missing: share %q, want rank 1 left its share of 2 (\"2 1\")", s)
	}
	f.taken([]int{0, 1, 2}) // rank 1 back
	if f.missing() {
		t.Fatal("missing with every rank it knew listed")
	}
}

// TestReturnEndsWhenAllListed: back from an outage of its own, a member
// keeps to the fleet it knew while members it knew are missing. Once a
// heartbeat lists every rank it knew, its return is complete: a member that
// dies after it (its rank freed) is not one missing from the outage. Before,
// the remembering lasted remember whatever the heartbeats listed: a Python
// member back at 2.4 s with the fleet of 2 it knew saw all 3 ranks listed,
// then one killed; its rank freed counted as missing, the member asked the
// fleet to keep it, and when Redis restarted empty at 5.3 s it paced on
// rank 1 of the 2 it remembered beside a Go member's rank 2 of 3
// (combination runner, seed 74: 2 permits at one instant every 6/rate).
func TestReturnEndsWhenAllListed(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(2, 1, 2, nil, 0, nil, false)
	f.taken([]int{0, 1})
	f.leaving()
	f.update(3, 1, 3, nil, 0, nil, false) // back: every rank it knew listed, and a newcomer
	f.taken([]int{0, 1, 2})
	f.recovered()
	f.update(3, 1, 3, nil, 0, nil, false)
	f.taken([]int{0, 1, 2})
	if f.missing() {
		t.Fatal("missing with every rank it knew listed")
	}
	f.update(3, 1, 2, nil, 0, nil, false) // rank 0 died after the return: freed
	f.taken([]int{1, 2})
	if f.missing() {
		t.Fatal("a member that died after a complete return counted as missing from the outage")
	}
	if s, ok := f.ownShare(); !ok || s.Arg() != "m 3 1 0" {
		t.Fatalf("local share after a complete return: %q, %v; want the fleet Redis lists (\"m 3 1 0\")", s.Arg(), ok)
	}
}

// TestHeldOnTwoSizes: the held members pace on lattices of two sizes (one
// lost Redis before it heard of a join, and paces on 2; one had heard of
// it, and paces on 3 and 2). A member on Redis takes nothing until they
// are back, and says why, and an in-flight band grants no seat; a
// member's own local share keeps within both
// sizes when one is its own, and it has none when they make three. Before,
// the member on Redis kept to the larger (held_n, "3 0 1") and its rank 2
// of 3 met rank 1 of 2 every 6/rate: two permits at one instant
// (combination runner, seed 15).
func TestHeldOnTwoSizes(t *testing.T) {
	f := &fleetView{}
	f.update(3, 2, 3, []int{2, 3}, 0, []int{0, 1}, false) // rank 2 of 3; ranks 0 and 1 held, on 2 and 3
	if s, ok := f.redisShareOK(); ok {
		t.Fatalf("on Redis beside members held on 2 and 3: share %q with ok, want a wait", s.Arg())
	} else if s.Arg() != "3 0 1" {
		t.Fatalf("on Redis beside members held on 2 and 3: share %q, want every other rank held (\"3 0 1\")", s.Arg())
	}
	if sizes, ok := f.splitSizes(); !ok || !slices.Equal(sizes, []int{2, 3}) {
		t.Fatalf("splitSizes = %v, %v; want [2 3], true", sizes, ok)
	}
	// An in-flight band's calls grant no seat meanwhile (seats.lua's
	// mode "x"): it counts a held holder's share at one size.
	if _, size, _, held, lost := f.seatView("me"); !lost || size != 3 || held != "0 1" {
		t.Fatalf("seatView beside members held on 2 and 3: size %d, held %q, lost %v; want 3, \"0 1\", lost", size, held, lost)
	}
	// Its own share: within 3 and 2, where rank 2 has none.
	if _, ok := f.localShare(); ok || !f.newcomer() {
		t.Fatal("rank 2 of 3 has a local share beside members held on 2 and 3")
	}
	g := &fleetView{}
	g.update(3, 0, 3, []int{2, 3}, 0, []int{1, 2}, false)
	if ls, ok := g.localShare(); !ok || ls.N != 3 || ls.Member != 0 || ls.Also != 2 {
		t.Fatalf("rank 0 of 3 beside members held on 2 and 3: %+v (ok %v), want rank 0 of 3 also within 2", ls, ok)
	}
	h := &fleetView{}
	h.update(4, 0, 4, []int{2, 3}, 0, []int{1, 2}, false)
	if _, ok := h.localShare(); ok || !h.newcomer() {
		t.Fatal("rank 0 of 4 has a local share beside members held on 2 and 3")
	}
	// One size again (the member on 2 is back): the held one's lattice.
	f.update(3, 2, 3, []int{3}, 0, []int{0}, false)
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "3 0" {
		t.Fatalf("beside one member held on 3: share %q (ok %v), want \"3 0\"", s.Arg(), ok)
	}
	if _, ok := f.splitSizes(); ok {
		t.Fatal("splitSizes with one size held")
	}
	// Held on 2 where the fleet is 3 now: seats.lua counts a held
	// holder's share of N at 2, as it takes it (at 3 it would count 2 of
	// N = 6 where the holder takes 3).
	f.update(3, 2, 3, []int{2}, 0, []int{1}, false)
	if _, size, _, held, lost := f.seatView("me"); lost || size != 2 || held != "1" {
		t.Fatalf("seatView beside a member held on 2: size %d, held %q, lost %v; want 2, \"1\", not lost", size, held, lost)
	}
}

// TestBackBesideHeldFleet: a member whose calls on Redis kept to the
// lattice of a held member's fleet (3, where Redis listed 2: the held one
// paces locally on the fleet it knew) loses Redis, and comes back on a Redis
// restarted empty before that member: it keeps to that same lattice, its
// own rank's instants of 3, leaving the others theirs. Before, it came back
// on the 2 Redis had listed ("2 0") while the held member still paced
// locally on rank 0 of 3: their slots met every 0.2 s at 30/s (combination
// runner, seed 2 under load: two permits at one instant on sliding.example).
func TestBackBesideHeldFleet(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(2, 1, 2, []int{3}, 0, []int{0}, false) // rank 1 of 2; rank 0 held, pacing on 3
	if got := f.redisShare().Arg(); got != "3 0" {
		t.Fatalf("on Redis beside the held member: share %q, want \"3 0\"", got)
	}
	f.leaving()
	f.update(1, 1, 1, nil, 0, nil, false) // restarted empty: back alone, at its old rank
	f.taken([]int{1})
	f.recovered()
	if got := f.redisShare().Arg(); got != "3 0 2" {
		t.Fatalf("back before the held member: share %q, want rank 1's of 3 (\"3 0 2\")", got)
	}
	f.back()
	if ls, _ := f.localShare(); ls.N != 3 || ls.Member != 1 {
		t.Fatalf("its own share while members are missing: %+v, want rank 1 of 3", ls)
	}
}

// TestBackAtAnotherRank: back on a Redis restarted empty, this Limiter
// asked for its old rank (0 of 3), but a member pacing locally had taken it
// first, and it got rank 1. Rank 1 of the fleet it knew is another
// member's, which may still pace locally on it: left to it, as a rank no
// member back on Redis holds. Before, this Limiter's own new rank counted
// as that member back, and it took rank 1's instants of 3 beside it
// (combination runner, seed 2 with the Python client's MovedBack: two
// permits at one instant every 0.1 s on sliding.example).
func TestBackAtAnotherRank(t *testing.T) {
	f := &fleetView{remember: time.Minute}
	f.update(3, 0, 3, nil, 0, nil, false) // rank 0 of 3, every member on Redis
	f.taken([]int{0, 1, 2})
	f.leaving()
	f.update(2, 1, 2, nil, 0, []int{0}, false) // restarted empty: rank 1 here, rank 0 held
	f.taken([]int{0, 1})
	f.recovered()
	if got := f.redisShare().Arg(); got != "3 1 2" {
		t.Fatalf("back at rank 1 while its old rank 0 was taken: share %q, want rank 0's of 3 (\"3 1 2\")", got)
	}
}

// TestStaleViewAfterStall: a view older than settle (this Limiter's
// heartbeats stopped: its process was stopped, as the combination runner's
// seed 8 stops one for 3 s) leaves every other rank its share, and the
// first heartbeat after it keeps back the members Redis no longer lists
// (it restarted empty meanwhile), as a return from an outage does: they
// may pace locally on their ranks. A view that is not stale takes what the
// heartbeat shows.
func TestStaleViewAfterStall(t *testing.T) {
	for _, stalled := range []bool{false, true} {
		f := &fleetView{remember: time.Minute, settle: 2 * time.Second}
		f.update(3, 1, 3, nil, 0, nil, false) // rank 1 of 3, every member on Redis
		f.taken([]int{0, 1, 2})
		if got := f.redisShare().Arg(); got != "1" {
			t.Fatalf("every member on Redis: share %q, want the whole (\"1\")", got)
		}
		if !stalled {
			continue
		}
		f.lastBeat = time.Now().Add(-3 * time.Second) // stopped for 3 s
		if got := f.redisShare().Arg(); got != "3 0 2" {
			t.Fatalf("a stale view: share %q, want rank 1's of 3 (\"3 0 2\")", got)
		}
		f.update(1, 1, 1, nil, 0, nil, false) // Redis restarted empty meanwhile: alone, at its old rank
		f.taken([]int{1})
		if got := f.redisShare().Arg(); got != "3 0 2" {
			t.Fatalf("the first heartbeat after the stall, the others missing: share %q, want rank 1's of 3 (\"3 0 2\")", got)
		}
		f.update(3, 1, 3, nil, 0, nil, false) // they are back
		f.taken([]int{0, 1, 2})
		if got := f.redisShare().Arg(); got != "1" {
			t.Fatalf("the others back: share %q, want the whole (\"1\")", got)
		}
	}
	f := &fleetView{remember: time.Minute, settle: 2 * time.Second}
	f.update(3, 1, 3, nil, 0, nil, false)
	f.update(1, 1, 1, nil, 0, nil, false) // a fresh view: the heartbeat is the fleet
	f.taken([]int{1})
	if got := f.redisShare().Arg(); got != "1" {
		t.Fatalf("a fresh view of a fleet of one: share %q, want the whole (\"1\")", got)
	}
}

// TestGuessedViewWaitsForHeartbeat: a view in doubt (a heartbeat failed)
// or stale is a guess, and calls that would take slots on Redis wait for
// a heartbeat (redisShareOK: not ok) with the guess as the share the other
// calls send; after two heartbeats in a row failed, or guessWait from the
// first call that found it, they take the guess: every rank but their own.
func TestGuessedViewWaitsForHeartbeat(t *testing.T) {
	f := &fleetView{settle: 2 * time.Second, guessWait: time.Minute}
	f.update(3, 1, 3, nil, 0, nil, false)
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "1" {
		t.Fatalf("all on Redis: share %q ok %v, want the whole and ok", s.Arg(), ok)
	}
	f.heartbeatFailed()
	if s, ok := f.redisShareOK(); ok || s.Arg() != "3 0 2" {
		t.Fatalf("a heartbeat failed: share %q ok %v, want rank 1's of 3 (\"3 0 2\") and a wait", s.Arg(), ok)
	}
	if _, ok := f.awaitingHeartbeat(); !ok {
		t.Fatal("a heartbeat failed: awaitingHeartbeat says no")
	}
	f.heartbeatFailed()
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "3 0 2" {
		t.Fatalf("two heartbeats failed: share %q ok %v, want rank 1's of 3, taken", s.Arg(), ok)
	}
	f.update(3, 1, 3, nil, 0, nil, false)
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "1" {
		t.Fatalf("a heartbeat answered: share %q ok %v, want the whole and ok", s.Arg(), ok)
	}

	// A stale view (the process stalled): a wait, until guessWait passed.
	f.lastBeat = time.Now().Add(-3 * time.Second)
	if s, ok := f.redisShareOK(); ok || s.Arg() != "3 0 2" {
		t.Fatalf("a stale view: share %q ok %v, want rank 1's of 3 and a wait", s.Arg(), ok)
	}
	f.guessSince = time.Now().Add(-2 * time.Minute)
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "3 0 2" {
		t.Fatalf("a stale view past guessWait: share %q ok %v, want rank 1's of 3, taken", s.Arg(), ok)
	}
	if _, ok := f.awaitingHeartbeat(); ok {
		t.Fatal("past guessWait: awaitingHeartbeat says yes")
	}
}

// TestBackWaitsForFleet: back from an outage of its own, a Limiter that
// sees fewer than a quarter of the fleet's ranks not held (the others lost
// Redis too and probe back over a ProbeInterval) takes no slot on Redis
// until more are back, or backWait has passed: a slot on its own rank's
// few instants would move the key's queue past all the others'. Before, a
// 200-process Cluster run whose processes came back over 3 s after a
// master's kill put its judged keys' queues 20 s ahead.
func TestBackWaitsForFleet(t *testing.T) {
	f := &fleetView{remember: time.Minute, backWait: time.Hour}
	f.update(8, 0, 8, nil, 0, nil, false)
	f.leaving()
	f.recovered()
	f.update(8, 0, 8, nil, 0, []int{1, 2, 3, 4, 5, 6, 7}, false) // every other member still paces locally
	if s, ok := f.redisShareOK(); ok {
		t.Fatalf("back first of 8: calls take share %q on Redis; want them to wait for the fleet", s.Arg())
	}
	if _, held, n, ok := f.awaitingFleet(); !ok || held != 7 || n != 8 {
		t.Fatalf("awaitingFleet: %d held of %d, %v; want 7 of 8, true", held, n, ok)
	}
	f.update(8, 0, 8, nil, 0, []int{2, 3, 4, 5, 6, 7}, false) // 2 of 8 back: a quarter
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "8 2 3 4 5 6 7" {
		t.Fatalf("2 of 8 back: share %q, %v; want \"8 2 3 4 5 6 7\", true", s.Arg(), ok)
	}
	// Past backWait, a Limiter back beside a fleet that stays held (cut
	// off for long) takes its own share.
	f.update(8, 0, 8, nil, 0, []int{1, 2, 3, 4, 5, 6, 7}, false)
	f.backUntil = time.Now().Add(-time.Millisecond)
	if s, ok := f.redisShareOK(); !ok || s.Arg() != "8 1 2 3 4 5 6 7" {
		t.Fatalf("past backWait: share %q, %v; want its own rank's, true", s.Arg(), ok)
	}
	// A small fleet never waits: one of 4 back takes its rank's quarter.
	g := &fleetView{remember: time.Minute, backWait: time.Hour}
	g.update(4, 0, 4, nil, 0, nil, false)
	g.leaving()
	g.recovered()
	g.update(4, 0, 4, nil, 0, []int{1, 2, 3}, false)
	if s, ok := g.redisShareOK(); !ok {
		t.Fatalf("one of 4 back: no share (%q); want its own", s.Arg())
	}
}

// TestSeatViewInDoubt: an in-flight band's call on Redis with a view in
// doubt (a heartbeat failed) or stale (the process was stopped) names
// every other rank held, as redisShare leaves every other rank its share:
// the others may pace locally on their shares of N meanwhile. Before, a
// process stopped 3 s while the others lost Redis took seats on Redis
// beside their local ones on resuming, and 6 calls were open on a band of
// 5 (the combination runner's seed 57).
func TestSeatViewInDoubt(t *testing.T) {
	f := &fleetView{remember: time.Minute, settle: 2 * time.Second}
	f.update(3, 1, 3, nil, 0, nil, false) // rank 1 of 3, every member on Redis
	f.taken([]int{0, 1, 2})
	if _, _, _, held, _ := f.seatView("me"); held != "" {
		t.Fatalf("every member on Redis: held %q, want none", held)
	}
	f.lastBeat = time.Now().Add(-3 * time.Second) // stopped for 3 s
	if _, _, _, held, _ := f.seatView("me"); held != "0 2" {
		t.Fatalf("a stale view: held %q, want every other rank (\"0 2\")", held)
	}
	f.update(3, 1, 3, nil, 0, nil, false)
	f.taken([]int{0, 1, 2})
	if _, _, _, held, _ := f.seatView("me"); held != "" {
		t.Fatalf("a heartbeat answered: held %q, want none", held)
	}
	f.heartbeatFailed()
	if _, _, _, held, _ := f.seatView("me"); held != "0 2" {
		t.Fatalf("after a failed heartbeat: held %q, want every other rank (\"0 2\")", held)
	}
}

// TestSeatViewInDoubtDropsNobody: a view in doubt (a heartbeat failed) or
// stale lists no ranks to seats.lua ("*"): members may have joined since,
// and a holder it does not list is not known gone. Before, a view of
// before a freeze listed rank 0 alone, and a call at the thaw dropped a
// live holder silent across the freeze, its calls open (combination
// runner, seed 128: 7 calls open on N = 6).
func TestSeatViewInDoubtDropsNobody(t *testing.T) {
	f := &fleetView{remember: time.Minute, settle: time.Hour} // no machine is that slow between two lines
	f.update(1, 0, 1, nil, 0, nil, false)                     // alone, as far as it knows
	f.taken([]int{0})
	if _, _, taken, _, _ := f.seatView("me"); taken != "0" {
		t.Fatalf("a fresh view: taken %q, want \"0\"", taken)
	}
	f.heartbeatFailed()
	if _, _, taken, _, _ := f.seatView("me"); taken != "*" {
		t.Fatalf("after a failed heartbeat: taken %q, want \"*\"", taken)
	}
	f.update(1, 0, 1, nil, 0, nil, false)
	f.taken([]int{0})
	f.lastBeat = time.Now().Add(-2 * time.Hour) // stopped for 2 h
	if _, _, taken, _, _ := f.seatView("me"); taken != "*" {
		t.Fatalf("a stale view: taken %q, want \"*\"", taken)
	}
}

// TestBackKeepsMissingRanks: back on a Redis restarted empty while members
// it remembers are missing, a Limiter's heartbeat asks the fleet to keep
// their ranks (heartbeat.lua's ARGV[8] "keep", for three heartbeat
// intervals, renewed by each heartbeat), and stops once they are back.
func TestBackKeepsMissingRanks(t *testing.T) {
	f := &fleetView{remember: time.Minute, settle: 2 * time.Second}
	f.update(3, 2, 3, nil, 0, nil, false) // rank 2 of 3, every member on Redis
	f.taken([]int{0, 1, 2})
	if got := f.wantRank(); got != "2" {
		t.Fatalf("on Redis: ARGV[8] %q, want \"2\"", got)
	}
	f.leaving()
	f.update(1, 2, 1, nil, 0, nil, false) // restarted empty: back alone
	f.taken([]int{2})
	f.recovered()
	if got := f.wantRank(); got != "2 keep 3000 3 0 1" {
		t.Fatalf("back alone: ARGV[8] %q, want ranks 0 and 1 kept", got)
	}
	f.update(3, 2, 2, nil, 0, nil, false) // the member of rank 0 is back
	f.taken([]int{0, 2})
	if got := f.wantRank(); got != "2 keep 3000 3 1" {
		t.Fatalf("one back: ARGV[8] %q, want rank 1 kept", got)
	}
	f.update(3, 2, 3, nil, 0, nil, false) // every member back
	f.taken([]int{0, 1, 2})
	if got := f.wantRank(); got != "2" {
		t.Fatalf("every member back: ARGV[8] %q, want \"2\"", got)
	}
}

// TestHeldOnWholeTakesNothing: a member that paces locally on the whole of
// each key (it knew a fleet of one) leaves the others nothing. Its
// heartbeats report the size its local share counts as 1 (0 is none), and
// a member that sees it held with that size takes nothing on Redis and has
// no local share until it is back or forgotten. Before, the report was 0,
// as for a member with no share, and the others left it only its rank's
// share of the larger fleet: the combination runner's Cluster seed 31 (1
// replay in 3), a member alone at its last heartbeat paced locally on the
// whole key while two that joined since took two thirds of it on Redis.
func TestHeldOnWholeTakesNothing(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	opts := Options{KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler), HeartbeatInterval: time.Hour, ProbeInterval: time.Hour, SilentHold: 3 * time.Hour}
	a, err := New(s.Client, opts) // alone: its one heartbeat (New's)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rec := strings.Fields(s.Client.HGet(ctx, layout.FleetKeys(prefix)[1], a.id).Val())
	if len(rec) < 4 || rec[3] != "1" {
		t.Fatalf("the record of a member alone: %q; want the size its local share counts 1 (the whole)", rec)
	}
	opts.HeartbeatInterval = 50 * time.Millisecond
	b, err := New(s.Client, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// a is silent (its interval an hour): held once b's live window (two
	// of b's intervals) has passed since a's heartbeat.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := b.heartbeat(ctx); err != nil {
			t.Fatal(err)
		}
		b.fleet.mu.Lock()
		held, sizes := slices.Clone(b.fleet.held), slices.Clone(b.fleet.heldSizes)
		b.fleet.mu.Unlock()
		if slices.Equal(held, []int{0}) {
			if !slices.Equal(sizes, []int{1}) {
				t.Fatalf("b's view of a held: sizes %v, want [1]", sizes)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a never held in b's view (held %v)", held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if sh, ok := b.fleet.redisShareOK(); ok {
		t.Errorf("b beside a held member pacing on the whole key: takes %q on Redis, want nothing", sh.Arg())
	}
	if ls, ok := b.fleet.localShare(); ok {
		t.Errorf("b beside a held member pacing on the whole key: local share %+v, want none", ls)
	}
}

// TestHeldOnWholeView: the fleet view's rule alone
// (TestHeldOnWholeTakesNothing), for slots and for an in-flight band's
// seats: a member held on the whole key may hold every seat.
func TestHeldOnWholeView(t *testing.T) {
	f := &fleetView{}
	f.update(3, 2, 3, []int{1}, 0, []int{0}, false) // rank 0 held, pacing on the whole key
	if sh, ok := f.redisShareOK(); ok {
		t.Errorf("beside a member held on the whole key: takes %q on Redis, want nothing", sh.Arg())
	}
	if _, _, _, _, lost := f.seatView("c"); !lost {
		t.Errorf("beside a member held on the whole key: seats granted on Redis, want none (it may hold every seat)")
	}
	f.update(3, 2, 3, []int{3}, 0, []int{0}, false) // rank 0 held on its third
	if sh, ok := f.redisShareOK(); !ok || sh.Arg() != "3 0" {
		t.Errorf("beside a member held on its third: takes %q (ok %v), want \"3 0\"", sh.Arg(), ok)
	}
	if _, _, _, _, lost := f.seatView("c"); lost {
		t.Errorf("beside a member held on its third: no seat granted on Redis")
	}
}
