package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var heartbeatScript = redis.NewScript(lua.Heartbeat)

// fleetKeys are the heartbeat set, the fleet's details, the policies
// reported, the ids in order, the suspects checked and the reports' times,
// in one hash tag.
func (l *Limiter) fleetKeys() []string { return layout.FleetKeys(l.opts.KeyPrefix) }

// Reports: the policy this Limiter's code passes on each key (a field of
// the key's state, keys.go), for the heartbeat to report to operators
// (admin.Client.Status shows it as the limit in force when none is
// stored). Each is reported when first used or changed, and again every
// reportEvery while in use; the fleet's hash drops a report not renewed
// within reportKeep. At most reportBatch are reported per heartbeat, after
// it, reportChunk to a call (sendReports).
//
// Every member that uses a key reports it, but the fleet writes it about
// once per reportEvery (issue 43: 4 processes on 10,000 keys each wrote
// all 10,000, 500 a heartbeat, and a heartbeat of 450 reports held Redis
// 2 to 2.4 ms, up to 13): a heartbeat first reads the reports the fleet
// holds for the keys due (reportsDue's held) and does not send one another
// member made fresh, and heartbeat.lua does not rewrite a report of the
// same policy younger than keep_ms / 3 (reportEvery), whichever member
// made it. So the member whose report is held writes it again a minute on,
// and a report is at most reportEvery plus a member's round of its keys
// old while any member uses the key. The batch bounds a heartbeat's Redis
// time (docs/sizing.md, "The policies' reports"); a member sends 100
// reports a second at most, so it keeps the reports of up to
// (reportKeep - reportEvery) x 100 = 12,000 keys it alone uses.
type report struct {
	s    *spec
	sent time.Time
	used time.Time
}

const (
	reportBatch = 100
	reportChunk = 20          // reports per call of heartbeat.lua's "report"
	reportCheck = 500         // due reports whose held ones a heartbeat reads
	reportEvery = time.Minute // heartbeat.lua's keep_ms / 3
	reportKeep  = 3 * reportEvery
)

// reportUse records that key is called with policy s.
func (l *Limiter) reportUse(key string, s *spec) {
	now := time.Now()
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	r := &ks.report
	if r.s != s && (r.s == nil || r.s.sig != s.sig) {
		r.s, r.sent = s, time.Time{}
	}
	r.used = now
}

// reportsDue returns the heartbeat's arguments for the reports due now
// (key, "<ms> <policy>" pairs, reportBatch at most): those of keys used
// since their last report and not reported within reportEvery, and marks
// them sent. With held (nil: none), the reports the fleet holds for up
// to reportCheck due keys are read first (one HMGET): one another member
// made fresh, of the same policy, is not sent; its key counts as reported
// when that report was made, and is due again reportEvery after it. Of 4
// processes starting together on 10,000 keys, each sent all 10,000; the
// fleet's hash keeps one each.
func (l *Limiter) reportsDue(now time.Time, held func(keys []string) []any) []any {
	type due struct {
		ks   *keyState
		s    *spec
		text string
	}
	limit := reportBatch
	if held != nil {
		limit = reportCheck
	}
	var cands []due
	for _, ks := range l.states.all() {
		if len(cands) >= limit {
			break
		}
		ks.mu.Lock()
		if r := &ks.report; r.s != nil && now.Sub(r.sent) >= reportEvery && r.used.After(r.sent) {
			cands = append(cands, due{ks, r.s, r.s.storedText()})
		}
		ks.mu.Unlock()
	}
	var hv []any
	if held != nil && len(cands) > 0 {
		names := make([]string, len(cands))
		for i, c := range cands {
			names[i] = c.ks.name
		}
		if hv = held(names); len(hv) != len(cands) {
			hv = nil // unread: send them
		}
	}
	var out []any
	for i, c := range cands {
		if hv != nil {
			if at, ok := freshReport(hv[i], c.text, now); ok {
				c.ks.mu.Lock()
				if r := &c.ks.report; r.s == c.s {
					r.sent = at
				}
				c.ks.mu.Unlock()
				continue
			}
		}
		if len(out) >= 2*reportBatch {
			continue
		}
		out = append(out, c.ks.name, strconv.FormatInt(now.UnixMilli(), 10)+" "+c.text)
		c.ks.mu.Lock()
		if r := &c.ks.report; r.s == c.s {
			r.sent = now
		}
		c.ks.mu.Unlock()
	}
	return out
}

// freshReport reports whether v, a report the fleet holds ("<Unix ms>
// <policy>"), is of policy text and younger than reportEvery at now (this
// Limiter's clock; heartbeat.lua decides on the server's when it is sent),
// and when it was made.
func freshReport(v any, text string, now time.Time) (time.Time, bool) {
	s, ok := v.(string)
	if !ok {
		return time.Time{}, false
	}
	ms, p, ok := strings.Cut(s, " ")
	at, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || p != text {
		return time.Time{}, false
	}
	t := time.UnixMilli(at)
	if age := now.Sub(t); age < 0 || age >= reportEvery {
		return time.Time{}, false
	}
	return t, true
}

// heldReports reads the reports the fleet holds for keys (HMGET), nil if
// it cannot (the heartbeat then sends them all).
func (l *Limiter) heldReports(ctx context.Context) func(keys []string) []any {
	return func(keys []string) []any {
		ctx, cancel := context.WithTimeout(ctx, l.opts.CallTimeout)
		defer cancel()
		v, err := l.rdb.HMGet(ctx, l.fleetKeys()[2], keys...).Result()
		if err != nil {
			return nil
		}
		return v
	}
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
	mode, since := names.ModeRedis, l.health.since
	if l.health.degraded {
		mode = names.ModeLocal
	}
	l.health.mu.Unlock()
	// The presence connection first: the heartbeat names it, so that the
	// fleet can find this member exited. Pacing locally too: a member
	// whose heartbeats reach Redis while it paces locally (Redis answers
	// again and no probe has switched it back yet; on a Cluster, a shard
	// of its keys down while the fleet's is up) and that then exits was
	// held for SilentHold, its shares and its seats kept from the others
	// (combination runner, seed 18: to the end of the run). There it is
	// checked only after a heartbeat Redis answered (lastPresence).
	var (
		node redis.UniversalClient
		cid  int64
		run  string
	)
	if mode == names.ModeRedis || l.presence.lastAnswered() {
		node, cid, run = l.present(ctx)
	} else {
		node, cid, run = l.lastPresence()
	}
	size := l.fleet.reportedSize()
	flag := " " + strconv.FormatInt(cid, 10) + " " + strconv.Itoa(size)
	if cid != 0 {
		flag += " " + run
	}
	args := []any{l.id, mode, l.sinceMS(since) + flag, "",
		strconv.FormatInt(l.opts.SilentHold.Milliseconds(), 10),
		strconv.FormatInt(l.suspectAfter().Milliseconds(), 10),
		strconv.FormatInt(reportKeep.Milliseconds(), 10), l.fleet.wantRank(), ""}
	// The reports the fleet holds, read first on Redis, unless the last
	// heartbeat failed: a Redis that does not answer would delay this one
	// by a CallTimeout more.
	var heldRead func([]string) []any
	l.fleet.mu.Lock()
	doubt := l.fleet.doubt
	l.fleet.mu.Unlock()
	if mode == names.ModeRedis && !doubt {
		heldRead = l.heldReports(ctx)
	}
	due := l.reportsDue(time.Now(), heldRead)
	var took time.Duration // the script's round trip, the last try's
	res, err := l.run(ctx, names.OpHeartbeat, "", func(ctx context.Context) (any, error) {
		// A deadline per try: a heartbeat Redis runs after its caller gave
		// up changes nothing (heartbeat.lua's ARGV[9]).
		// The mode as it is when the heartbeat leaves: a switch to local
		// pacing while it was made (a stalled process) must not be
		// reported as "redis" (heartbeat.lua keeps the latest mode's).
		// A "redis" under way is counted in the same lock: a switch
		// after this sees it (localSlotsReady).
		l.health.mu.Lock()
		if now := l.health.since; l.health.degraded && mode == names.ModeRedis {
			mode, since = names.ModeLocal, now
			args[1], args[2] = mode, l.sinceMS(since)+flag
		}
		out := mode == names.ModeRedis
		if out {
			l.health.beatsOut++
		}
		l.health.mu.Unlock()
		// Only "redis" has a deadline: "local" is true however late it
		// runs (a later "redis" has a later since, which it does not undo),
		// and a Limiter that just switched needs it to arrive.
		args[8] = ""
		var until time.Time
		if d, at, ok := l.heartbeatDeadline(ctx); ok && out {
			args[8], until = strconv.FormatInt(d, 10), at
		}
		// The live window as the heartbeat leaves: it counts back from
		// when the script runs, and the presence and the reports read
		// above take round trips of their own (a second each through a
		// proxy that delayed replies by one: TestFaultLatency).
		args[3] = strconv.FormatInt(l.liveWindow().Milliseconds(), 10)
		sent, sentClock := time.Now(), l.clock.Now()
		res, err := heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), args...).Result()
		took = time.Since(sent)
		if code, _ := layout.ErrorCode(err); code == "PACER_STALE" {
			l.resyncClock(ctx, "", sentClock) // for the next heartbeat's deadline
		}
		if out {
			// Answered (a reply, or an error Redis sent): it ran, or
			// never will, by now. Else it may still run, until its
			// deadline, if it reached Redis.
			var reply redis.Error
			answered := err == nil || errors.As(err, &reply)
			if !maySent(err) {
				until = time.Time{}
			}
			l.beatBack(answered, until)
		}
		return res, err
	}, nil)
	l.presence.beat(err == nil)
	if err != nil {
		l.fleet.beatFailed()
		if mode == names.ModeRedis {
			// Redis failed this Limiter's heartbeat, though not (yet) its
			// calls: it failed the others' too, most likely, and some may
			// pace locally now. An outage of its own, for the rule above
			// (combination runner, seed 55: a member whose calls a lease
			// served through an out-of-memory Redis took the whole rate at
			// its end beside a member still pacing locally).
			l.health.mu.Lock()
			if !l.health.degraded {
				l.health.outage, l.health.silent = time.Now(), noReply(err)
			}
			l.health.mu.Unlock()
			fails := l.fleet.heartbeatFailed()
			if fails >= 2 && errors.Is(err, ErrUnavailable) && !isTimeout(err) && !l.opts.FailClosed {
				// Two in a row for want of Redis: the fleet's records are
				// out of reach (on a Cluster, their shard may fail while
				// the keys' answer), and every other member may pace
				// locally. Not timeouts: a slow machine is not an outage
				// (a timed-out call pings, and only a ping that fails
				// switches; TestSlowHeartbeatsStayOnRedis). Pace locally too, on this Limiter's share, until
				// a probe finds them. On Redis, its calls would take its
				// own rank's instants of keys whose burst is under the
				// fleet's size, each moving the key's queue past every
				// other rank's: a 200-process Cluster run whose fleet's
				// master was killed put its keys on the healthy masters
				// 28 s ahead, at 0.3 calls/s of 50 for 20 s after the
				// fleet was back (TestFleetUnreachablePacesLocally).
				l.degrade(fails, fmt.Errorf("two heartbeats in a row failed, the fleet's records are out of reach: %w", err))
			}
			l.sharesMoved()
		}
		return false, err
	}
	defer l.sendReports(ctx, due)
	r, ok := res.([]any)
	if !ok || len(r) != 12 {
		return false, nil
	}
	l.format.Store(parseFormat(r[10]))
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
	before, _ := r[8].(int64)
	// The sizes the held members pace on (held_n, r[7], the largest).
	var sizes []int
	if xs, ok := r[11].([]any); ok {
		for _, x := range xs {
			if s, ok := x.(int64); ok && s > 0 {
				sizes = append(sizes, int(s))
			}
		}
	}
	// The ranks taken: every rank below n but the holes.
	var holes []int
	if hs, ok := r[9].([]any); ok {
		for _, x := range hs {
			if k, ok := x.(int64); ok {
				holes = append(holes, int(k))
			}
		}
	}
	ranks := takenRanks(int(n), holes)
	// A reply that came back late tells the fleet as it was when the
	// script ran: a member may have lost Redis since and paced locally,
	// its "local" landing after this heartbeat ran (lateView).
	late := mode == names.ModeRedis && l.lateView(took)
	if late {
		l.health.mu.Lock()
		if !l.health.degraded {
			l.health.outage, l.health.silent = time.Now(), false
		}
		l.health.mu.Unlock()
	}
	l.fleet.told(mode == names.ModeLocal)
	l.fleet.update(int(n), int(rank), int(liveN+heldN), sizes, int(before), held, late)
	l.fleet.taken(ranks)
	l.sharesMoved()
	l.logView(ctx, mode)
	if late {
		// Heartbeat again at once: the next counts as held every member
		// not heard from since this reply arrived.
		return true, nil
	}
	// Only a member connected to the fleet's server itself checks (not one
	// pacing locally: its client may reach another node, or none).
	if len(suspects) > 0 && cid != 0 && mode == names.ModeRedis && l.checkSuspects(ctx, node, run, suspects) {
		// Members removed: learn the fleet without them at once.
		return true, nil
	}
	return l.fleet.reportedSize() != size, nil
}

// liveWindow is how recently a member must have been heard from to count
// as live in a heartbeat sent now (heartbeat.lua's ARGV[4]).
//
// A Limiter is live if heard from within two intervals. But right after
// an outage of this Limiter's own (it paced locally, or its heartbeat
// failed or answered late), one that has not been heard from since the
// outage began most likely lost Redis too and may still pace locally on
// its share: it counts as held (the shares of the Limiters on Redis leave
// room for it) until it is heard from again. Without this, the first
// Limiter back would take the whole rate from Redis while the others
// still paced locally. A Limiter just started has heard from nobody yet:
// a member not heard from within a heartbeat (suspectAfter: they come
// every interval ± 10%) counts as held too, since it may have lost Redis
// and pace locally; a process started again as an outage ended otherwise
// took the whole rate on the strength of heartbeats the others sent
// before it (combination runner, seed 136).
func (l *Limiter) liveWindow() time.Duration {
	l.health.mu.Lock()
	outage := l.health.outage
	l.health.mu.Unlock()
	live := 2 * l.opts.HeartbeatInterval
	if last, stale := l.fleet.staleSince(); stale && last.After(outage) {
		// This Limiter's view is stale (its heartbeats stopped, see
		// fleetView.stale): as after an outage of its own, from its last
		// heartbeat.
		outage = last
	}
	if !outage.IsZero() {
		live = min(live, max(time.Since(outage), time.Millisecond))
	}
	if d := time.Since(l.started); d < live {
		live = min(live, max(d, l.suspectAfter()))
	}
	return live
}

// lateView reports whether a heartbeat whose script's round trip took
// took answered too late for its view of the fleet to stand: later than
// CallTimeout beyond the shortest round trip of the clock estimate (a
// Redis far away answers every call that late, and its views stand). The
// view is as old as the reply's return trip, and a member that lost Redis
// meanwhile paces locally on its share, its "local" landing after this
// heartbeat ran: taken for the whole fleet on Redis, the view let this
// Limiter take the whole rate beside it. So a late view is doubted as
// after a heartbeat that failed, the reply's arrival is an outage of this
// Limiter's own (liveWindow), and the Limiter heartbeats again at once. A
// call timeout learned from slow round trips (callTimeout) keeps such a
// heartbeat from failing, not its view from aging: before, a proxy that
// delayed replies by a second for 4 s let a member take the whole rate on
// a view that left Redis 1.8 s before it arrived, beside a member that had
// paced locally since (TestFaultLatency: 301 calls in a second, bound 221;
// TestLateHeartbeatViewDoubted).
func (l *Limiter) lateView(took time.Duration) bool {
	var best time.Duration
	if l.serverTime {
		_, best, _ = l.sync.bestServer(l.clock.Now())
	}
	return took > l.opts.CallTimeout+best
}

// sendReports sends the reports due (reportsDue's pairs) after a
// heartbeat, reportChunk to a call of heartbeat.lua's "report": a call of
// 100 reports held Redis up to 3.7 ms, and a heartbeat carrying them
// blocked every other client meanwhile (issue 43). A chunk that fails is
// not sent again: its keys are due again reportEvery on, and the fleet
// keeps a report reportKeep.
func (l *Limiter) sendReports(ctx context.Context, due []any) {
	keep := strconv.FormatInt(reportKeep.Milliseconds(), 10)
	hold := strconv.FormatInt(l.opts.SilentHold.Milliseconds(), 10)
	for len(due) > 0 {
		n := min(len(due), 2*reportChunk)
		args := append([]any{l.id, "report", "", "", hold, "", keep, "", ""}, due[:n]...)
		due = due[n:]
		if _, err := l.run(ctx, names.OpHeartbeat, "", func(ctx context.Context) (any, error) {
			return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), args...).Result()
		}, nil); err != nil {
			return
		}
	}
}

// takenRanks returns the ranks below n but holes (heartbeat.lua replies
// with the holes: a fleet's ranks are nearly all taken).
func takenRanks(n int, holes []int) []int {
	holes = slices.Sorted(slices.Values(holes))
	ranks := make([]int, 0, max(n-len(holes), 0))
	for k := range n {
		for len(holes) > 0 && holes[0] < k {
			holes = holes[1:]
		}
		if len(holes) == 0 || holes[0] != k {
			ranks = append(ranks, k)
		}
	}
	return ranks
}

// sinceMS is when a mode began (health.since) as heartbeat.lua takes it:
// Unix ms, counted from New on the monotonic clock, so that a later mode
// never has an earlier since, whatever the wall clock does.
func (l *Limiter) sinceMS(since time.Time) string {
	return strconv.FormatInt(l.started.Add(since.Sub(l.started)).UnixMilli(), 10)
}

// heartbeatDeadline returns the deadline of a heartbeat sent now on ctx,
// Unix ms on the server's clock, and at, the same on the local clock: when
// this Limiter gives up on it (ctx's deadline, the call's timeout:
// CallTimeout, or longer on a slow machine, see callTimeout), plus the
// estimate's error. ok is false without an
// estimate of the server's clock (a Clock set, or no round trip yet).
// Before, the deadline was CallTimeout whatever the call's timeout: on a
// loaded machine, heartbeats its Limiter still waited for ran past it and
// failed (PACER_STALE), by the hundreds in a few seconds at 300 processes
// (pacerbench's cluster phase), and views in doubt followed
// (TestHeartbeatDeadlineIsTheCalls).
func (l *Limiter) heartbeatDeadline(ctx context.Context) (int64, time.Time, bool) {
	if !l.serverTime {
		return 0, time.Time{}, false
	}
	now := l.clock.Now()
	ns, rtt, ok := l.sync.bestServer(now)
	if !ok {
		return 0, time.Time{}, false
	}
	left := l.opts.CallTimeout
	if d, ok := ctx.Deadline(); ok {
		left = max(time.Until(d), 0)
	}
	// at: the same instant on the local clock, rounded up as the ms are.
	return (ns + int64(left+rtt) + int64(time.Millisecond) - 1) / int64(time.Millisecond), now.Add(left + rtt + time.Millisecond), true
}

// maySent reports whether a call that failed with err may have reached
// Redis, and so may still run there: not one that never had a connection
// (a dial refused, the pool's wait timed out, the client closed).
func maySent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	return !errors.Is(err, redis.ErrPoolTimeout) && !errors.Is(err, redis.ErrClosed)
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
	view := fmt.Sprintf("mode=%s n=%d rank=%d members=%d held=%v held_n=%d held_sizes=%v remembered=%d/%d rank_before=%d missing=%v before=%d also=%d",
		mode, f.n, f.rank, f.members, f.held, f.heldN, f.heldSizes, f.remembered, f.rememberedMembers, f.rankBefore, f.missing(), f.before, f.alsoN())
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
	res, err := l.run(ctx, names.OpHeartbeat, "", func(ctx context.Context) (any, error) {
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
	// Back from an outage of its own within SilentHold in which Redis did
	// not answer it (the network, a Redis gone or frozen), this Limiter
	// could not check the members silent since, and the same fault most
	// likely cut them off and reset their connections as the network
	// healed: they may pace locally still. Those no check found yet are
	// held one check more (heartbeat.lua's "check";
	// TestBackFirstHoldsTheReset). An outage of refusals (Redis out of
	// memory) closes no connection: a member whose connection is gone then
	// has exited, and is forgotten at once (TestRefusalsHoldNoExit;
	// holding them, the combination runner's seed 1 lost calls).
	unsure := "0"
	l.health.mu.Lock()
	o, silent := l.health.outage, l.health.silent
	l.health.mu.Unlock()
	if silent && !o.IsZero() && time.Since(o) < l.opts.SilentHold {
		unsure = "1"
	}
	res, err = l.run(ctx, names.OpHeartbeat, "", func(ctx context.Context) (any, error) {
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), l.id, "check", strings.Join(gone, " "), strings.Join(alive, " "), unsure).Result()
	}, nil)
	if err != nil {
		return false
	}
	// The script forgets those gone but a member cut off from Redis whose
	// connection closed only now (heartbeat.lua): it stays held a while.
	var forgotten []string
	if reply, ok := res.([]any); ok && len(reply) > 1 {
		for _, x := range reply[1:] {
			if id, ok := x.(string); ok {
				forgotten = append(forgotten, id)
			}
		}
	}
	if len(forgotten) > 0 {
		l.opts.Logger.Info("pacer: fleet members exited without Close (their connection is gone): their shares go back to the fleet",
			"members", forgotten, "limiter", l.id)
	}
	if held := len(gone) - len(forgotten); held > 0 {
		l.opts.Logger.Debug("pacer: fleet members cut off from Redis lost their connection: held a while longer, they may still pace locally",
			"members", held, "limiter", l.id)
	}
	return len(forgotten) > 0
}

// leave removes this Limiter from the heartbeat set (Close).
func (l *Limiter) leave(ctx context.Context) error {
	if l.onStore != nil {
		return nil // no fleet: it never joined one
	}
	_, err := l.run(ctx, names.OpHeartbeat, "", func(ctx context.Context) (any, error) {
		return heartbeatScript.Run(ctx, l.rdb, l.fleetKeys(), l.id, "leave").Result()
	}, nil)
	return err
}

// defaultFormat is the state format a Limiter writes until the fleet's
// setting (its heartbeat's reply) says otherwise: 2, which the previous
// release reads.
const defaultFormat = 2

// parseFormat reads the state format a heartbeat's reply names ("1", "2"
// or "3"); anything else is defaultFormat.
func parseFormat(v any) int32 {
	switch v {
	case "1":
		return 1
	case "3":
		return 3
	}
	return defaultFormat
}
