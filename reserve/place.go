package reserve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/redis/go-redis/v9"
)

// Stage 3 of a call's way (see wait.go): placing the slots on the local
// clock. A script's reply gives each slot as a wait from the instant the
// script ran, on the server's clock; the Limiter places that instant on its
// own clock (clockSync) and builds each Reservation there.

// MaxEarly caps how early, on the local clock, a Limiter on Redis server
// time may place a slot: never more than MaxEarly before the reply's
// arrival plus the wait, and never before the call was sent plus the wait.
//
// A script measures its waits from the server's clock (TIME), and the slot
// it grants is an instant on that clock. The Limiter places it on the local
// clock with a running estimate of the offset between the two clocks, taken
// from the round trips of its calls: the script read the server's clock
// between the call's sending and its reply's arrival, and the call with the
// shortest round trip bounds the offset most tightly (NTP's way). The
// estimate takes that call's reading at its reply's arrival, the latest it
// can have been, so that with steady clocks a slot is never early: it is
// late by at most the best round trip's return trip, the same for every
// call. Counting each wait from its own reply's arrival instead, as pacer
// did before, delayed every slot by its reply's trip, which varies from call
// to call, so callers on time for slots 2 ms apart could land 1.5 ms apart.
//
// The estimate is checked against every reply: one whose bounds exclude it
// (a clock stepped or drifted, a failover to another host, a Cluster shard
// with its own clock) replaces it at once. A call whose round trip is
// shorter than the estimate's error replaces it too: that error is the
// anchor's round trip plus what the clocks may have drifted since
// (maxDrift of its age). The true slot lies between the call's sending and
// its reply's arrival, plus the wait, so a slot placed within MaxEarly of
// the later bound is early by at most MaxEarly, whatever the clocks do.
//
// A reply that arrived late (its process was off the CPU, the machine is
// busy) is placed MaxEarly before its arrival, later than the estimate
// says the script ran: its slot is late by the difference, and a sleeper
// counts it as lateness (Options.MaxLateness), as if it had woken that
// late.
const MaxEarly = time.Millisecond

// maxDrift bounds how fast the server's clock and the local one drift
// apart, in parts per million: 500, the fastest an NTP daemon slews a
// clock (real drift is a few ppm). An estimate's error grows by this much
// of its age.
const maxDrift = 500

// clockSync estimates where the server's clock stands against the local
// one.
type clockSync struct {
	mu      sync.Mutex
	ok      bool
	serverS int64         // the anchor: an instant on the server's clock, Unix ns,
	local   time.Time     // and the latest local time it can have been
	rtt     time.Duration // the anchor's round trip: the estimate is late by at most that
	taken   time.Time     // when the anchor was taken

	// best is the anchor of the shortest round trip within bestAge: the
	// local fallback's clock (server), which the fleet's members must read
	// alike, whatever the last calls' round trips were (a reply after a
	// stall bounds the offset only within its whole stall).
	best struct {
		ok      bool
		serverS int64
		local   time.Time
		rtt     time.Duration
	}

	// low is how far away Redis is: the shortest round trip of the calls
	// placed in the current lowWindow, and in the one before it (none:
	// negative). A stall does not lengthen it (a call across one is one of
	// many), and it follows a Redis that moved farther within two windows.
	// Sleep checks for a pause that much earlier (Limiter.checkLead).
	low struct {
		cur, prev time.Duration
		start     time.Time // when the current window began (zero: none yet)
	}
	lowNS atomic.Int64 // lowRTT's answer, read without mu by every Wait

	// resyncing is closed when the read of the server's clock under way
	// (resyncClock) ends; nil: none. resynced is when the last one that
	// ended was sent (the Limiter's clock). Guarded by mu.
	resyncing chan struct{}
	resynced  time.Time
}

// lowWindow is the span of one window of clockSync.low.
const lowWindow = 10 * time.Second

// noteRTT takes a call's round trip, whose reply arrived at recv, into
// c.low. c.mu is held.
func (c *clockSync) noteRTT(rtt time.Duration, recv time.Time) {
	l := &c.low
	switch age := recv.Sub(l.start); {
	case l.start.IsZero() || age >= 2*lowWindow:
		l.prev, l.cur, l.start = -1, rtt, recv
	case age >= lowWindow:
		l.prev, l.cur, l.start = l.cur, rtt, recv
	default:
		l.cur = min(l.cur, rtt)
	}
	low := l.cur
	if l.prev >= 0 {
		low = min(low, l.prev)
	}
	c.lowNS.Store(int64(low))
}

// lowRTT is how far away Redis is (c.low), 0 when no call has been placed.
func (c *clockSync) lowRTT() time.Duration { return time.Duration(c.lowNS.Load()) }

// bestAge is how long the best anchor is kept against anchors with longer
// round trips: two hosts' clocks drift apart by a few ppm, microseconds a
// minute.
const bestAge = time.Minute

// localOf is server's inverse: the local time of serverNS (Unix ns on the
// server's clock) as the estimate places it; without an estimate, the
// instant serverNS itself.
func (c *clockSync) localOf(serverNS int64) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.best.ok {
		return time.Unix(0, serverNS)
	}
	return c.best.local.Add(time.Duration(serverNS - c.best.serverS))
}

// server returns local, a time on the local clock, on the server's clock
// (Unix ns) as the estimate places it; without an estimate, local itself.
func (c *clockSync) server(local time.Time) int64 {
	if ns, _, ok := c.bestServer(local); ok {
		return ns
	}
	return local.UnixNano()
}

// bestServer is server with the best anchor's round trip (the estimate's
// error bound); ok is false without one.
func (c *clockSync) bestServer(local time.Time) (ns int64, rtt time.Duration, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.best.ok {
		return 0, 0, false
	}
	return c.best.serverS + int64(local.Sub(c.best.local)), c.best.rtt, true
}

// drifted is how far two clocks may have drifted apart over age (maxDrift).
func drifted(age time.Duration) time.Duration { return max(age, 0) / 1_000_000 * maxDrift }

// place returns the local time of serverNS, an instant read from the
// server's clock by a script on a call sent at send whose reply arrived at
// recv (both on the local clock), and takes the call into the estimate.
// late is how much later than the estimate places serverNS the result is:
// the reply arrived more than MaxEarly after it (see MaxEarly).
func (c *clockSync) place(serverNS int64, send, recv time.Time) (at time.Time, late time.Duration) {
	rtt := max(recv.Sub(send), 0)
	c.mu.Lock()
	c.noteRTT(rtt, recv)
	est := recv
	if c.ok {
		est = c.local.Add(time.Duration(serverNS - c.serverS))
	}
	// An anchor is kept against a slower call whose bounds hold it: its
	// error, however old, is smaller. Before, one over 10 s old was
	// replaced by the next call however slow: at the start of a busy
	// run, by a reply that waited 75 ms for its process, whose slots were
	// then placed 75 ms late and fired together with the others' (57
	// calls in a second under a limit of 55, pacerbench's cluster phase).
	if !c.ok || est.Before(send) || est.After(recv) || rtt <= c.rtt+drifted(recv.Sub(c.taken)) {
		c.ok, c.serverS, c.local, c.rtt, c.taken = true, serverNS, recv, rtt, recv
		est = recv
	}
	// The best anchor: the shortest round trip, unless this call's bounds
	// exclude it (a clock stepped, a failover) or it is old.
	b := &c.best
	bestEst := b.local.Add(time.Duration(serverNS - b.serverS))
	if !b.ok || rtt <= b.rtt || bestEst.Before(send) || bestEst.After(recv) || recv.Sub(b.local) > bestAge {
		b.ok, b.serverS, b.local, b.rtt = true, serverNS, recv, rtt
	}
	c.mu.Unlock()
	if lo := recv.Add(-MaxEarly); est.Before(lo) {
		return lo, lo.Sub(est)
	}
	return est, 0
}

// resyncClock reads the server's clock (TIME, on key's node; "": the
// fleet's keys') and takes it into the estimate (place), after a call
// refused as run after its deadline (PACER_STALE). The deadlines count on
// the estimate, which only replies correct: one that is off by more than
// a deadline's margin (the server's clock stepped, a failover to a host
// whose clock differs) made every call stale, none of them a reply, and
// after maxSlowTries each batch was paced locally while the fleet counted
// the Limiter on Redis (TestStaleReadsTheClockAgain). A Redis that does
// not answer leaves the estimate as it was. One read serves every call
// refused meanwhile (after a stall, every key's batch at once), and every
// call sent (at sent) before a read: they wait for it, or go on, rather
// than each make a round trip of its own.
func (l *Limiter) resyncClock(ctx context.Context, key string, sent time.Time) {
	if !l.serverTime || l.onStore != nil {
		return
	}
	c := &l.sync
	c.mu.Lock()
	if !c.resynced.Before(sent) {
		c.mu.Unlock()
		return // read since the call was sent
	}
	if ch := c.resyncing; ch != nil {
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return
	}
	ch := make(chan struct{})
	c.resyncing = ch
	c.mu.Unlock()
	var read time.Time // when the read was sent, if it was answered
	defer func() {
		c.mu.Lock()
		c.resyncing = nil
		if read.After(c.resynced) {
			c.resynced = read
		}
		c.mu.Unlock()
		close(ch)
	}()
	// Bounded by the call timeout only: the call it follows may have
	// used up its context's time.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.callTimeout())
	defer cancel()
	var node redis.UniversalClient = l.rdb
	if c, ok := l.rdb.(*redis.ClusterClient); ok {
		k := l.fleetKeys()[0]
		if key != "" {
			k = l.keys(key)[0]
		}
		if n, err := c.MasterForKey(ctx, k); err == nil {
			node = n
		}
	}
	send := l.clock.Now()
	t, err := node.Time(ctx).Result()
	recv := l.clock.Now()
	if err != nil {
		return
	}
	l.sync.place(t.UnixNano(), send, recv)
	read = send
}

// parseReserve fills out from reserve.lua's reply, whose waits count from
// base, to a call on Redis sent at sentReal (system clock), or (local) on
// the local fallback's store, and applies what it shows of the key to the
// key's state: from Redis, the state and stored limit, the pause, the
// refusals and the slots granted; from the store, its latest slot. share
// is the call's share (ARGV[2]'s), which each reservation keeps for its
// adjust.
func (l *Limiter) parseReserve(base replyTime, sentReal time.Time, ks *keyState, s *spec, reqs []*request, reply reserveReply, out []result, local bool, share string) error {
	op, key := reqs[0].op, ks.name
	if len(reply.waits) != len(reqs) {
		return replyError(op, key, reply)
	}
	state, stored, bys := reply.state, reply.stored, reply.bys
	pe := layout.PauseEnd(state)
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if !local {
		ks.noteSeen(state, stored, sentReal)
	}
	var last int64
	for i, req := range reqs {
		waitNS, seq := reply.waits[i], reply.seqs[i]
		band, rest, ok := nextBinding(bys)
		if !ok {
			return replyError(op, key, reply)
		}
		bys = rest
		switch {
		case seq == -1:
			out[i] = result{nil, fmt.Errorf("reserve: %s %q: %w", op, key, ErrQueueTooLong)}
		case seq == -2:
			out[i] = result{nil, l.shareError(key)}
		case seq == -3:
			out[i] = result{nil, &errDeferred{retry: base.at(base.serverNS + waitNS), local: local}}
		case seq == 0:
			out[i] = result{nil, &WaitTooLongError{Wait: time.Duration(waitNS), MaxWait: req.maxWait, Band: band}}
			if !local {
				ks.refuse(s, req.amounts, base.at(base.serverNS+waitNS), base.local, band)
			}
		default:
			r := l.newReservation(key, s, req.amounts, base, waitNS, seq)
			if !local {
				r.ranNS, r.epoch = base.serverNS, ks.epoch
			}
			r.band, r.share = band, share
			r.afterPaused = pe > base.serverNS && pe <= r.slotNS // Sleep looks for a resume
			if local {
				r.seq, r.source = 0, SourceLocal
				r.localID = "l" + l.id + "." + strconv.FormatUint(l.localIDs.Add(1), 10)
				if ks.local != nil {
					ks.local.noteGrant(r.localID, r.slotNS, base.serverNS)
				}
			}
			last = max(last, r.slotNS)
			l.granted(r, time.Duration(waitNS))
			out[i] = result{r: r}
		}
	}
	switch {
	case last == 0:
	case local && ks.local != nil:
		ks.local.placed(last)
	case !local:
		ks.noteAhead(last)
	}
	return nil
}

// reserveReply is reserve.lua's reply (the fair script's too), decoded:
// when the script ran (Unix µs and ns), each request's wait (ns) and
// number, the key's state and stored limit as the script left them, and
// the binding bands' words.
type reserveReply struct {
	nowUS, nowNS  int64
	waits, seqs   []int64
	state, stored string
	bys           string
}

// serverNS is when the script ran, Unix ns on its clock.
func (r reserveReply) serverNS() int64 { return r.nowUS*1000 + r.nowNS }

// decodeReserve reads reserve.lua's reply (lua/reserve.lua: "<I7HI4", then
// "<i8i8" per request, then the state and the stored limit each after its
// "<I4" length, then the binding words); ok is false for anything else.
func decodeReserve(b string) (r reserveReply, ok bool) {
	if len(b) < 13 {
		return r, false
	}
	r.nowUS, r.nowNS = int64(le(b[:7])), int64(le(b[7:9]))
	m := int(le(b[9:13]))
	pos := 13
	if m > (len(b)-pos)/16 {
		return r, false
	}
	r.waits, r.seqs = make([]int64, m), make([]int64, m)
	for i := range m {
		r.waits[i], r.seqs[i] = int64(le(b[pos:pos+8])), int64(le(b[pos+8:pos+16]))
		pos += 16
	}
	for _, dst := range []*string{&r.state, &r.stored} {
		if len(b)-pos < 4 {
			return r, false
		}
		n := int(le(b[pos : pos+4]))
		pos += 4
		if n > len(b)-pos {
			return r, false
		}
		*dst = b[pos : pos+n]
		pos += n
	}
	r.bys = b[pos:]
	return r, true
}

// le reads a little-endian unsigned integer of up to 8 bytes.
func le(b string) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// shareError is the error of a request a band can never take at this
// Limiter's share: a window's N_k is below the cost in every window, or a
// bucket's burst at the share is (B_k pacing locally; on Redis, what the
// held members leave the others: core.lua's earliest).
func (l *Limiter) shareError(key string) error {
	return &noShareError{fmt.Errorf("reserve: %q: %w: while members pace locally, this Limiter's share of a band is below the cost (a window's N_k in every window, or a bucket's burst at the share: burst / fleet size pacing locally, what the members pacing locally leave the others on Redis): the call waits for Redis or a share", key, l.unavailableErr())}
}

// nextBinding reads the first word of a reply's binding bands (see
// lua/reserve.lua): the band's name, PauseBinding for "~p", "" for "~";
// and the words after it.
func nextBinding(words string) (band, rest string, ok bool) {
	w, rest, _ := strings.Cut(words, " ")
	switch w {
	case "":
		return "", "", false
	case "~":
		return "", rest, true
	case "~p":
		return PauseBinding, rest, true
	}
	return w, rest, true
}

// replyBase reads the now_us, now_ns that begin every granting script's
// reply; now is when the call was sent, on the Limiter's clock, and the
// reply has just arrived.
func (l *Limiter) replyBase(now time.Time, reply []any) (replyTime, error) {
	return l.replyBaseAt(now, l.clock.Now(), reply)
}

// replyBaseAt is replyBase for a call sent at sent whose reply arrived at
// recv. With a client clock, sent is the now the script was given.
func (l *Limiter) replyBaseAt(sent, recv time.Time, reply []any) (replyTime, error) {
	if len(reply) < 2 {
		return replyTime{}, errors.New("bad reply time")
	}
	us, ok1 := reply[0].(int64)
	ns, ok2 := reply[1].(int64)
	if !ok1 || !ok2 {
		return replyTime{}, errors.New("bad reply time")
	}
	return l.baseAt(sent, recv, us*1000+ns), nil
}

// baseAt is replyBaseAt for a script that ran at serverNS (Unix ns on its
// clock).
func (l *Limiter) baseAt(sent, recv time.Time, serverNS int64) replyTime {
	b := replyTime{serverNS: serverNS, local: sent}
	if l.serverTime {
		// The script measured waits from its own TIME: place that instant
		// on the local clock (see MaxEarly).
		b.local, b.late = l.sync.place(b.serverNS, sent, recv)
	}
	return b
}

// replyTime is when a script ran: on the server's clock (Unix ns), and on
// the Limiter's clock the instant waits are counted from; late is how much
// later than the clock estimate places it that instant is (the reply
// arrived late: see MaxEarly).
type replyTime struct {
	serverNS int64
	local    time.Time
	late     time.Duration
}

// at returns the local time of a slot the script granted, given in Unix ns
// on the server's clock (the script's clock).
func (b replyTime) at(slotNS int64) time.Time {
	return b.local.Add(time.Duration(slotNS - b.serverNS))
}

// newReservation builds a Redis reservation waitNS after base.
func (l *Limiter) newReservation(key string, s *spec, amounts []float64, base replyTime, waitNS, seq int64) *Reservation {
	r := &Reservation{
		lim:        l,
		key:        key,
		spec:       s,
		amounts:    amounts,
		at:         base.at(base.serverNS + waitNS),
		slotNS:     base.serverNS + waitNS,
		seq:        seq,
		placedLate: base.late,
	}
	return r
}

func replyError(op, key string, res any) error {
	return fmt.Errorf("reserve: %s %q: unexpected reply %#v", op, key, res)
}
