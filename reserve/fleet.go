package reserve

import (
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/outage"
)

// fleetView is what a Limiter knows of the fleet sharing its KeyPrefix,
// learned from the heartbeats (lua/heartbeat.lua):
//
//   - n: the members (Limiters), ranked 0..n-1 by id, and this one's rank;
//   - held: the ranks of the members silent for more than two heartbeat
//     intervals (but less than Options.SilentHold), or pacing locally.
//     They may have lost Redis and be pacing on their own shares, so the
//     members on Redis leave them those shares (share).
//
// A member that went silent and holds no connection to Redis any more (its
// process exited without Close: killed, crashed) is not held: the first
// member to notice (CLIENT LIST) removes it, and its share goes back to the
// fleet within about three heartbeat intervals.
//
// When this Limiter comes back from an outage, a Redis restarted empty may
// not list yet the Limiters still pacing locally: for a few heartbeats it
// keeps back the shares of the fleet it knew before the outage that the
// heartbeats do not show yet.
type fleetView struct {
	mu                sync.Mutex
	id                string
	hint              int // Options.FleetSize
	remember          time.Duration
	learned           bool
	n, rank           int
	held              []int
	members           int       // the members (live and held) Redis lists
	heldN             int       // the largest fleet size the held members' local shares count
	heldSizes         []int     // every size they count, ascending (heartbeat.lua's held_sizes; see split)
	remembered        int       // n when this Limiter last lost Redis
	rememberedAlso    int       // the other size its share kept within then (alsoN; -1: more than one)
	rememberedMembers int       // and the members then
	rankBefore        int       // its rank then
	backAt            time.Time // when it came back

	// A change of the fleet's size reaches each member at its next
	// heartbeat: for a while after it, members may pace locally on the
	// size before or after. before is the size before the latest change
	// while that change is that young (heartbeat.lua; 0: none). See
	// alsoN.
	before int
	// ranks are the ranks taken in Redis's fleet (live or held members).
	ranks []int

	// A Limiter that started while Redis was unavailable has never learned
	// the fleet. When it first reaches Redis, a Redis restarted empty lists
	// only the members back already; the others, still pacing locally,
	// probe within ProbeInterval (+25%). So it learns the fleet only from a
	// heartbeat at least join after its first one that succeeded, and stays
	// off Redis until then: otherwise it would take the whole of each key
	// on Redis while they still paced on their shares.
	born      bool          // started while Redis was unavailable; not yet joined
	join      time.Duration // Options.ProbeInterval × 1.5
	joinUntil time.Time     // the first heartbeat that succeeded plus join
	// settle is how long the fleet takes to hear a member's mode (two
	// heartbeat intervals); toldAt when a heartbeat in mode local first
	// reached Redis while away.
	settle time.Duration
	toldAt time.Time
	// doubt: the last heartbeat failed (see redisShareOK).
	doubt bool
	// A view in doubt (a heartbeat failed) or stale is a guess: every
	// other member may pace locally. Calls that would take slots on Redis
	// wait for a heartbeat to settle it (guessing) rather than reserve on
	// the guess, until guessWait has passed since a call first found it
	// (guessSince), or two heartbeats in a row failed (fails): then Redis
	// most likely failed the fleet, and they take their own share.
	fails      int
	guessSince time.Time
	guessWait  time.Duration
	// Back from an outage of its own, a Limiter finds most of a large
	// fleet held (they lost Redis too, and probe back over a
	// ProbeInterval): a call on Redis then takes a slot on the few
	// instants of the ranks not held, and moves the key's queue past all
	// the others, which the members back a moment later can no longer
	// take. Calls that take slots on Redis wait while fewer than a
	// quarter of the ranks are not held (sparse), for backWait from the
	// return at the most (backUntil).
	backWait  time.Duration
	backUntil time.Time

	// A Limiter pacing locally keeps the share it left with (leaving)
	// until it is back on Redis (back), whatever its probes' heartbeats
	// say of the fleet meanwhile: the others pace on their shares of the
	// fleet they left, not of the one Redis lists now.
	away        bool
	awayShare   share
	awayShareOK bool

	lastView string    // the view last logged (logView)
	lastBeat time.Time // the last heartbeat that reached Redis and told the fleet
	// rememberedRanks are the ranks Redis listed when this Limiter last
	// lost it: a member missing by rank, not only by count (a newcomer may
	// make the count whole), keeps seats.lua careful (seatView).
	rememberedRanks []int
}

// joinFailed starts the join wait again: a heartbeat failed before this
// Limiter, started while Redis was unavailable, learned the fleet (Redis
// may have lost it again meanwhile).
func (f *fleetView) joinFailed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.born {
		f.joinUntil = time.Time{}
	}
}

// joining returns how long this Limiter, started while Redis was
// unavailable (or a newcomer when it lost Redis), still waits before it
// learns the fleet (0: it has). The wait ends with the heartbeat that
// teaches the fleet (update), not when its time is up: a heartbeat that
// ran just before then taught nothing, and the Limiter must not go back on
// Redis with the view it had before (TestJoinWaitUntilLearned). Before any
// heartbeat succeeded, the whole join is still ahead.
func (f *fleetView) joining() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case !f.born:
		return 0
	case f.joinUntil.IsZero():
		return f.join
	}
	return max(time.Until(f.joinUntil), time.Millisecond)
}

// size returns the fleet size: the number learned (known true), or
// Options.FleetSize before anything was learned (0: none).
func (f *fleetView) size() (n int, known bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.learned {
		return f.hint, false
	}
	return max(1, f.n), true
}

// redisShare returns the share of each key's limits this Limiter's calls
// on Redis take: the whole, less the shares of the held members, and of the
// members remembered from before an outage that Redis does not show yet.
func (f *fleetView) redisShare() share {
	s, _ := f.redisShareOK()
	return s
}

// redisShareOK is redisShare; ok is false when this Limiter may take
// nothing on Redis now (shut): the held members pace on a fleet without it,
// every rank of which is held (it joined after they lost Redis). Its calls
// that would take slots are refused until one of them is back (see alsoN,
// Limiter.grantArgs).
func (f *fleetView) redisShareOK() (share, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.learned || f.n < 1 {
		return share{}, true
	}
	n, held := f.n, f.held
	doubt := f.doubt || f.stale()
	if f.missing() {
		// Redis (restarted empty) lost the fleet: members not back yet
		// may still pace locally on their ranks of the fleet this Limiter
		// knew. Until they are back, leave them those ranks' shares:
		// every rank of that fleet but this Limiter's own and those of
		// the members back on Redis (they asked for their old ranks), so
		// that nobody shares an instant. (Before, each member back left
		// all the others', and two back on one key took a third of it
		// together: each charged its calls at a third's spacing on one
		// state.) After a heartbeat that failed (doubt), every rank but its
		// own: a member back on Redis may have lost it again and pace
		// locally on its rank, as below (combination runner, seed 7: a
		// member missing, Redis froze, and a member back on Redis took on
		// Redis the instants of one that paced locally meanwhile). Its
		// own rank on Redis, when it is not its old one (a member pacing
		// locally took that first), is no member back: that rank's owner
		// may pace locally still (TestBackAtAnotherRank).
		n, held = f.remembered, make([]int, 0, f.remembered-1)
		for k := range f.remembered {
			if k != f.rankBefore && (doubt || k == f.rank || !f.listed(k) || slices.Contains(f.held, k)) {
				held = append(held, k)
			}
		}
		if f.twoSizesBack() {
			// When it lost Redis the fleet had just changed: members not
			// back yet may pace on either size, and no share of one keeps
			// clear of both lattices. Take nothing on Redis until they
			// could be back (combination runner, seed 13: back on Redis
			// with rank 1 of 4, this Limiter met a member still pacing on
			// rank 0 of 3 every 12/rate).
			return share{N: n, Held: held}, false
		}
	}
	if doubt && !f.missing() {
		// The last heartbeat failed: the others may have lost Redis too
		// and pace locally now, which this Limiter learns only at its
		// next heartbeat. Until then, leave every other rank its share
		// (combination runner, seed 16: after an out-of-memory Redis, two
		// members back on Redis took the whole rate for a second beside
		// one still pacing locally). So too while the view is stale: its
		// heartbeats stopped (see stale).
		held = otherRanks(n, f.rank)
		if f.guessing() {
			// But first wait for the next heartbeat: on a key whose burst
			// is under n, a slot on this rank's own instants moves the
			// key's queue past every other rank's, n-1 instants that no
			// member on Redis can take. A heartbeat that failed or ran late
			// on a loaded machine is no outage, and at 300 processes such
			// slots put a key's queue minutes ahead, its calls at 1-6% of
			// its rate (pacerbench's cluster phase;
			// TestGuessedViewWaitsForHeartbeat).
			return share{N: n, Held: held}, false
		}
		if f.joinedLate() {
			// It joined in the fleet's latest change, within about a
			// heartbeat: a member that lost Redis since may never have
			// heard of it, and paces locally on a fleet without it (its
			// rank's instants, or the whole key). It takes nothing on
			// Redis until a heartbeat answers, as it would have no local
			// share (leaving). Before, the Cluster's seed 31: the fleet's
			// master froze in the fleet's first second; the first member,
			// which had heard of nobody, paced locally on the whole key,
			// and the third, on Redis, took rank 2's share beside it
			// (TestNewcomerInDoubtTakesNothing).
			return share{N: n, Held: held}, false
		}
	}
	if (f.split() || f.heldOnWhole()) && !f.missing() {
		// The held members pace on lattices of different sizes: no share
		// of one size keeps clear of both (combination runner, seed 15:
		// a member that lost Redis before it heard of a join paced on 2,
		// one that had heard of it on 3 and 2, and a newcomer on Redis
		// kept to the 3-lattice's free rank, whose instants meet the
		// 2-lattice's every 6/rate: two permits at one instant). Take
		// nothing on Redis until they are back or forgotten, leaving every
		// other rank its share meanwhile for what ignores ok (a lease's
		// horizon, a settle). So too beside a held member that paces on
		// the whole of each key (heldOnWhole), which leaves the others
		// nothing. Before, a held member's whole was reported as no share
		// (0), and the members that joined after it left it only its
		// rank's share of the larger fleet (the combination runner's
		// Cluster seed 31: a member alone at its last heartbeat paced
		// locally on the whole key while two that joined since took two
		// thirds of it on Redis; TestHeldOnWholeTakesNothing).
		held = otherRanks(n, f.rank)
		return share{N: n, Held: held}, false
	}
	if len(held) > 0 && f.heldN > 1 && f.heldN != n && !f.missing() {
		// The held members pace on the lattice of the fleet they knew
		// (a member joined or left since): keep to theirs, so that nobody
		// shares an instant. A member whose rank is beyond it takes part
		// in the group's instants.
		n = f.heldN
		held = slices.DeleteFunc(slices.Clone(held), func(k int) bool { return k >= n })
		if len(held) >= n {
			// Every rank of their fleet is held: none is this Limiter's.
			return share{}, false
		}
	}
	if len(held) == 0 || len(held) >= n {
		return share{}, true
	}
	if f.sparse(n, held) {
		// Back from an outage with most of the fleet still held: wait for
		// the others rather than run the key's queue ahead on this rank's
		// few instants (see backWait). A 200-process Cluster run, its
		// processes back on Redis over 3 s after a master's kill, put its
		// judged keys' queues 20 s ahead, at 0.2-4 calls/s of 50
		// (TestBackWaitsForFleet).
		return share{N: n, Held: held}, false
	}
	return share{N: n, Held: held}, true
}

// sparse reports whether, back from an outage of its own within backWait,
// this Limiter sees fewer than a quarter of the fleet's ranks not held (n
// ranks, held of them): a fleet of 4 or fewer never waits. f.mu is held.
func (f *fleetView) sparse(n int, held []int) bool {
	return !f.backUntil.IsZero() && time.Now().Before(f.backUntil) && 4*(n-len(held)) < n
}

// guessing reports whether calls that take slots on Redis wait for a
// heartbeat rather than reserve on a view in doubt (see fails). f.mu is
// held.
func (f *fleetView) guessing() bool {
	if f.fails >= 2 || f.guessWait <= 0 {
		return false
	}
	if f.guessSince.IsZero() {
		f.guessSince = time.Now()
	}
	return time.Since(f.guessSince) < f.guessWait
}

// awaitingHeartbeat reports whether calls that take slots on Redis wait
// for a heartbeat now (guessing), and how much longer at the most.
func (f *fleetView) awaitingHeartbeat() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !(f.doubt || f.stale()) || f.missing() || f.guessSince.IsZero() || f.fails >= 2 {
		return 0, false
	}
	left := f.guessWait - time.Since(f.guessSince)
	return left, left > 0
}

// awaitingFleet reports whether calls that take slots on Redis wait for
// the fleet to come back from an outage (sparse), how much longer at the
// most, and how many of the fleet's ranks are held.
func (f *fleetView) awaitingFleet() (left time.Duration, held, n int, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.backUntil.IsZero() || len(f.held) == 0 || !f.sparse(f.n, f.held) {
		return 0, 0, 0, false
	}
	return time.Until(f.backUntil), len(f.held), f.n, true
}

// rateShare is the part of each key's rate this Limiter's calls on Redis
// take.
func (f *fleetView) rateShare() float64 {
	s := f.redisShare()
	if s.Whole() {
		return 1
	}
	return float64(s.N-len(s.Held)) / float64(s.N)
}

// localShare returns the share this Limiter takes alone while it paces
// locally: its own, by its rank among the fleet it last learned (or, before
// it ever reached Redis, Options.FleetSize members and a rank from its id).
// ok is false when the fleet's size is unknown.
func (f *fleetView) localShare() (share, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.away {
		return f.awayShare, f.awayShareOK
	}
	return f.ownShare()
}

// reportedSize returns the fleet size this Limiter's local share counts,
// as its heartbeats report it (heartbeat.lua's KEYS[2] n), which the
// others keep to while it is held: its lattice's size; 1 for the whole of
// each key (it knew a fleet of one, TestHeldOnWholeTakesNothing); 0 for
// none.
func (f *fleetView) reportedSize() int {
	ls, ok := f.localShare()
	switch {
	case !ok:
		return 0
	case ls.N > 1:
		return ls.N
	}
	return 1
}

// ownShare is localShare from the fleet as this Limiter knows it now. f.mu
// is held.
func (f *fleetView) ownShare() (share, bool) {
	n, rank := f.n, f.rank
	also := f.alsoN()
	if f.missing() {
		// Back from an outage, Redis (restarted empty) does not list the
		// whole fleet yet: keep the share this Limiter had in it, within
		// the sizes it kept within then.
		n, rank, also = f.remembered, f.rankBefore, f.rememberedAlso
	}
	if also < 0 || also > 0 && rank >= also {
		return share{}, false
	}
	if !f.learned {
		if f.hint < 1 {
			return share{}, false
		}
		h := fnv.New32a()
		h.Write([]byte(f.id))
		n, rank = f.hint, int(h.Sum32()%uint32(f.hint))
	}
	if n <= 1 {
		return share{}, true // alone: the others left (a held member counts)
	}
	return share{N: n, Member: min(rank, n-1), IsMember: true, Also: also}, true
}

// heldOnWhole reports whether a held member paces on the whole of each
// key: it knew a fleet of one, and its heartbeats report size 1
// (reportedSize). It leaves the others nothing. f.mu is held.
func (f *fleetView) heldOnWhole() bool {
	return len(f.held) > 0 && f.heldN == 1 && f.n > 1
}

// split reports whether the held members pace on lattices of different
// sizes (they lost Redis around a change of the fleet, one having heard
// of it and another not): a share of one size cannot keep clear of both.
// f.mu is held.
func (f *fleetView) split() bool {
	return len(f.held) > 0 && len(f.heldSizes) > 1
}

// splitSizes returns the sizes the held members pace on, if they are more
// than one (see split).
func (f *fleetView) splitSizes() ([]int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.twoSizesBack() {
		// Back from an outage that began just after the fleet changed
		// (rememberFleet).
		if f.rememberedAlso < 0 {
			return nil, true
		}
		return []int{min(f.remembered, f.rememberedAlso), max(f.remembered, f.rememberedAlso)}, true
	}
	return slices.Clone(f.heldSizes), f.split()
}

// twoSizesBack reports whether, back from an outage that began just after
// the fleet changed (its local share kept within another size too,
// rememberedAlso), members not back yet may pace on either size. It holds
// while they are missing and they could still be on their way back: the
// members pacing locally probe within ProbeInterval (+25%), and come back
// within join of this Limiter, as a member born waits for them (seed 13:
// 0.7 s later). Longer, it would keep every key off Redis for the sake of
// a member gone for good (a killed member's kept rank stays missing for
// remember): 3.3 s without a call in that run. f.mu is held.
func (f *fleetView) twoSizesBack() bool {
	return f.missing() && f.rememberedAlso != 0 && f.rememberedAlso != f.remembered && time.Since(f.backAt) < f.join
}

// alsoN returns the other fleet size this Limiter's local share keeps
// within too (share.Also; 0: none): the one the held members pace
// on, when it differs (they lost Redis before the fleet changed, and pace
// as they knew it); else the size before a change young enough that
// another member may not have heard of it. A member whose rank is beyond
// it joined after them: they pace as if it were not there, and it has no
// local share. -1 when the held members' sizes and n make more than two:
// no share keeps within them all, and it has none. f.mu is held.
func (f *fleetView) alsoN() int {
	switch {
	case !f.learned || f.missing():
		return 0
	case f.split():
		also := 0
		for _, s := range f.heldSizes {
			switch {
			case s == f.n:
			case also == 0:
				also = s
			default:
				return -1
			}
		}
		return also
	case f.heldOnWhole():
		// No other member has a local share.
		return -1
	case len(f.held) > 0 && f.heldN > 0 && f.heldN != f.n:
		return f.heldN
	case f.before > 0 && f.before != f.n:
		return f.before
	}
	return 0
}

// newcomer reports whether this Limiter has no local share because it
// joined the fleet after members that may pace locally without it (see
// alsoN).
func (f *fleetView) newcomer() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.joinedLate()
}

// joinedLate is newcomer with f.mu held.
func (f *fleetView) joinedLate() bool {
	a := f.alsoN()
	return a < 0 || a > 0 && f.rank >= a
}

// wantRank is heartbeat.lua's ARGV[8]: the rank a heartbeat asks for, the
// one this Limiter had (Redis restarted empty gives it back if free), ""
// before it had one; then, while members it remembers are missing, "keep
// <keep_ms> <n> <ranks...>": the ranks of its remembered fleet's n not
// back yet (keptRanks), which the fleet keeps for them for keep_ms (no
// newcomer takes one, and each is held in every member's view, on that
// n). Without it, a newcomer took the rank of a member still pacing
// locally, heard of nobody held, and took the whole key on Redis beside
// it (combination runner, seed 49). A keep lasts one and a half settles
// (three heartbeat intervals): each heartbeat renews it, and it ends soon
// after this Limiter stops sending it (the members are back, or it lost
// Redis again).
func (f *fleetView) wantRank() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := ""
	switch {
	case f.remembered > 0:
		w = strconv.Itoa(f.rankBefore)
	case f.learned:
		w = strconv.Itoa(f.rank)
	}
	if ks := f.keptRanks(); len(ks) > 0 {
		keep := max(f.settle*3/2, time.Second)
		w += " keep " + strconv.FormatInt(keep.Milliseconds(), 10) + " " + strconv.Itoa(f.remembered) + " " + joinInts(ks)
	}
	return w
}

// keptRanks returns the ranks of the fleet this Limiter remembers, other
// than its own, that Redis does not list yet, while members are missing
// (missing); else none. f.mu is held.
func (f *fleetView) keptRanks() []int {
	if !f.missing() {
		return nil
	}
	var ks []int
	for k := range f.remembered {
		if k != f.rankBefore && !f.listed(k) {
			ks = append(ks, k)
		}
	}
	return ks
}

// missing reports whether, back from an outage of its own, this Limiter
// sees fewer members than it knew before it: Redis (restarted empty) lost
// them, and those not back yet may still pace locally on their ranks. f.mu
// is held.
func (f *fleetView) missing() bool {
	if f.backAt.IsZero() || time.Since(f.backAt) >= f.remember || f.remembered == 0 {
		return false
	}
	if f.rememberedMembers > f.members {
		return true
	}
	// As many members as it remembers, but not the same: a member that
	// joined meanwhile hides one not back yet (combination runner, seed
	// 13: back first on a Redis restarted empty, a member counted the two
	// it knew in the two listed, a newcomer among them, and took on Redis
	// the instants of the one still pacing locally). A rank it knew that
	// Redis does not list is missing.
	return f.rankNotListed()
}

// rankNotListed reports whether a rank Redis listed when this Limiter last
// lost Redis, other than its own now, is not listed now. f.mu is held.
func (f *fleetView) rankNotListed() bool {
	for _, r := range f.rememberedRanks {
		if r != f.rank && !f.listed(r) {
			return true
		}
	}
	return false
}

// listed reports whether Redis's last heartbeat listed rank as taken
// (f.ranks, kept sorted by taken: a search, since calls on Redis ask
// while members are missing, and a fleet has hundreds). f.mu is held.
func (f *fleetView) listed(rank int) bool {
	_, ok := slices.BinarySearch(f.ranks, rank)
	return ok
}

// leaving records the fleet as known when this Limiter loses Redis: as
// Redis last listed it, unless members of the fleet remembered from an
// outage just before are still missing (then that one's is kept). The time
// after that earlier outage ends: its shares are kept back until this
// Limiter is back (recovered), and for remember from then.
func (f *fleetView) leaving() {
	f.mu.Lock()
	defer f.mu.Unlock()
	var share share
	var shareOK, kept bool
	switch {
	case !f.learned:
	case f.missing():
		// Redis still lacks members of the earlier outage's fleet: pace
		// locally on this Limiter's share of that fleet, as on Redis,
		// within the sizes it kept within then (ownShare while missing).
		f.n, f.rank = f.remembered, f.rankBefore
		share, shareOK = f.ownShare()
		kept = true
	case f.joinedLate():
		// It joined after members that may pace locally without it (or
		// they pace on more sizes than a share keeps within): it
		// has no share of their fleet. When Redis answers again, it waits
		// as one started while Redis was down does (born), until they
		// could be back, and takes nothing from Redis meanwhile: as a
		// member of the fleet it remembers it would take instants of a
		// lattice they do not pace on (combination runner, seed 71).
		f.born, f.joinUntil = true, time.Time{}
		f.remembered, f.rememberedMembers, f.rememberedRanks = 0, 0, nil
	default:
		f.rememberFleet()
	}
	f.backAt, f.toldAt = time.Time{}, time.Time{}
	f.away = true
	if !kept {
		share, shareOK = f.ownShare()
	}
	f.awayShare, f.awayShareOK = share, shareOK
}

// rememberFleet keeps the fleet as this Limiter's calls on Redis kept to
// it (redisShareOK), for missing: the held members' when they pace on
// another size, so that, back on a Redis restarted empty before them, it
// keeps to their lattice (TestBackBesideHeldFleet); and the other size its
// local share kept within (alsoN: the fleet changed just before), since
// members still pacing locally may pace on either (TestBackAcrossTwoSizes).
// f.mu is held.
func (f *fleetView) rememberFleet() {
	n, also := f.n, f.alsoN()
	switch {
	case f.split():
		also = -1
	case len(f.held) > 0 && f.heldN > 1 && f.heldN != f.n:
		// Its calls on Redis kept to the held members' lattice, and
		// the members that knew of them keep within it too.
		n, also = f.heldN, 0
	}
	if also == 1 {
		also = 0 // a fleet of 1 paces on the whole: no lattice to keep clear of
	}
	f.remembered, f.rememberedMembers, f.rankBefore = n, f.members, f.rank
	f.rememberedAlso = also
	f.rememberedRanks = slices.Clone(f.ranks)
}

// stale reports whether the view is older than settle while this Limiter
// is on Redis: its heartbeats stopped (its process stalled: stopped, a
// virtual machine paused, a long GC; or a heartbeat ran late), so members
// may have lost Redis and paced locally meanwhile, and Redis may have lost
// the fleet (restarted empty), without its knowing. Its calls on Redis
// leave every other rank its share until a heartbeat tells it the fleet
// again (redisShareOK), and that heartbeat is taken as a return from an
// outage (update). (The combination runner, seed 8: a process stopped for
// 3 s across a Redis restart empty took the whole rate when it resumed,
// beside members that still paced locally.) A view without a settle (0)
// is never stale. f.mu is held.
func (f *fleetView) stale() bool {
	return f.learned && !f.away && f.settle > 0 && !f.lastBeat.IsZero() && time.Since(f.lastBeat) > f.settle
}

// staleSince returns when the view was last told the fleet, if it is
// stale (see stale).
func (f *fleetView) staleSince() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastBeat, f.stale()
}

// back ends the outage's local share (see leaving): the Limiter's calls go
// to Redis again, its handback done.
//
// The time the members not back yet have to come back (remember), and the
// wait of a sparse fleet (backUntil), start again here, as in the Python
// client: the handback runs on the loop that heartbeats, so no heartbeat
// is made while it runs, and one slowed by a fleet's master paused (its
// keys' handbacks waiting on it) used that time up before this Limiter's
// calls were on Redis. Before, a handback of 3.3 s, longer than remember,
// ended with a fleet of one on Redis beside a member still pacing locally
// (the combination runner's Cluster seed 50;
// TestMissingHeldAfterLongHandback).
func (f *fleetView) back() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.away = false
	if !f.backAt.IsZero() {
		f.backFrom(time.Now())
	}
}

// recovered starts the time during which shares the heartbeat does not
// show are kept back.
func (f *fleetView) recovered() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backFrom(time.Now())
}

// backFrom starts the return's times at t: remember's (backAt) and a
// sparse fleet's wait (backUntil). f.mu is held.
func (f *fleetView) backFrom(t time.Time) {
	f.backAt = t
	if f.backWait > 0 {
		f.backUntil = t.Add(f.backWait)
	}
}

// update applies a heartbeat's reply. late: the reply came back too late
// for its view to stand (Limiter.lateView): it is applied, and doubted as
// after a heartbeat that failed (doubt, and one more of fails in a row, so
// that calls stop waiting for a heartbeat when the next is late too).
func (f *fleetView) update(n, rank, members int, heldSizes []int, before int, held []int, late bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.born {
		now := time.Now()
		if f.joinUntil.IsZero() {
			f.joinUntil = now.Add(f.join)
		}
		if now.Before(f.joinUntil) {
			return
		}
		f.born = false
	}
	if f.stale() && !f.missing() {
		// The first heartbeat after the view went stale: as one back from
		// an outage of its own, keep back the shares of members the view
		// knew that Redis does not list (it lost them), for remember.
		f.rememberFleet()
		f.backAt = time.Now()
	}
	f.learned, f.doubt = true, late
	if late {
		f.fails++
	} else {
		f.fails, f.guessSince = 0, time.Time{}
	}
	f.lastBeat = time.Now()
	f.n, f.rank, f.members, f.held = n, rank, members, held
	f.heldSizes, f.heldN = heldSizes, 0
	if len(heldSizes) > 0 {
		f.heldN = slices.Max(heldSizes)
	}
	f.before = before
	if !f.backAt.IsZero() && time.Since(f.backAt) >= f.remember {
		f.backAt, f.remembered, f.rememberedMembers = time.Time{}, 0, 0
	}
	if f.away && !f.awayShareOK && !f.toldAt.IsZero() && time.Since(f.toldAt) >= f.settle {
		// Away with no share (it left as a newcomer), yet its heartbeats
		// reach Redis and have said "local" for long enough that the
		// members on Redis leave it its share: it takes it (a key whose
		// calls fail while the fleet's keys answer: a Cluster shard
		// down). Before, its callers waited for a handback that could not
		// reach the key (TestOneKeyDownOnNewcomer).
		f.awayShare, f.awayShareOK = f.ownShare()
	}
}

// beatFailed records that a heartbeat failed, in either mode. While
// members this Limiter remembers are not back yet (missing), the time they
// have to come back (remember) starts again: the fleet's records failed
// this heartbeat, most likely the others' too, and they cannot be back
// while they do, so that time counts from the last heartbeat that failed,
// not from the return (back). Before, a CLIENT PAUSE of the fleet's
// master longer than remember, just after this Limiter came back first on
// it restarted empty, used that time up: the first heartbeat after the
// pause listed this Limiter alone, and
// it took the whole of each key on Redis beside a member still pacing
// locally (the combination runner's Cluster seed 50;
// TestMissingHeldWhileHeartbeatsFail).
func (f *fleetView) beatFailed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.missing() {
		f.backAt = time.Now()
	}
}

// heartbeatFailed records that a heartbeat failed while this Limiter was
// on Redis, and returns how many in a row have.
func (f *fleetView) heartbeatFailed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.doubt = f.learned
	if f.learned {
		f.fails++
	}
	return f.fails
}

// told records that a heartbeat reached Redis in mode local (local) while
// this Limiter paces locally: the others learn it at their next heartbeat.
func (f *fleetView) told(local bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if local && f.away && f.toldAt.IsZero() {
		f.toldAt = time.Now()
	}
}

// taken records the ranks Redis's fleet has taken (see redisShare), the
// last of a heartbeat's view. A return from an outage whose heartbeat lists
// every member this Limiter knew is complete: it stops keeping to the
// fleet it knew, so that a member that dies after it (its rank freed) does
// not count as one missing from the outage (TestReturnEndsWhenAllListed).
func (f *fleetView) taken(ranks []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ranks = slices.Sorted(slices.Values(ranks)) // sorted: listed searches it
	if !f.backAt.IsZero() && f.remembered > 0 && !f.missing() {
		f.backAt, f.remembered, f.rememberedMembers = time.Time{}, 0, 0
	}
}

// A share is the part of every band a caller takes (core.lua's ARGV[3]).
// The zero share is the whole limit.
type share struct {
	// N is the fleet's size; at most 1: the whole limit.
	N int
	// Held are the ranks (0..N-1) of the members a group leaves their own
	// shares to: a caller on Redis whose fleet has members pacing locally.
	Held []int
	// Member, with IsMember, is this member's rank: a process pacing
	// locally takes its own share alone (rate/N, a burst B_k, N_k units of
	// each window, and slots on a lattice shared out by rank when the burst
	// is under N; see core.lua).
	Member   int
	IsMember bool
	// Also, with IsMember, is another fleet size (0: none) the member's
	// share keeps within too: right after the fleet changed, members may
	// pace on either size (each learns of the change at its next
	// heartbeat), so a member that knows both takes the smaller of its
	// shares in the two (its burst, its window quotas, its rate) and only
	// the instants of its rank on both lattices. Member is under Also.
	Also int
}

// Whole reports whether s is the whole limit.
func (s share) Whole() bool { return s.N <= 1 || (!s.IsMember && len(s.Held) == 0) }

// Arg returns s as the scripts take it (core.lua's ARGV[3], without the
// format): "1", "<n> <held>..." or a member's "m <n> <k> <also>".
func (s share) Arg() string {
	if s.IsMember && s.N > 1 {
		return "m " + strconv.Itoa(s.N) + " " + strconv.Itoa(s.Member) + " " + strconv.Itoa(s.Also)
	}
	if s.Whole() {
		return "1"
	}
	var b strings.Builder
	b.WriteString(strconv.Itoa(s.N))
	for _, k := range s.Held {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(k))
	}
	return b.String()
}

// shareArg is redisShare as the scripts take it; ok is false when this
// Limiter may take nothing on Redis now (shut). One reading serves both: a
// view that changed between two would send a call that takes the whole.
func (l *Limiter) shareArg() (arg string, ok bool) {
	s, ok := l.fleet.redisShareOK()
	return s.Arg(), ok
}

// seatView is what an in-flight band's call on Redis tells seats.lua of
// the fleet (its ARGV[2...4]): this Limiter's place (its rank, or "i<id>"
// before it has one), the fleet's size, the ranks Redis lists (live or
// held; "*" when unknown, or when the view is in doubt or stale) and those
// held, and whether Redis lately lost
// the fleet (members not back yet may hold seats it no longer records).
func (f *fleetView) seatView(id string) (holder string, n int, taken, held string, lost bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.learned {
		return "i" + id, 0, "*", "", false
	}
	holder, n = strconv.Itoa(f.rank), f.n
	taken = "*"
	if len(f.ranks) > 0 {
		taken = joinInts(f.ranks)
	}
	heldRanks := f.held
	if f.doubt || f.stale() {
		// Members may have joined since (the view lags while heartbeats
		// fail): a rank not listed is not known gone, and no holder is
		// dropped for it (seats.lua's "*"). Before, a view of before a
		// freeze dropped a live holder silent across it, whose calls
		// were open (combination runner, seed 128).
		taken = "*"
	}
	if (f.doubt || f.stale()) && !f.missing() {
		// As redisShareOK: the others may have lost Redis and pace
		// locally on their shares of N, which this Limiter learns only at
		// its next heartbeat (the combination runner's seed 57: a process
		// stopped 3 s took seats on Redis on resuming beside the others'
		// local ones, 6 open on a band of 5). Every other rank keeps
		// max(its seats, its share).
		heldRanks = otherRanks(f.n, f.rank)
	}
	lost = f.missing() || f.missingRank()
	switch {
	case f.missing() || f.doubt || f.stale():
	case f.split() || f.heldOnWhole():
		// The held members pace on shares of fleets of different sizes,
		// and seats.lua counts a held holder's share at one; or one paces
		// on the whole and may open every seat alone: grant no seat until
		// they are back, as right after Redis lost the fleet (mode "x";
		// TestHeldOnTwoSizes, TestHeldOnWholeView).
		lost = true
	case len(f.held) > 0 && f.heldN > 1 && f.heldN != f.n:
		// They pace on shares of the fleet they knew: count a held
		// holder's share at that size, as they keep to it. At f.n, a
		// fleet grown since, their shares were counted smaller than they
		// take.
		n = f.heldN
	}
	return holder, n, taken, joinInts(heldRanks), lost
}

// missingRank reports whether, back from an outage of its own, this
// Limiter finds a rank of the fleet it knew then (not its own) that Redis
// does not list yet. f.mu is held.
func (f *fleetView) missingRank() bool {
	if f.backAt.IsZero() || time.Since(f.backAt) >= f.remember {
		return false
	}
	return f.rankNotListed()
}

// otherRanks returns the ranks of a fleet of n but rank, ascending.
func otherRanks(n, rank int) []int {
	out := make([]int, 0, max(n-1, 0))
	for k := range n {
		if k != rank {
			out = append(out, k)
		}
	}
	return out
}

func joinInts(xs []int) string {
	var b strings.Builder
	for i, x := range xs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(x))
	}
	return b.String()
}

// localSlotsReady reports whether this Limiter, pacing locally, may take
// local slots though a heartbeat of its saying "redis" may have run on
// Redis after its switch, until mayRun (Limiter.localSlotsReady): once the
// fleet counts it as held (heldSince), its silence counted from mayRun. A
// "redis" run after a "local" changes nothing, heartbeat.lua keeping the
// latest mode.
func (f *fleetView) localSlotsReady(mayRun time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldSince(mayRun)
}

// localSeatsReady reports whether this Limiter, pacing locally, may take
// seats on its local share of an in-flight band: once the fleet counts it
// as held, and so leaves it its share (heldSince), its silence counted
// from its last heartbeat.
func (f *fleetView) localSeatsReady() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.heldSince(f.lastBeat)
}

// heldSince reports whether the fleet counts this Limiter, pacing locally,
// as held: once a heartbeat saying it paces locally reached Redis and the
// others heard it (settle), or once it has been silent since from long
// enough for them to hold it by its silence (two intervals, settle, and
// one more for them to hear it, +10%). A Limiter that never learned the
// fleet has no members to wait for. f.mu is held.
func (f *fleetView) heldSince(from time.Time) bool {
	if !f.learned || !f.away || f.members <= 1 {
		return true
	}
	if !f.toldAt.IsZero() && time.Since(f.toldAt) >= f.settle {
		return true
	}
	return !from.IsZero() && time.Since(from) >= outage.HeldBySilence(f.settle)
}
