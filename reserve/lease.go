package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// Leases: a key that is hot in this process (Options.LeaseQueue callers
// queued behind a call in flight) gets a run of consecutive slots from
// Redis in one call (lease.lua), which the Limiter hands out locally, one
// per Reserve or Wait, without a Redis call each.
//
// A lease's slots are exactly the slots that many unit reservations, one
// after the other, would have been granted, each with its own number (seq)
// on the key, and Redis's state is left as they would have left it; so the
// window invariant (burst + rate × T over every interval T on the server's
// clock) holds exactly, leases or not, across every process of the fleet.
//
// What is leased: only keys paced by a single Limit (one token bucket),
// only requests of one permit (n = 1), only when no limit is stored for the
// key (cmd/pacer set, enforced or in shadow mode: lease.lua then answers
// "not leasable" and the key is not tried again for notLeasableFor), and
// never while the local fallback has granted something Redis has not seen
// yet. Everything else takes the normal path.
//
// Sizing: a lease spans at most Options.LeaseSpan of the key's rate (at
// most rate × LeaseSpan slots, so at 500/s and the default 1 ms no lease
// ever happens, at 10M/s up to 10,000), and at most maxLease. The first
// lease of a key is twice the batch that found it hot; after that the size
// follows the demand: the slots the last lease handed out over the time it
// lived, times half the lateness allowance plus how far the key's queue
// reached at the last reply (the lease's slots start at least that far
// ahead), so a lease is handed out well before its slots lapse.
//
// Hand-out: slots go out in order. A slot that has passed by more than the
// lateness allowance (Options.MaxLateness if positive, else the default,
// at least 1 ms) is not handed out but lapses, like a sleeper that woke too
// late; so does a slot that a pause this Limiter has read covers. When the
// next slot has fallen that far behind (demand below the lease's rate), the
// hand-out skips to slots passed by at most half the allowance, so that the
// caller's own lateness check a moment later keeps the slot. A
// caller's maximum wait is checked against its leased slot as against one
// from Redis.
//
// Lapsed slots are capacity lost. The leases a key holds (the live one and
// the next, fetched ahead) hold at most LeaseSpan of rate together, so a
// key that cools wastes at most rate × LeaseSpan slots, and so does a
// process that dies holding them: the rest of the fleet cannot use those
// slots (their time passes unused), and nothing else is lost.
//
// Cancel and Settle of a leased reservation go to Redis as for any other
// (adjust.lua, by its slot and number). A cancel gives back only what later
// reservations have not built on, and the lease's later slots count as
// built on: a slot canceled in the middle of a lease gives nothing back and
// is not handed out again locally (it lapses).
//
// Redis down mid-lease: the slots already leased are grants Redis made, and
// are handed out as usual; the local fallback starts after the lease's last
// slot (the horizon the lease noted).

var leaseScript = redis.NewScript(lua.Lease)

// maxLease bounds a lease's slots, whatever the span allows.
const maxLease = 1 << 16

// notLeasableFor is how long a key lease.lua refused (a stored limit) is
// not tried again.
const notLeasableFor = time.Second

// leaseSlot is one key and policy's leasing (a field of the key's state,
// keys.go): its live lease, the lease fetched ahead to follow it, the size
// of the next, and when lease.lua last refused it.
type leaseSlot struct {
	live *lease
	// ahead is the lease fetched while live still had slots (prefetch):
	// its slots follow live's, and it goes live when live is spent.
	ahead     *lease
	fetching  bool          // a prefetch is on its way
	fetched   chan struct{} // closed when the last prefetch is done (tests wait on it)
	next      int           // the size of the next lease (0: twice the batch that found the key hot)
	demand    float64       // the slots the last lease handed out per second of its life
	sized     time.Time     // when next was set (the Limiter's clock)
	refusedAt time.Time     // lease.lua said "not leasable" then
}

// leaseCounts are a Limiter's leased slots, for tests and figures.
type leaseCounts struct{ granted, handed, lapsed atomic.Int64 }

// A lease is a run of k slots on one key, slot i (0-based) numbered seq0+i.
type lease struct {
	spec    *spec
	base    replyTime // when lease.lua ran
	usNS    int64     // the reply's now_us in ns: x is relative to it
	seq0    int64
	first   int64 // slot 0 and slot k-1, Unix ns on the server's clock
	last    int64
	x, step float64 // slot k-1's exact time (ns after usNS) and the spacing (ns)
	k, next int     // next: the next slot to hand out
	lapsed  int
	epoch   uint64        // the key's epoch when Redis granted it (keyState.epoch)
	allow   time.Duration // the lateness allowance
	since   time.Time     // when it went live (the Limiter's clock): its demand is counted from then
}

// slotNS returns slot i on the server's clock (Unix ns): core.lua's grid
// applied to the exact time x - (k-1-i)*step, never outside [first, last].
func (ls *lease) slotNS(i int) int64 {
	switch i {
	case 0:
		return ls.first
	case ls.k - 1:
		return ls.last
	}
	x := ls.x - float64(ls.k-1-i)*ls.step
	v := ls.usNS + int64(math.Ceil(x-1e-3-math.Abs(x)*4e-16))
	return min(max(v, ls.first), ls.last)
}

// leasable reports whether req may take a leased slot: one permit of a
// single Limit, and leasing on.
func (l *Limiter) leasable(s *spec, req *request) bool {
	return l.opts.LeaseSpan > 0 && s.single && len(req.amounts) == 1 && req.amounts[0] == 1
}

// fromLease hands req the next slot of the key's lease for s, if there is
// a live one; ok is false when req must take the normal path. The result
// may be a *WaitTooLongError (the slot is then kept for the next caller).
func (l *Limiter) fromLease(key string, s *spec, req *request) (res result, ok bool) {
	if !l.leasable(s, req) {
		return result{}, false
	}
	ks := l.states.peek(key)
	if ks == nil {
		return result{}, false
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return l.fromLeaseLocked(ks, s, req, l.clock.Now())
}

// fromLeaseLocked is fromLease with ks.mu held, at now (the Limiter's
// clock).
func (l *Limiter) fromLeaseLocked(ks *keyState, s *spec, req *request, now time.Time) (res result, ok bool) {
	if !l.leasable(s, req) {
		return result{}, false
	}
	slot := ks.leases[s.sig]
	if slot == nil || slot.live == nil {
		return result{}, false
	}
	paused := ks.knownPause()
	var ls *lease
	for {
		ls = slot.live
		if ls == nil {
			return result{}, false
		}
		if ls.epoch != ks.epoch {
			// Redis lost the state that granted the lease (keyState.epoch):
			// its slots may be others' now.
			l.retireLease(slot, now)
			continue
		}
		// The earliest slot that may still go out, on the server's clock:
		// not passed by more than the allowance, not inside a pause known
		// since.
		nowNS := ls.base.serverNS + int64(now.Sub(ls.base.local))
		oldest := max(nowNS-int64(ls.allow), paused)
		if ls.slotNS(ls.next) < oldest {
			// Demand is below the lease's rate, and its next slot has
			// fallen behind: skip to slots passed by at most half the
			// allowance, so that the caller's own lateness check (Sleep's,
			// against the same allowance, a moment later) does not move it
			// to a fresh slot. Skipping only to the allowance's edge handed
			// out slots about to pass it, and Sleep moved one Wait in
			// thirteen.
			fresh := max(nowNS-int64(ls.allow/2), paused)
			rest := ls.k - ls.next
			skip := sort.Search(rest, func(j int) bool { return ls.slotNS(ls.next+j) >= fresh })
			ls.next += skip
			ls.lapsed += skip
			l.leased.lapsed.Add(int64(skip))
		}
		if ls.next < ls.k {
			break
		}
		l.retireLease(slot, now) // the lease fetched ahead, if any, goes live
	}
	i := ls.next
	at := ls.base.at(ls.slotNS(i))
	wait := at.Sub(now)
	if req.maxWait >= 0 {
		mw := req.maxWait
		if !req.since.IsZero() {
			mw = max(mw-now.Sub(req.since), 0)
		}
		if wait > mw {
			return result{nil, &WaitTooLongError{Wait: wait, MaxWait: req.maxWait, Band: s.bands[0].name}}, true
		}
	}
	ls.next++
	if ls.next == ls.k {
		l.retireLease(slot, now)
	}
	l.prefetch(ks, s, slot)
	l.leased.handed.Add(1)
	// ranNS: the lease's reply showed the key's state as it was when the
	// lease ran, and stands for a Wait's first pause check when that was
	// at or after the check's moment (Limiter.replyCovers), as a
	// reservation's own reply does; a pause this Limiter heard of since
	// lapsed the slots inside it above.
	r := &Reservation{lim: l, key: ks.name, spec: s, amounts: req.amounts, at: at, slotNS: ls.slotNS(i), seq: ls.seq0 + int64(i),
		source: SourceLease, ranNS: ls.base.serverNS, epoch: ls.epoch, placedLate: ls.base.late}
	if wait > 0 {
		// A lease's slots are its one bucket's, spaced 1/rate apart.
		r.band = s.bands[0].name
	}
	l.granted(r, wait)
	return result{r: r}, true
}

// retireLease ends slot's live lease at now (the Limiter's clock), and
// sizes the next from its use: the demand it saw (slots handed out over the
// time it lived) times half the lateness allowance, so that the next lease
// is handed out well before its slots lapse. The lease fetched ahead, if
// any, goes live. The key's lock is held.
func (l *Limiter) retireLease(slot *leaseSlot, now time.Time) {
	ls := slot.live
	if ls == nil {
		return
	}
	slot.live = nil
	if rest := ls.k - ls.next; rest > 0 {
		ls.lapsed += rest
		ls.next = ls.k
		l.leased.lapsed.Add(int64(rest))
	}
	lived := max(now.Sub(ls.since), time.Microsecond)
	slot.demand = float64(ls.k-ls.lapsed) / lived.Seconds()
	next := int(min(slot.demand*(ls.allow/2).Seconds(), maxLease))
	slot.next, slot.sized = max(next, 2), now
	if ahead := slot.ahead; ahead != nil {
		slot.live, slot.ahead = ahead, nil
		ahead.since = now
	}
}

// dropLeases lets every lease on the key lapse, the live ones and those
// fetched ahead (this Limiter paused the key: the leased slots may lie
// inside the pause). The key's lock is held.
func (l *Limiter) dropLeases(ks *keyState) {
	for _, slot := range ks.leases {
		for slot.live != nil {
			ls := slot.live
			l.retireLease(slot, ls.since.Add(ls.allow))
		}
	}
}

// Prefetch: a caller that takes a slot from the second half of a live
// lease starts the next lease's call, when no call for the key and policy
// is in flight, so that the callers who come after the last slot find the
// next lease there instead of waiting for a round trip, and no lone
// caller's call (one slot) comes between two leases. Redis grants its
// slots after the live lease's, so they go out after them, in order. The
// call holds the key's queue (batch.go) as any call does: callers who
// find both leases spent wait for it, and it serves them when it returns.
// The lease fetched ahead and the live one's rest hold at most LeaseSpan of
// the rate together, as one lease does.

// prefetch starts the call for the lease to follow slot's live one, if it
// is due (see Prefetch), and sizes it now: as the demand asks (as large as
// the live one before any demand is measured), and with the live one's
// rest at most LeaseSpan of the rate, as a lease alone is. The key's lock
// is held.
func (l *Limiter) prefetch(ks *keyState, s *spec, slot *leaseSlot) {
	ls := slot.live
	if ls == nil || slot.ahead != nil || slot.fetching || 2*(ls.k-ls.next) > ls.k || l.noPrefetch {
		return
	}
	if _, busy := ks.queues[s.sig]; busy || ks.local != nil {
		return
	}
	nowNS, _ := l.serverNow()
	size := l.sizeLocked(ks, s, nowNS, ls.k, 2, ls.k-ls.next)
	if size < 2 {
		return
	}
	slot.fetching, slot.fetched = true, make(chan struct{})
	ks.setQueue(s.sig, &queue{spec: s})
	go l.fetchAhead(ks, s, size, slot.fetched)
}

// fetchAhead runs the prefetch's call (on no caller's context, bounded by
// CallTimeout like a drain's), then serves the callers who queued
// meanwhile.
func (l *Limiter) fetchAhead(ks *keyState, s *spec, size int, done chan struct{}) {
	defer close(done)
	if !l.isDegraded() && !l.hasLocal(ks.name) {
		// An error is the next call's to meet: the callers who queued
		// take the normal way (drain), a fallback included.
		_, _ = l.newLease(context.Background(), ks.name, s, size, true)
	}
	ks.mu.Lock()
	if slot := ks.leases[s.sig]; slot != nil {
		slot.fetching = false
	}
	ks.mu.Unlock()
	l.handOff(ks, s.sig)
}

// leaseSize returns how many slots a lease for the key's policy s should
// have when a batch of n found it hot; below 2, none.
func (l *Limiter) leaseSize(key string, s *spec, n int) int {
	nowNS, _ := l.serverNow()
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return l.sizeLocked(ks, s, nowNS, 2*n, n, 0)
}

// sizeLocked returns how many slots a lease for the key's policy s should
// have at nowNS (server clock): first before any demand is measured, then
// as the demand asks (see Sizing); at least least, and with held slots
// already leased, at most LeaseSpan of the rate and maxLease. Below 2, or
// lease.lua refused the key lately: 0. ks.mu is held.
func (l *Limiter) sizeLocked(ks *keyState, s *spec, nowNS int64, first, least, held int) int {
	if l.opts.LeaseSpan <= 0 || !s.single {
		return 0
	}
	span := min(s.bands[0].rate*l.fleet.rateShare()*l.opts.LeaseSpan.Seconds(), maxLease) - float64(held)
	if span < 2 {
		return 0
	}
	slot := ks.leases[s.sig]
	want := first
	if slot != nil {
		if !slot.refusedAt.IsZero() && time.Since(slot.refusedAt) < notLeasableFor {
			return 0
		}
		if slot.next > 0 {
			want = slot.next
			if queue := ks.ahead - nowNS; queue > 0 {
				// The key's queue reaches queue ahead (as the last reply
				// showed it): the lease's first slot lies at least that far
				// ahead, and its slots may be handed out over that much
				// longer before they lapse.
				want += int(math.Round(min(slot.demand*time.Duration(queue).Seconds(), maxLease)))
			}
		}
	}
	return int(min(float64(max(want, least)), span))
}

// leaseBatch serves reqs, a hot key's batch, from a new lease, and the
// rest (requests that cannot lease, or all of them when k cannot) on the
// normal path. It runs on the key's drain, whose context is no
// caller's.
func (l *Limiter) leaseBatch(ctx context.Context, key string, s *spec, reqs []*request) []result {
	size := l.leaseSize(key, s, len(reqs))
	if size < 2 || l.isDegraded() || !l.leasable(s, reqs[0]) {
		return l.reserveBatch(ctx, key, s, reqs)
	}
	if l.hasLocal(key) {
		return l.reserveBatch(ctx, key, s, reqs)
	}
	ls, err := l.newLease(ctx, key, s, size, false)
	if err != nil {
		var noShare *noShareError
		if errors.As(err, &noShare) {
			// No share on Redis now (a view in doubt, or shut): the
			// normal path, whose callers wait for one. The local fallback
			// is for a Limiter off Redis; the fleet counts this one on it
			// (TestDoubtLeaseWaitsForHeartbeat).
			return l.reserveBatch(ctx, key, s, reqs)
		}
		if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
			return l.grantBatch(ctx, key, s, reqs, nil, true)
		}
		out := make([]result, len(reqs))
		for i := range out {
			out[i].err = err
		}
		return out
	}
	if ls == nil {
		return l.reserveBatch(ctx, key, s, reqs)
	}
	out := make([]result, len(reqs))
	var rest []*request
	var restAt []int
	for i, req := range reqs {
		res, ok := l.fromLease(key, s, req)
		if !ok {
			rest = append(rest, req)
			restAt = append(restAt, i)
			continue
		}
		out[i] = res
	}
	if len(rest) > 0 {
		for j, res := range l.reserveBatch(ctx, key, s, rest) {
			out[restAt[j]] = res
		}
	}
	return out
}

// newLease runs lease.lua for size slots of the key's policy s and
// installs the lease: to follow the live one when ahead (a prefetch) and
// the live one still has slots, else as the live one (the live one's rest
// lapses); nil without error when the key is not leasable.
func (l *Limiter) newLease(ctx context.Context, key string, s *spec, size int, ahead bool) (*lease, error) {
	now := l.clock.Now()
	args, err := l.grantArgs(key, now, s, 2)
	if err != nil {
		return nil, err
	}
	args = append(args, strconv.Itoa(size), "1")
	ks := l.states.get(key)
	ks.mu.Lock()
	horizon, seq := ks.horizon(), ks.seenSeq
	ks.mu.Unlock()
	if nowNS, _ := l.serverNow(); horizon > nowNS {
		// Should Redis have lost the key, it grants nothing before them.
		share, _ := l.shareArg()
		args[1] = l.env(key, now, s, share, false, lostHorizon(horizon, nowNS, seq))
	}
	keys := l.keys(key)
	var sentReal time.Time // for the pause read the reply stands for
	res, err := l.run(ctx, names.OpLease, key, func(ctx context.Context) (any, error) {
		sentReal = time.Now()
		return leaseScript.Run(ctx, l.scripts, keys, l.withDeadline(ctx, args)...).Result()
	}, nil)
	if err != nil {
		return nil, err
	}
	ls, state, err := l.parseLease(now, key, s, res)
	if err != nil {
		return nil, err
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if state != "" {
		ks.noteSeen(state, ks.stored, sentReal)
	}
	if ls != nil {
		ls.epoch = ks.epoch
	}
	if ks.leases == nil {
		ks.leases = make(map[string]*leaseSlot)
	}
	slot := ks.leases[s.sig]
	if slot == nil {
		slot = &leaseSlot{}
		ks.leases[s.sig] = slot
	}
	if ls == nil {
		slot.refusedAt = time.Now()
		return nil, nil
	}
	l.leased.granted.Add(int64(ls.k))
	ks.noteAhead(ls.last)
	if live := slot.live; ahead && live != nil && live.next < live.k && slot.ahead == nil {
		slot.ahead = ls
		return ls, nil
	}
	for slot.live != nil {
		l.retireLease(slot, ls.base.local)
	}
	slot.live, ls.since = ls, ls.base.local
	return ls, nil
}

// parseLease reads lease.lua's reply to a call sent at now: the lease
// (nil when the key is not leasable) and the state it carries, which
// stands for a sleeper's pause read (keyState.noteSeen), as a reservation's
// reply does.
func (l *Limiter) parseLease(now time.Time, key string, s *spec, res any) (*lease, string, error) {
	reply, ok := res.([]any)
	if !ok || len(reply) != 9 {
		return nil, "", replyError(names.OpLease, key, res)
	}
	state, _ := reply[8].(string)
	base, err := l.replyBase(now, reply)
	if err != nil {
		return nil, "", replyError(names.OpLease, key, res)
	}
	k, ok1 := reply[2].(int64)
	seq0, ok2 := reply[3].(int64)
	first, ok3 := reply[4].(int64)
	last, ok4 := reply[5].(int64)
	xs, ok5 := reply[6].(string)
	steps, ok6 := reply[7].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return nil, "", replyError(names.OpLease, key, res)
	}
	if k == 0 {
		return nil, state, nil
	}
	x, err1 := strconv.ParseFloat(xs, 64)
	step, err2 := strconv.ParseFloat(steps, 64)
	if err1 != nil || err2 != nil || k < 2 || k > maxLease {
		return nil, "", fmt.Errorf("reserve: lease %q: %w", key, replyError(names.OpLease, key, res))
	}
	allow := l.opts.MaxLateness
	if allow <= 0 {
		allow = max(s.lateness([]float64{1}), minLateness)
	}
	usNS := (base.serverNS / 1000) * 1000
	return &lease{
		spec: s, base: base, usNS: usNS, seq0: seq0,
		first: base.serverNS + first, last: base.serverNS + last,
		x: x, step: step, k: int(k), allow: allow,
	}, state, nil
}
