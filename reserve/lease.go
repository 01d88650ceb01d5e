package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/engine"
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
// lived, times half the lateness allowance (so a lease is handed out well
// before its slots lapse).
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
// Lapsed slots are capacity lost. A lease lasts at most LeaseSpan of rate,
// so a key that cools wastes at most one lease, rate × LeaseSpan slots, and
// so does a process that dies holding one: the rest of the fleet cannot use
// those slots (their time passes unused), and nothing else is lost.
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

// sweepLeases is how many live leases make a new one look for leases whose
// slots have all lapsed (keys that cooled) and drop them.
const sweepLeases = 1024

// notLeasableFor is how long a key lease.lua refused (a stored limit) is
// not tried again.
const notLeasableFor = time.Second

// leaseTable holds the live leases of a Limiter, at most one per batchKey.
type leaseTable struct {
	mu      sync.Mutex
	m       map[batchKey]*lease
	size    map[batchKey]int       // the size of the key's next lease
	refused map[batchKey]time.Time // lease.lua said "not leasable" at

	granted, handed, lapsed atomic.Int64 // slots, for tests and figures
}

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
	allow   time.Duration // the lateness allowance
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

// fromLease hands req the next slot of k's lease, if there is a live one;
// ok is false when req must take the normal path. The result may be a
// *WaitTooLongError (the slot is then kept for the next caller).
func (l *Limiter) fromLease(k batchKey, s *spec, req *request) (res result, ok bool) {
	if !l.leasable(s, req) {
		return result{}, false
	}
	t := &l.coalescer.leases
	t.mu.Lock()
	ls := t.m[k]
	if ls == nil {
		t.mu.Unlock()
		return result{}, false
	}
	now := l.clock.Now()
	// The earliest slot that may still go out, on the server's clock: not
	// passed by more than the allowance, not inside a pause read since.
	nowNS := ls.base.serverNS + int64(now.Sub(ls.base.local))
	paused := l.pauses.known(k.key)
	oldest := max(nowNS-int64(ls.allow), paused)
	if ls.slotNS(ls.next) < oldest {
		// Demand is below the lease's rate, and its next slot has fallen
		// behind: skip to slots passed by at most half the allowance, so
		// that the caller's own lateness check (Sleep's, against the same
		// allowance, a moment later) does not move it to a fresh slot.
		// Skipping only to the allowance's edge handed out slots about to
		// pass it, and Sleep moved one Wait in thirteen.
		fresh := max(nowNS-int64(ls.allow/2), paused)
		rest := ls.k - ls.next
		skip := sort.Search(rest, func(j int) bool { return ls.slotNS(ls.next+j) >= fresh })
		ls.next += skip
		ls.lapsed += skip
		t.lapsed.Add(int64(skip))
	}
	if ls.next == ls.k {
		t.retire(k, ls, now)
		t.mu.Unlock()
		return result{}, false
	}
	i := ls.next
	slot := ls.slotNS(i)
	at := ls.base.at(slot)
	wait := at.Sub(now)
	if req.maxWait >= 0 {
		mw := req.maxWait
		if !req.since.IsZero() {
			mw = max(mw-now.Sub(req.since), 0)
		}
		if wait > mw {
			t.mu.Unlock()
			return result{nil, &WaitTooLongError{Wait: wait, MaxWait: req.maxWait, Band: s.bands[0].name}}, true
		}
	}
	ls.next++
	if ls.next == ls.k {
		t.retire(k, ls, now)
	}
	t.mu.Unlock()
	t.handed.Add(1)
	r := &Reservation{lim: l, key: k.key, spec: s, amounts: req.amounts, at: at, slotNS: slot, seq: ls.seq0 + int64(i),
		source: SourceLease}
	if wait > 0 {
		// A lease's slots are its one bucket's, spaced 1/rate apart.
		r.band = s.bands[0].name
	}
	l.granted(r, wait)
	return result{r: r}, true
}

// retire removes ls, k's lease, at now (the Limiter's clock), and sizes
// k's next lease from its use: the demand it saw (slots handed out over the
// time it lived) times half the lateness allowance, so that the next lease
// is handed out well before its slots lapse. t.mu is held.
func (t *leaseTable) retire(k batchKey, ls *lease, now time.Time) {
	if t.m[k] == ls {
		delete(t.m, k)
	}
	if rest := ls.k - ls.next; rest > 0 {
		ls.lapsed += rest
		ls.next = ls.k
		t.lapsed.Add(int64(rest))
	}
	lived := max(now.Sub(ls.base.local), time.Microsecond)
	next := int(min(float64(ls.k-ls.lapsed)*float64(ls.allow/2)/float64(lived), maxLease))
	next = max(next, 2)
	if len(t.size) > 4096 {
		clear(t.size)
	}
	t.init()
	t.size[k] = next
}

// init makes t's maps. t.mu is held.
func (t *leaseTable) init() {
	if t.m == nil {
		t.m = make(map[batchKey]*lease)
		t.size = make(map[batchKey]int)
		t.refused = make(map[batchKey]time.Time)
	}
}

// drop lets k's lease lapse (a pause, Close).
func (t *leaseTable) drop(k batchKey) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if ls := t.m[k]; ls != nil {
		t.retire(k, ls, ls.base.local.Add(ls.allow))
	}
}

// dropKey lets every lease on key lapse (this Limiter paused the key: the
// leased slots may lie inside the pause).
func (t *leaseTable) dropKey(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, ls := range t.m {
		if k.key == key {
			t.retire(k, ls, ls.base.local.Add(ls.allow))
		}
	}
}

// leaseSize returns how many slots a lease for k should have when a batch
// of n found it hot; below 2, none.
func (l *Limiter) leaseSize(k batchKey, s *spec, n int) int {
	if l.opts.LeaseSpan <= 0 || !s.single {
		return 0
	}
	span := s.bands[0].rate * l.fleet.rateShare() * l.opts.LeaseSpan.Seconds()
	if span < 2 {
		return 0
	}
	t := &l.coalescer.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	if at, ok := t.refused[k]; ok {
		if time.Since(at) < notLeasableFor {
			return 0
		}
		delete(t.refused, k)
	}
	want := t.size[k]
	if want == 0 {
		want = 2 * n
	}
	return int(min(float64(max(want, n)), span, maxLease))
}

// leaseBatch serves reqs, a hot key's batch, from a new lease, and the
// rest (requests that cannot lease, or all of them when k cannot) on the
// normal path. It runs on the coalescer's drain, whose context is no
// caller's.
func (l *Limiter) leaseBatch(ctx context.Context, k batchKey, s *spec, reqs []*request) []result {
	size := l.leaseSize(k, s, len(reqs))
	if size < 2 || l.isDegraded() || !l.leasable(s, reqs[0]) {
		return l.reserveBatch(ctx, k.key, s, reqs)
	}
	if l.hasLocal(k.key) {
		return l.reserveBatch(ctx, k.key, s, reqs)
	}
	ls, err := l.newLease(ctx, k, s, size)
	if err != nil {
		out := make([]result, len(reqs))
		for i, req := range reqs {
			if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
				out[i].r, out[i].err = l.reserveLocal(k.key, s, req.amounts, req.maxWait)
			} else {
				out[i].err = err
			}
		}
		return out
	}
	if ls == nil {
		return l.reserveBatch(ctx, k.key, s, reqs)
	}
	out := make([]result, len(reqs))
	var rest []*request
	var restAt []int
	for i, req := range reqs {
		res, ok := l.fromLease(k, s, req)
		if !ok {
			rest = append(rest, req)
			restAt = append(restAt, i)
			continue
		}
		out[i] = res
	}
	if len(rest) > 0 {
		for j, res := range l.reserveBatch(ctx, k.key, s, rest) {
			out[restAt[j]] = res
		}
	}
	return out
}

// newLease runs lease.lua for size slots on k and installs the lease; nil
// without error when the key is not leasable.
func (l *Limiter) newLease(ctx context.Context, k batchKey, s *spec, size int) (*lease, error) {
	now := l.clock.Now()
	args, err := l.grantArgs(k.key, now, s, 2)
	if err != nil {
		return nil, err
	}
	args = append(args, strconv.Itoa(size), "1")
	keys := l.keys(k.key)
	var sentReal time.Time // for the pause read the reply stands for
	res, err := l.run(ctx, "lease", k.key, func(ctx context.Context) (any, error) {
		sentReal = time.Now()
		return leaseScript.Run(ctx, l.rdb, keys, args...).Result()
	}, nil)
	if err != nil {
		return nil, err
	}
	ls, err := l.parseLease(now, sentReal, k.key, s, res)
	if err != nil {
		return nil, err
	}
	t := &l.coalescer.leases
	t.mu.Lock()
	defer t.mu.Unlock()
	t.init()
	if ls == nil {
		t.refused[k] = time.Now()
		return nil, nil
	}
	if old := t.m[k]; old != nil {
		t.retire(k, old, ls.base.local)
	}
	if len(t.m) >= sweepLeases {
		// Keys that cooled keep their lease until someone asks again:
		// let those whose slots have all lapsed go.
		for bk, old := range t.m {
			if old.base.at(old.last).Add(old.allow).Before(ls.base.local) {
				t.retire(bk, old, ls.base.local)
			}
		}
	}
	t.m[k] = ls
	t.granted.Add(int64(ls.k))
	l.horizons.note(k.key, ls.last, s)
	return ls, nil
}

// parseLease reads lease.lua's reply to a call sent at now (sentReal on
// the system clock); nil when the key is not leasable. The state it carries
// stands for a sleeper's pause read (pauseChecks.observe), as a
// reservation's reply does.
func (l *Limiter) parseLease(now, sentReal time.Time, key string, s *spec, res any) (*lease, error) {
	reply, ok := res.([]any)
	if !ok || len(reply) != 9 {
		return nil, replyError("lease", key, res)
	}
	if state, _ := reply[8].(string); state != "" {
		l.pauses.observe(key, engine.PauseEnd(state), shiftOf(state), sentReal)
	}
	base, err := l.replyBase(now, reply)
	if err != nil {
		return nil, replyError("lease", key, res)
	}
	k, ok1 := reply[2].(int64)
	seq0, ok2 := reply[3].(int64)
	first, ok3 := reply[4].(int64)
	last, ok4 := reply[5].(int64)
	xs, ok5 := reply[6].(string)
	steps, ok6 := reply[7].(string)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 || !ok6 {
		return nil, replyError("lease", key, res)
	}
	if k == 0 {
		return nil, nil
	}
	x, err1 := strconv.ParseFloat(xs, 64)
	step, err2 := strconv.ParseFloat(steps, 64)
	if err1 != nil || err2 != nil || k < 2 || k > maxLease {
		return nil, fmt.Errorf("reserve: lease %q: %w", key, replyError("lease", key, res))
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
	}, nil
}

// known returns the end of key's pause as this Limiter last read it (server
// clock, Unix ns; 0 if none or never read). It makes no call.
func (p *pauseChecks) known(key string) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.m[key]
	if pr == nil || pr.at.IsZero() || pr.err != nil {
		return 0
	}
	return pr.endNS
}
