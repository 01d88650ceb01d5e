package reserve

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/engine"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// fleetView is what a Limiter knows of the fleet sharing its KeyPrefix,
// learned from the heartbeats (lua/heartbeat.lua):
//
//   - n: the members (Limiters), ranked 0..n-1 by id, and this one's rank;
//   - held: the ranks of the members silent for more than two heartbeat
//     intervals (but less than Options.SilentHold), or pacing locally.
//     They may have lost Redis and be pacing on their own shares, so the
//     members on Redis leave them those shares (engine.Share).
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
	remembered        int       // n when this Limiter last lost Redis
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

	// A Limiter pacing locally keeps the share it left with (leaving)
	// until it is back on Redis (back), whatever its probes' heartbeats
	// say of the fleet meanwhile: the others pace on their shares of the
	// fleet they left, not of the one Redis lists now.
	away        bool
	awayShare   engine.Share
	awayShareOK bool

	lastView string // the view last logged (logView)
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
// unavailable, still waits before it learns the fleet (0: it has).
func (f *fleetView) joining() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.born || f.joinUntil.IsZero() {
		return 0
	}
	return max(time.Until(f.joinUntil), 0)
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
func (f *fleetView) redisShare() engine.Share {
	s, _ := f.redisShareOK()
	return s
}

// redisShareOK is redisShare; ok is false when this Limiter may take
// nothing on Redis now (shut): the held members pace on a fleet without it,
// every rank of which is held (it joined after they lost Redis). Its calls
// that would take slots are refused until one of them is back (see alsoN,
// Limiter.grantArgs).
func (f *fleetView) redisShareOK() (engine.Share, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.learned || f.n < 1 {
		return engine.Share{}, true
	}
	n, held := f.n, f.held
	if f.missing() {
		// Redis (restarted empty) lost the fleet: members not back yet
		// may still pace locally on their ranks of the fleet this Limiter
		// knew. Until they are back, leave them those ranks' shares:
		// every rank of that fleet but this Limiter's own and those of
		// the members back on Redis (they asked for their old ranks), so
		// that nobody shares an instant. (Before, each member back left
		// all the others', and two back on one key took a third of it
		// together: each charged its calls at a third's spacing on one
		// state.)
		n, held = f.remembered, make([]int, 0, f.remembered-1)
		for k := range f.remembered {
			if k != f.rankBefore && (!slices.Contains(f.ranks, k) || slices.Contains(f.held, k)) {
				held = append(held, k)
			}
		}
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
			return engine.Share{}, false
		}
	}
	if len(held) == 0 || len(held) >= n {
		return engine.Share{}, true
	}
	return engine.Share{N: n, Held: held}, true
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
func (f *fleetView) localShare() (engine.Share, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.away {
		return f.awayShare, f.awayShareOK
	}
	return f.ownShare()
}

// ownShare is localShare from the fleet as this Limiter knows it now. f.mu
// is held.
func (f *fleetView) ownShare() (engine.Share, bool) {
	n, rank := f.n, f.rank
	also := f.alsoN()
	if f.missing() {
		// Back from an outage, Redis (restarted empty) does not list the
		// whole fleet yet: keep the share this Limiter had in it.
		n, rank = f.remembered, f.rankBefore
	} else if also > 0 && rank >= also {
		return engine.Share{}, false
	}
	if !f.learned {
		if f.hint < 1 {
			return engine.Share{}, false
		}
		h := fnv.New32a()
		h.Write([]byte(f.id))
		n, rank = f.hint, int(h.Sum32()%uint32(f.hint))
	}
	if n <= 1 {
		return engine.Share{}, true // alone: the others left (a held member counts)
	}
	return engine.Share{N: n, Member: min(rank, n-1), IsMember: true, Also: also}, true
}

// alsoN returns the other fleet size this Limiter's local share keeps
// within too (engine.Share.Also; 0: none): the one the held members pace
// on, when it differs (they lost Redis before the fleet changed, and pace
// as they knew it); else the size before a change young enough that
// another member may not have heard of it. A member whose rank is beyond
// it joined after them: they pace as if it were not there, and it has no
// local share. f.mu is held.
func (f *fleetView) alsoN() int {
	switch {
	case !f.learned || f.missing():
		return 0
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
	a := f.alsoN()
	return a > 0 && f.rank >= a
}

// wantRank is the rank a heartbeat asks for: the one this Limiter had
// (Redis restarted empty gives it back if free), "" before it had one.
func (f *fleetView) wantRank() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.remembered > 0:
		return strconv.Itoa(f.rankBefore)
	case f.learned:
		return strconv.Itoa(f.rank)
	}
	return ""
}

// missing reports whether, back from an outage of its own, this Limiter
// sees fewer members than it knew before it: Redis (restarted empty) lost
// them, and those not back yet may still pace locally on their ranks. f.mu
// is held.
func (f *fleetView) missing() bool {
	return !f.backAt.IsZero() && time.Since(f.backAt) < f.remember && f.rememberedMembers > f.members
}

// leaving records the fleet as known when this Limiter loses Redis: as
// Redis last listed it, unless members of the fleet remembered from an
// outage just before are still missing (then that one's is kept). The time
// after that earlier outage ends: its shares are kept back until this
// Limiter is back (recovered), and for remember from then.
func (f *fleetView) leaving() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch a := f.alsoN(); {
	case !f.learned:
	case f.missing():
		// Redis still lacks members of the earlier outage's fleet: pace
		// locally on this Limiter's share of that fleet, as on Redis.
		f.n, f.rank = f.remembered, f.rankBefore
	case a > 0 && f.rank >= a:
		// It joined after members that may pace locally without it: it
		// has no share of their fleet. When Redis answers again, it waits
		// as one started while Redis was down does (born), until they
		// could be back, and takes nothing from Redis meanwhile: as a
		// member of the fleet it remembers it would take instants of a
		// lattice they do not pace on (combination runner, seed 71).
		f.born, f.joinUntil = true, time.Time{}
		f.remembered, f.rememberedMembers = 0, 0
	default:
		f.remembered, f.rememberedMembers, f.rankBefore = f.n, f.members, f.rank
	}
	f.backAt = time.Time{}
	f.away = true
	f.awayShare, f.awayShareOK = f.ownShare()
}

// back ends the outage's local share (see leaving): the Limiter's calls go
// to Redis again, its handback done.
func (f *fleetView) back() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.away = false
}

// recovered starts the time during which shares the heartbeat does not
// show are kept back.
func (f *fleetView) recovered() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.backAt = time.Now()
}

func (f *fleetView) update(n, rank, members, heldN, before int, held []int) {
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
	f.learned = true
	f.n, f.rank, f.members, f.held, f.heldN = n, rank, members, held, heldN
	f.before = before
	if !f.backAt.IsZero() && time.Since(f.backAt) >= f.remember {
		f.backAt, f.remembered, f.rememberedMembers = time.Time{}, 0, 0
	}
}

// taken records the ranks Redis's fleet has taken (see redisShare).
func (f *fleetView) taken(ranks []int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ranks = ranks
}

// shareArg is redisShare as the scripts take it; ok is false when this
// Limiter may take nothing on Redis now (shut). One reading serves both: a
// view that changed between two would send a call that takes the whole.
func (l *Limiter) shareArg() (arg string, ok bool) {
	s, ok := l.fleet.redisShareOK()
	return s.Arg(), ok
}

var heartbeatScript = redis.NewScript(lua.Heartbeat)

// fleetKeys are the heartbeat set, the fleet's details, the policies
// reported, the ids in order, the suspects checked and the reports' times,
// in one hash tag.
func (l *Limiter) fleetKeys() []string { return fleetKeysOf(l.opts.KeyPrefix) }

// fleetKeysOf is fleetKeys for the key prefix prefix.
func fleetKeysOf(prefix string) []string {
	k := prefix + "{limiters}"
	return []string{k, k + ":info", k + ":policies", k + ":ids", k + ":checked", k + ":policies:at"}
}

// clientName is the name this Limiter's heartbeat connection carries
// (CLIENT SETNAME).
func clientName(id string) string { return "pacer-" + id }

// presence is a connection of the Limiter's own, named clientName(id) and
// kept open as long as the Limiter lives, so that the fleet can tell a
// process that exited (Redis closes its connections) from one that is
// silent but alive: stalled, or cut off from Redis (see checkSuspects). It
// carries no command after its name: no timeout ever closes it, so a
// process cut off from Redis keeps it open, as seen from Redis, as long as
// the network does. While Redis answers, each heartbeat checks that Redis
// still lists it (CLIENT LIST ID: a Redis restarted, or its idle timeout,
// closes it) and makes a new one if not. Without one (a Ring) or the right
// to name it and list it (an ACL without client|setname, client|id and
// client|list), the Limiter is never a suspect: when it goes silent, the
// fleet holds its share for SilentHold.
//
// A client id means something only on the server that gave it: the
// heartbeat reports the server's run id with it, and a member checks only
// the suspects whose connection was opened on the server it is connected to
// itself. After a failover (a Cluster's replica promoted, a Sentinel's) or a
// restart, the new server has none of the old connections: a member silent
// since then may be alive and cut off, so it stays held until it is heard
// from again or SilentHold passes.
type presence struct {
	mu   sync.Mutex
	conn *redis.Conn
	node redis.UniversalClient // the client conn comes from (a Cluster's node for the fleet's keys)
	cid  int64                 // its client id; 0: none
	run  string                // the run id of the server conn is open on
	deny bool                  // refused by the ACL: not tried again
}

// present makes sure the presence connection is open, and returns the
// client to check suspects on, its client id (0: none) and the run id of
// its server. It runs before each heartbeat while Redis answers.
func (l *Limiter) present(ctx context.Context) (redis.UniversalClient, int64, string) {
	p := &l.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, l.opts.CallTimeout)
	defer cancel()
	if p.conn != nil {
		list, err := clientListIDs(ctx, p.node, p.cid)
		switch {
		case err == nil && strings.Contains(list, "name="+clientName(l.id)):
			return p.node, p.cid, p.run
		case err != nil && !strings.HasPrefix(err.Error(), "NOPERM"):
			return p.node, p.cid, p.run // Redis does not answer: keep it, the network may
		}
		_ = p.conn.Close()
		p.conn, p.cid, p.run = nil, 0, ""
	}
	var node *redis.Client
	switch c := l.rdb.(type) {
	case *redis.Client:
		node = c
	case *redis.ClusterClient:
		n, err := c.MasterForKey(ctx, l.fleetKeys()[0])
		if err != nil {
			return l.rdb, 0, ""
		}
		node = n
	default:
		return l.rdb, 0, ""
	}
	if p.deny {
		return node, 0, ""
	}
	conn := node.Conn()
	var (
		cid int64
		run string
	)
	err := conn.ClientSetName(ctx, clientName(l.id)).Err()
	if err == nil {
		cid, err = conn.ClientID(ctx).Result()
	}
	if err == nil {
		_, err = clientListIDs(ctx, node, cid)
	}
	if err == nil {
		run, err = runID(ctx, conn)
	}
	switch {
	case err == nil:
		p.conn, p.node, p.cid, p.run = conn, node, cid, run
		return node, cid, run
	case strings.HasPrefix(err.Error(), "NOPERM"):
		p.deny = true
		l.opts.Logger.Info("pacer: the Redis user may not name and list connections (CLIENT SETNAME, ID, LIST, INFO server): a process that exits without Close keeps its share held for Options.SilentHold",
			"limiter", l.id, "err", err)
	}
	_ = conn.Close()
	return node, 0, ""
}

// runID is the run id of the server conn is open on (INFO server): it
// changes when the server restarts, and differs between a master and its
// replicas.
func runID(ctx context.Context, conn *redis.Conn) (string, error) {
	info, err := conn.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	_, rest, _ := strings.Cut(info, "run_id:")
	if f := strings.Fields(rest); len(f) > 0 {
		return f[0], nil
	}
	return "", errors.New("pacer: INFO server names no run_id")
}

// clientListIDs is CLIENT LIST ID id...: the lines of the connections
// still open among ids.
func clientListIDs(ctx context.Context, c redis.UniversalClient, ids ...int64) (string, error) {
	args := []any{"CLIENT", "LIST", "ID"}
	for _, id := range ids {
		args = append(args, id)
	}
	return c.Do(ctx, args...).Text()
}

// absent closes the presence connection (Close, or a test's kill).
func (l *Limiter) absent() {
	p := &l.presence
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
		p.conn, p.cid, p.run = nil, 0, ""
	}
}

// reports are the policies this Limiter's code passes, per key, for the
// heartbeat to report to operators (Admin.Status shows them as the limit
// in force when none is stored). Each is reported when first used or
// changed, and again every reportEvery while in use; the fleet's hash drops
// a report not renewed within reportKeep. At most maxReports keys are
// tracked (the least recently used go first), reportBatch reported per
// heartbeat.
type reports struct {
	mu sync.Mutex
	m  map[string]*report
}

type report struct {
	s    *spec
	sent time.Time
	used time.Time
}

const (
	maxReports  = 10_000
	reportBatch = 500
	reportEvery = time.Minute
	reportKeep  = 3 * reportEvery
)

func (r *reports) note(key string, s *spec) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.m[key]; ok {
		if e.s != s && e.s.sig != s.sig {
			e.s, e.sent = s, time.Time{}
		}
		e.used = now
		return
	}
	if r.m == nil {
		r.m = make(map[string]*report)
	}
	if len(r.m) >= maxReports {
		// Make room: the least recently used tenth goes.
		used := make([]time.Time, 0, len(r.m))
		for _, e := range r.m {
			used = append(used, e.used)
		}
		slices.SortFunc(used, func(a, b time.Time) int { return a.Compare(b) })
		cut := used[len(used)/10]
		for k, e := range r.m {
			if !e.used.After(cut) {
				delete(r.m, k)
			}
		}
	}
	r.m[key] = &report{s: s, used: now}
}

// due returns the heartbeat's arguments for the reports due now (key,
// "<ms> <policy>" pairs): those of keys used since their last report and
// not reported within reportEvery, and marks them sent.
func (r *reports) due(now time.Time) []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []any
	for key, e := range r.m {
		if len(out) >= 2*reportBatch {
			break
		}
		if now.Sub(e.sent) >= reportEvery && e.used.After(e.sent) {
			out = append(out, key, strconv.FormatInt(now.UnixMilli(), 10)+" "+e.s.storedText())
			e.sent = now
		}
	}
	return out
}

// heartbeat records this Limiter as live, with its mode, and learns the
// fleet. While degraded it is the probe. It runs again at once (twice at
// most) when the reply changed what the next one says: members were found
// to have exited, or this Limiter's local share changed, whose size the
// others keep to if it loses Redis (combination runner, seed 25: reported
// a heartbeat late, the others held it on a lattice of another size).
func (l *Limiter) heartbeat(ctx context.Context) error {
	for i := 0; ; i++ {
		again, err := l.heartbeatOnce(ctx)
		if err != nil || !again || i == 2 {
			return err
		}
	}
}

func (l *Limiter) heartbeatOnce(ctx context.Context) (again bool, err error) {
	l.health.mu.Lock()
	mode, since, outage := "redis", l.health.since, l.health.outage
	if l.health.degraded {
		mode = "local"
	}
	l.health.mu.Unlock()
	// A Limiter is live if heard from within two intervals. But right after
	// an outage of this Limiter's own (it paced locally, or its heartbeat
	// failed), one that has not been heard from since the outage began
	// most likely lost Redis too and may still pace locally on its share:
	// it counts as held (the shares of the Limiters on Redis leave room
	// for it) until it is heard from again. Without this, the first
	// Limiter back would take the whole rate from Redis while the others
	// still paced locally. A Limiter just started has
	// heard from nobody yet: a member not heard from within a heartbeat
	// (suspectAfter: they come every interval ± 10%) counts as held too,
	// since it may have lost Redis and pace locally; a process started
	// again as an outage ended otherwise took the whole rate on the
	// strength of heartbeats the others sent before it (combination
	// runner, seed 136).
	live := 2 * l.opts.HeartbeatInterval
	if !outage.IsZero() {
		live = min(live, max(time.Since(outage), time.Millisecond))
	}
	if d := time.Since(l.started); d < live {
		live = min(live, max(d, l.suspectAfter()))
	}
	// The presence connection first: the heartbeat says whether it is
	// named (a named member can be found to have exited).
	var (
		node redis.UniversalClient
		cid  int64
		run  string
	)
	if mode == "redis" {
		node, cid, run = l.present(ctx)
	}
	ls, _ := l.fleet.localShare()
	flag := " " + strconv.FormatInt(cid, 10) + " " + strconv.Itoa(max(ls.N, 0))
	if cid != 0 {
		flag += " " + run
	}
	args := []any{l.id, mode, strconv.FormatInt(since.UnixMilli(), 10) + flag,
		strconv.FormatInt(live.Milliseconds(), 10),
		strconv.FormatInt(l.opts.SilentHold.Milliseconds(), 10),
		strconv.FormatInt(l.suspectAfter().Milliseconds(), 10),
		strconv.FormatInt(reportKeep.Milliseconds(), 10), l.fleet.wantRank(), ""}
	args = append(args, l.reports.due(time.Now())...)
	res, err := l.run(ctx, "heartbeat", "", func(ctx context.Context) (any, error) {
		// A deadline per try: a heartbeat Redis runs after its caller gave
		// up changes nothing (heartbeat.lua's ARGV[9]).
		if d, ok := l.heartbeatDeadline(); ok {
			args[8] = strconv.FormatInt(d, 10)
		}
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), args...).Result()
	}, nil)
	if err != nil {
		if mode == "redis" {
			// Redis failed this Limiter's heartbeat, though not (yet) its
			// calls: it failed the others' too, most likely, and some may
			// pace locally now. An outage of its own, for the rule above
			// (combination runner, seed 55: a member whose calls a lease
			// served through an out-of-memory Redis took the whole rate at
			// its end beside a member still pacing locally).
			l.health.mu.Lock()
			if !l.health.degraded {
				l.health.outage = time.Now()
			}
			l.health.mu.Unlock()
		}
		return false, err
	}
	r, ok := res.([]any)
	if !ok || len(r) != 10 {
		return false, nil
	}
	n, ok1 := r[4].(int64)
	rank, ok2 := r[3].(int64)
	heldList, ok3 := r[5].([]any)
	suspects, ok4 := r[6].([]any)
	if !ok1 || !ok2 || !ok3 || !ok4 || n < 1 {
		return false, nil
	}
	held := make([]int, 0, len(heldList))
	for _, h := range heldList {
		if k, ok := h.(int64); ok && k >= 0 && k < n {
			held = append(held, int(k))
		}
	}
	slices.Sort(held)
	held = slices.Compact(held)
	liveN, _ := r[1].(int64)
	heldN, _ := r[2].(int64)
	latticeN, _ := r[7].(int64)
	before, _ := r[8].(int64)
	var ranks []int
	if rs, ok := r[9].([]any); ok {
		for _, x := range rs {
			if k, ok := x.(int64); ok {
				ranks = append(ranks, int(k))
			}
		}
	}
	l.fleet.update(int(n), int(rank), int(liveN+heldN), int(latticeN), int(before), held)
	l.fleet.taken(ranks)
	l.logView(ctx, mode)
	// Only a member connected to the fleet's server itself checks (not one
	// pacing locally: its client may reach another node, or none).
	if len(suspects) > 0 && cid != 0 && l.checkSuspects(ctx, node, run, suspects) {
		// Members removed: learn the fleet without them at once.
		return true, nil
	}
	now, _ := l.fleet.localShare()
	return now.N != ls.N, nil
}

// heartbeatDeadline returns the deadline of a heartbeat sent now, Unix ms
// on the server's clock: when this Limiter gives up on it (CallTimeout),
// plus the estimate's error. ok is false without an estimate of the
// server's clock (a Clock set, or no round trip yet).
func (l *Limiter) heartbeatDeadline() (int64, bool) {
	if !l.serverTime {
		return 0, false
	}
	ns, rtt, ok := l.sync.bestServer(l.clock.Now())
	if !ok {
		return 0, false
	}
	return (ns + int64(l.opts.CallTimeout+rtt) + int64(time.Millisecond) - 1) / int64(time.Millisecond), true
}

// logView logs the fleet's view at Debug when it changed: the shares this
// Limiter takes on Redis and locally.
func (l *Limiter) logView(ctx context.Context, mode string) {
	if !l.opts.Logger.Enabled(ctx, slog.LevelDebug) {
		return
	}
	f := &l.fleet
	ls, _ := f.localShare()
	f.mu.Lock()
	view := fmt.Sprintf("mode=%s n=%d rank=%d members=%d held=%v held_n=%d remembered=%d/%d rank_before=%d missing=%v before=%d also=%d",
		mode, f.n, f.rank, f.members, f.held, f.heldN, f.remembered, f.rememberedMembers, f.rankBefore, f.missing(), f.before, f.alsoN())
	f.mu.Unlock()
	view += fmt.Sprintf(" redis=%q local=%d/%d", f.redisShare().Arg(), ls.Member, ls.N)
	f.mu.Lock()
	changed := view != f.lastView
	f.lastView = view
	f.mu.Unlock()
	if changed {
		l.opts.Logger.Debug("pacer: fleet view", "view", view, "limiter", l.id)
	}
}

// suspectAfter is how long a member may be silent before the fleet checks
// whether its process still holds a connection: a little over one
// heartbeat (they come every interval ± 10%), well before it would count
// as held (two intervals), so that a process that exited is removed before
// anyone keeps its share back.
func (l *Limiter) suspectAfter() time.Duration { return l.opts.HeartbeatInterval * 11 / 10 }

// checkSuspects looks for each suspect's presence connection (by client
// id, and its name) in CLIENT LIST: a member whose connection is gone has
// exited (killed, crashed), and is removed from the fleet at once; one still
// connected is stalled or cut off from Redis and stays held (up to
// SilentHold). suspects are triples of a Limiter id, a client id and the
// run id of the server that gave it: only those opened on node's server,
// run, are checked (see presence). A Redis that refuses CLIENT LIST (an ACL
// without it) leaves them held.
func (l *Limiter) checkSuspects(ctx context.Context, node redis.UniversalClient, run string, suspects []any) (removed bool) {
	var ids []int64
	cid := map[string]int64{}
	for i := 0; i+2 < len(suspects); i += 3 {
		id, _ := suspects[i].(string)
		c, err := strconv.ParseInt(fmt.Sprint(suspects[i+1]), 10, 64)
		on, _ := suspects[i+2].(string)
		if id == "" || id == l.id || err != nil || run == "" || on != run {
			continue
		}
		cid[id] = c
		ids = append(ids, c)
	}
	if len(ids) == 0 {
		return false
	}
	res, err := l.run(ctx, "heartbeat", "", func(ctx context.Context) (any, error) {
		return clientListIDs(ctx, node, ids...)
	}, nil)
	if err != nil {
		return false
	}
	connected := map[string]bool{}
	for line := range strings.SplitSeq(res.(string), "\n") {
		var name, id string
		for field := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(field, "name=pacer-"); ok {
				name = v
			} else if v, ok := strings.CutPrefix(field, "id="); ok {
				id = v
			}
		}
		if name != "" && id == strconv.FormatInt(cid[name], 10) {
			connected[name] = true
		}
	}
	var gone, alive []string
	for id := range cid {
		if connected[id] {
			alive = append(alive, id)
		} else {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	if len(gone) > 0 {
		l.opts.Logger.Info("pacer: fleet members exited without Close (their connection is gone): their shares go back to the fleet",
			"members", gone, "limiter", l.id)
	}
	_, err = l.run(ctx, "heartbeat", "", func(ctx context.Context) (any, error) {
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), l.id, "check", strings.Join(gone, " "), strings.Join(alive, " ")).Result()
	}, nil)
	return err == nil && len(gone) > 0
}

// leave removes this Limiter from the heartbeat set (Close).
func (l *Limiter) leave(ctx context.Context) error {
	_, err := l.run(ctx, "heartbeat", "", func(ctx context.Context) (any, error) {
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), l.id, "leave").Result()
	}, nil)
	return err
}

// horizons remembers, per key, the latest slot Redis granted this Limiter
// (server clock, Unix ns), also through leases and holds, which do not
// return the key's state: if Redis fails, the key's local state starts no
// earlier, so local slots never come on top of Redis slots still to be
// used.
type horizons struct {
	mu sync.Mutex
	at map[string]horizon
}

type horizon struct {
	slotNS int64
	spec   *spec // the policy of the reservation
}

func (h *horizons) note(key string, slotNS int64, s *spec) {
	h.mu.Lock()
	if h.at == nil {
		h.at = make(map[string]horizon)
	}
	if slotNS > h.at[key].slotNS {
		h.at[key] = horizon{slotNS, s}
	}
	h.mu.Unlock()
}

func (h *horizons) get(key string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at[key].slotNS
}

// ahead returns the keys whose latest slot lies after nowNS, and their
// policies.
func (h *horizons) ahead(nowNS int64) map[string]*spec {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*spec)
	for k, v := range h.at {
		if v.slotNS > nowNS {
			out[k] = v.spec
		}
	}
	return out
}

// sweep forgets slots that have passed.
func (h *horizons) sweep(nowNS int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, v := range h.at {
		if v.slotNS <= nowNS {
			delete(h.at, k)
		}
	}
}
