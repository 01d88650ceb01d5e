package reserve

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/redis/go-redis/v9"
)

// UseFairScript makes l run src as its fair script (lua.Fair), before its
// first call: the mutation tests run the fair rule's tests on mutants.
func UseFairScript(l *Limiter, src string) { l.fairMutant = redis.NewScript(src) }

// ServerSlot returns the slot Redis granted r, in Unix ns on the server's
// clock, for tests that judge the schedule itself rather than when callers
// woke; ok is false for a reservation of the local fallback.
func ServerSlot(r *Reservation) (ns int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.localID != "" {
		return 0, false
	}
	return r.slotNS, true
}

// FleetSize exposes the fleet size last learned, for tests.
func (l *Limiter) FleetSize() int { n, _ := l.fleet.size(); return n }

// Share exposes the share of each key's rate the Limiter takes, for tests.
func (l *Limiter) Share() float64 { return l.fleet.rateShare() }

// Degraded exposes whether the Limiter paces locally, for tests.
func (l *Limiter) Degraded() bool { return l.isDegraded() }

// Degrade switches the Limiter to local pacing as a failed call confirmed
// by a ping would, for tests.
func (l *Limiter) Degrade(err error) { l.degrade(1, err) }

// Queued returns how many callers wait on key and lim for a call in flight to
// return, for tests.
func (l *Limiter) Queued(key string, lim Limit) int {
	s, err := l.specOf(lim)
	if err != nil {
		return 0
	}
	ks := l.states.peek(key)
	if ks == nil {
		return 0
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if q := ks.queues[s.sig]; q != nil {
		return len(q.pending)
	}
	return 0
}

// Client exposes the client the Limiter talks through, for tests.
func (l *Limiter) Client() any { return l.rdb }

// FleetKeysOf exposes the fleet's keys for a key prefix (heartbeat.lua's
// KEYS), for tests.
func FleetKeysOf(prefix string) []string { return layout.FleetKeys(prefix) }

// FleetKeys exposes the heartbeat set and the fleet's details, for tests.
func (l *Limiter) FleetKeys() []string { return l.fleetKeys() }

// CheckPause runs the pause check Sleep makes before a slot (and applies a
// resume's shift), for tests.
func CheckPause(ctx context.Context, r *Reservation) (bool, error) { return r.lim.pausedAfter(ctx, r) }

// LostSince reports whether r's Limiter has seen Redis lose the state that
// granted r (Reservation.lostSince).
func LostSince(r *Reservation) bool { return r.lostSince() }

// Kill stops l as a process that exits without Close would: its loop
// stops and its connections close (it must own its client), and it does
// not leave the fleet. Close does nothing after it.
func (l *Limiter) Kill() {
	if !l.ownsClient {
		panic("Kill: the Limiter does not own its client")
	}
	l.closeOnce.Do(func() {
		l.loopCancel()
		close(l.stop)
		<-l.done
		<-l.listening
		l.absent()
		_ = l.rdb.Close()
		l.closed.Store(true)
	})
}

// Cut makes l look to the fleet like a process cut off from Redis: its
// loop stops (no more heartbeats) but its connections stay open. end
// releases its presence connection and closes its client if it owns it.
// Close does nothing after Cut.
func (l *Limiter) Cut() (end func()) {
	l.closeOnce.Do(func() {
		l.loopCancel()
		close(l.stop)
		<-l.done
		<-l.listening
		l.closed.Store(true)
	})
	return func() {
		l.absent()
		if l.ownsClient {
			_ = l.rdb.Close()
		}
	}
}

// HoldProbes holds l's loop before each probe of Redis while it paces
// locally, as a stopped process's is, until release.
func HoldProbes(l *Limiter) (release func()) {
	ch := make(chan struct{})
	var once sync.Once
	l.health.mu.Lock()
	l.health.stallHook = func() { <-ch }
	l.health.mu.Unlock()
	return func() { once.Do(func() { close(ch) }) }
}

// ID exposes the Limiter's id in the fleet, for tests.
func (l *Limiter) ID() string { return l.id }

// SawRoundTrip records a call to Redis that took d, as a slow network's
// would (the call timeout grows to four times it, see callTimeout).
func (l *Limiter) SawRoundTrip(d time.Duration) { l.roundTrip(d) }

// Beat runs one heartbeat now, as the loop does, for tests.
func (l *Limiter) Beat(ctx context.Context) error { return l.heartbeat(ctx) }

// FairAsk is one call of a fair queue's pump (fair.go) for n requests of
// req, the whole queue when last: the slots booked, in Unix ns on the
// scripts' clock, and when the rest was deferred, when to ask again (zero
// when none was).
func FairAsk(ctx context.Context, l *Limiter, req Request, n int, last bool) (slots []int64, retry time.Time, err error) {
	s, amounts, f, err := l.check(req)
	if err != nil {
		return nil, time.Time{}, err
	}
	if f == nil {
		f = &fairness{weight: 1}
	}
	reqs := make([]*request, n)
	for i := range reqs {
		reqs[i] = &request{op: "reserve", amounts: amounts, maxWait: -1, done: make(chan result, 1)}
	}
	for _, res := range l.fairBatch(ctx, req.Key, fairTurn{s.sig, *f}, s, reqs, n, last) {
		var d *errDeferred
		switch {
		case errors.As(res.err, &d):
			return slots, d.retry, nil
		case res.err != nil:
			return slots, time.Time{}, res.err
		}
		slots = append(slots, res.r.slotNS)
	}
	return slots, time.Time{}, nil
}

// GatherFor exposes how long a caller on key with maxWait would hold its
// call for others to share it (batch.go), for tests.
func (l *Limiter) GatherFor(key string, maxWait time.Duration) time.Duration {
	return l.gatherFor(key, maxWait)
}

// ObserveState feeds the key's state as a reply to a call sent at sent
// (zero: an event) would show it, for tests.
func (l *Limiter) ObserveState(key, state string, sent time.Time) {
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	ks.noteSeen(state, ks.stored, sent)
}

// KnownPause exposes the end of key's pause as this Limiter last read or
// observed it, for tests.
func (l *Limiter) KnownPause(key string) int64 {
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.knownPause()
}

// SweepKeys runs the keys' sweep now, as the loop does every heartbeat,
// for tests.
func (l *Limiter) SweepKeys() { l.sweepKeys() }

// Seen returns the state Redis last showed this Limiter for key, for tests.
func (l *Limiter) Seen(key string) string {
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.seen
}

// LearnedPause returns the end of key's pause as this Limiter knows it,
// and whether it knows it: seen, with no read pending, for tests.
func (l *Limiter) LearnedPause(key string) (int64, bool) {
	ks := l.states.get(key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return ks.pause.endNS, !ks.seenAt.IsZero() && ks.pause.err == nil && ks.pause.read == nil
}

// CalendarTable returns the calendar table a call at now sends for a
// calendar window w (core.lua's ARGV[3] "c" tables), for tests.
func CalendarTable(w Window, now time.Time) (string, error) {
	c, err := calendarOf(w)
	if err != nil {
		return "", err
	}
	return c.table(now), nil
}

// PolicySig returns p's signature (what stored limits and coalescing
// compare), for tests.
func PolicySig(p Policy) (string, error) {
	s, err := p.compile()
	if err != nil {
		return "", err
	}
	return s.sig, nil
}

// CallArgs returns the scripts' ARGV up to the operation's own that l
// sends for p on key at now (a share of the whole, the local store's
// format), for tests.
func CallArgs(l *Limiter, key string, p Policy, now time.Time) ([]any, error) {
	s, err := p.compile()
	if err != nil {
		return nil, err
	}
	return l.argsWith(key, now, s, 0, "1", true), nil
}

// SeatStatus is a key's in-flight band as seats.lua's read gives it.
type SeatStatus struct {
	N, Used, Waiting int
	Holders          []string
}

// ReadSeats reads key's seats on Redis, as l's fleet view sees them.
func ReadSeats(ctx context.Context, l *Limiter, key string) (SeatStatus, error) {
	return ReadSeatsOn(ctx, l.rdb, l, key)
}

// ReadSeatsOn is ReadSeats through c (l may be closed).
func ReadSeatsOn(ctx context.Context, c redis.Scripter, l *Limiter, key string) (SeatStatus, error) {
	args := append([]any{"read"}, l.seatArgs(nil, 1)...)
	res, err := seatsScript.Run(ctx, c, l.seatKeys(key), args...).Result()
	if err != nil {
		return SeatStatus{}, err
	}
	r := res.([]any)
	st := SeatStatus{N: int(r[0].(int64)), Used: int(r[1].(int64)), Waiting: int(r[2].(int64))}
	for _, h := range r[3:] {
		st.Holders = append(st.Holders, h.(string))
	}
	return st, nil
}

// SetSeatPoll sets how often a seat waiter asks again unprompted; the
// returned func restores it.
func SetSeatPoll(d time.Duration) (restore func()) {
	old := seatPoll
	seatPoll = d
	return func() { seatPoll = old }
}

// FairWaiting is how many fair requests wait on key in l's queues, not in
// a call (fair.go), for tests.
func (l *Limiter) FairWaiting(key string) int {
	ks := l.states.peek(key)
	if ks == nil {
		return 0
	}
	ks.mu.Lock()
	defer ks.mu.Unlock()
	n := 0
	for _, q := range ks.fair {
		n += len(q.waiting) - q.inflight
	}
	return n
}

// FairGroup is one queue's batch in FairAskGroups: n requests of req, the
// whole queue when last.
type FairGroup struct {
	Req  Request
	N    int
	Last bool
}

// FairAskGroups is one call of a key's fair pump (fair.go) for groups, all
// of one key and policy, and returns per group what FairAsk returns.
func FairAskGroups(ctx context.Context, l *Limiter, groups []FairGroup) (slots [][]int64, retries []time.Time, err error) {
	var gs []fairGroup
	var all []*request
	var s *spec
	for _, g := range groups {
		sp, amounts, f, err := l.check(g.Req)
		if err != nil {
			return nil, nil, err
		}
		if f == nil {
			f = &fairness{weight: 1}
		}
		s = sp
		reqs := make([]*request, g.N)
		for i := range reqs {
			reqs[i] = &request{op: "reserve", amounts: amounts, maxWait: -1, done: make(chan result, 1)}
		}
		gs = append(gs, fairGroup{ft: fairTurn{sp.sig, *f}, reqs: reqs, queued: g.N, last: g.Last})
		all = append(all, reqs...)
	}
	res := l.fairCall(ctx, groups[0].Req.Key, s, gs, all)
	for _, g := range gs {
		var got []int64
		var retry time.Time
		for _, r := range res[:len(g.reqs)] {
			var d *errDeferred
			switch {
			case errors.As(r.err, &d):
				retry = d.retry
			case r.err != nil:
				return nil, nil, r.err
			default:
				got = append(got, r.r.slotNS)
			}
			if !retry.IsZero() {
				break
			}
		}
		res = res[len(g.reqs):]
		slots, retries = append(slots, got), append(retries, retry)
	}
	return slots, retries, nil
}

// RenewSeats runs l's renewal of its seats now, as its heartbeat does.
func RenewSeats(ctx context.Context, l *Limiter) { l.renewSeats(ctx) }

// WritesFormat is the state format the Limiter writes now (1, 2 or 3), as
// the fleet's heartbeat told it.
func (l *Limiter) WritesFormat() int { return int(l.format.Load()) }

// ReserveReply is reserve.lua's reply decoded (DecodeReserve).
type ReserveReply struct {
	NowUS, NowNS  int64
	Waits, Seqs   []int64
	State, Stored string
	Bindings      string
}

// DecodeReserve decodes reserve.lua's reply as the Limiter does.
func DecodeReserve(b string) (ReserveReply, bool) {
	r, ok := decodeReserve(b)
	return ReserveReply{r.nowUS, r.nowNS, r.waits, r.seqs, r.state, r.stored, r.bys}, ok
}

// Rank exposes the Limiter's rank in the fleet as it last learned it, for
// tests.
func (l *Limiter) Rank() int {
	l.fleet.mu.Lock()
	defer l.fleet.mu.Unlock()
	return l.fleet.rank
}

// LocalSlot returns the slot the local fallback granted r (Unix ns on the
// server's clock as the Limiter estimates it); ok is false for Redis's.
func LocalSlot(r *Reservation) (ns int64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.localID == "" {
		return 0, false
	}
	return r.slotNS, true
}

// LocalSleeping reports whether r is among its key's local grants whose
// callers sleep in Sleep before their last check (localKey.asleep).
func (l *Limiter) LocalSleeping(r *Reservation) bool {
	r.mu.Lock()
	id := r.localID
	r.mu.Unlock()
	ks := l.states.get(r.key)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	return id != "" && ks.local != nil && ks.local.asleep[id] == r
}

// SlowWatch reports the patient calls the Limiter's slowWatch holds, whether
// its timer is armed, and how many calls it saw pass their timeout.
func (l *Limiter) SlowWatch() (calls int, armed bool, slow int64) {
	w := &l.slow
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.calls), !w.at.IsZero(), w.slow
}

// FairSlack is fairSlack: how many queues beyond its reach a pump's call
// carries (fair.go).
const FairSlack = fairSlack

// HoldPipe makes l's script calls queue as if one were in flight to each
// server, until release sends them (as that call's return would); ok is
// false when l does not pipeline. For tests.
func HoldPipe(l *Limiter) (release func(), ok bool) {
	p, ok := l.scripts.(*pipeScripter)
	if !ok {
		return nil, false
	}
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
	return p.release, true
}

// PipeQueued returns how many of l's script calls queue for a pipeline,
// and how many batches of queued calls it has sent, for tests.
func PipeQueued(l *Limiter) (queued int, sent int64) {
	p, ok := l.scripts.(*pipeScripter)
	if !ok {
		return 0, 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ln := range p.lanes {
		queued += len(ln.pending)
	}
	return queued, p.sent
}
