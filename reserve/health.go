package reserve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/internal/outage"
)

// health tracks whether Redis answers. After FailAfter consecutive
// failures that show Redis is gone (refused, reset, loading, failing
// over), the Limiter is degraded: it stops calling Redis and paces locally,
// and its background loop probes Redis until it answers.
//
// A slow process is not an outage: a loaded machine, a GC pause or a slow
// network make calls slow, not Redis absent. A call that timed out is
// evidence of nothing until Redis also fails to answer a ping given much
// longer (confirmBudget), and every other call of the Limiter meanwhile:
// the first timeout starts one such ping, the calls
// that timed out wait for its verdict, and when Redis answers they go to
// Redis again, with a call timeout learned from the round trips seen
// (callTimeout: from CallTimeout up to maxCallTimeout). Only a ping that
// fails too degrades the Limiter.
type health struct {
	mu        sync.Mutex
	failures  int
	firstFail time.Time // the first of the failures in a row
	degraded  bool
	since     time.Time // when the current mode began
	answered  time.Time // when Redis last answered a call of this Limiter
	upUntil   time.Time // answered when the Limiter last switched to local pacing: its outage began after it
	outage    time.Time // when Redis last failed the Limiter: its last switch to local pacing, or a heartbeat that failed; zero if none
	// silent: that outage began with a call Redis did not answer (the
	// network, a Redis gone or frozen), not with a reply refusing it (out
	// of memory, read-only) nor a late one. See checkSuspects.
	silent  bool
	lastKey string        // the key of the last failed call, probed with the heartbeat
	lastErr error         // the last failure: what the logs and ErrUnavailable name
	wake    chan struct{} // tells the loop to start probing
	// probeDue is when the loop's next probe is due while the Limiter
	// paces locally, and probing when the probe under way, if any, began
	// (zero: none): a loop far behind them was off the CPU (a stopped
	// process, a paused virtual machine), and so were its callers; see
	// probesStalled.
	probeDue, probing time.Time
	// stalled: a stall was seen (probesStalled, or the loop's timer far
	// behind probeDue) and no probe has answered since.
	stalled bool
	kick    chan struct{} // tells the loop to probe now (probesStalled)
	// stallHook, in tests, holds the loop before a probe (a stall).
	stallHook func()

	check *verdict // the ping under way after a call timed out; nil: none
	// beatsOut counts this Limiter's heartbeats saying "redis" under way,
	// and beatUntil is until when the last of those that ended may have
	// run on Redis (its answer, or its deadline: local clock); see
	// localSlotsReady.
	beatsOut  int
	beatUntil time.Time
	// recovering is set while recovered hands back what the local
	// fallback granted: no reservation is granted locally meanwhile (see
	// grantLocal). Set and read under local as well.
	recovering bool
	// moved is closed, and replaced, when the Limiter's shares may have
	// changed: a heartbeat, a switch to or from local pacing. Callers
	// waiting for a share wait on it (awaitShare).
	moved chan struct{}
	// rtt is the slowest recent round trip, decayed a little by each call
	// (ns): the call timeout is four times it, within [CallTimeout,
	// maxCallTimeout].
	rtt float64
}

// A verdict is one ping after a call timed out: done is closed once up
// says whether Redis answered it.
type verdict struct {
	done chan struct{}
	up   bool
}

const (
	// maxCallTimeout bounds the call timeout learned from slow round
	// trips.
	maxCallTimeout = outage.MaxCallTimeout
	// rttDecay is how much of the slowest recent round trip each call
	// forgets.
	rttDecay = 0.995
)

// blipBudget is how long failures in a row must last before the Limiter
// paces locally: a Redis restarted, a connection reset, is back within a
// blip, and pacing locally meanwhile, beside members that stayed on Redis
// and count this one as there, could pass the limit. Callers wait it out
// (grantEither). One CallTimeout; none with FailAfter 1.
func (l *Limiter) blipBudget() time.Duration { return l.opts.CallTimeout }

// confirmBudget is how long a ping after a timed-out call may take before
// Redis counts as gone: eight call timeouts, at least 2 s.
func (l *Limiter) confirmBudget() time.Duration { return outage.ConfirmBudget(l.opts.CallTimeout) }

// callTimeout is the bound of a call to Redis now: CallTimeout, or four
// times the slowest recent round trip when that is longer (a busy machine,
// a slow network), at most maxCallTimeout.
func (l *Limiter) callTimeout() time.Duration {
	l.health.mu.Lock()
	rtt := l.health.rtt
	l.health.mu.Unlock()
	return min(max(l.opts.CallTimeout, time.Duration(4*rtt)), max(maxCallTimeout, l.opts.CallTimeout))
}

// roundTrip records a call to Redis that took d.
func (l *Limiter) roundTrip(d time.Duration) {
	h := &l.health
	h.mu.Lock()
	h.rtt = max(float64(d), h.rtt*rttDecay)
	h.mu.Unlock()
}

// shareChanged returns the channel closed when the Limiter's shares may
// next change.
func (l *Limiter) shareChanged() <-chan struct{} {
	h := &l.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.moved == nil {
		h.moved = make(chan struct{})
	}
	return h.moved
}

// sharesMoved wakes the callers waiting for a share.
func (l *Limiter) sharesMoved() {
	h := &l.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.moved != nil {
		close(h.moved)
		h.moved = nil
	}
}

// isRecovering reports whether the Limiter is handing back what it
// granted locally (recovered).
func (l *Limiter) isRecovering() bool {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	return l.health.recovering
}

// probesStalled reports whether, pacing locally, this Limiter's probes of
// Redis fell behind their schedule by more than probeSlack: its process
// was off the CPU for that long (SIGSTOP, a paused virtual machine), and so
// were its callers. Meanwhile the fleet may have come back to Redis, and
// the members back keep this one's share only for a while (fleetView's
// remember, 3 s by default) after their own return. Until a probe has
// answered, its calls take no local slot: on its share's instants they
// met the whole rate that the members back on Redis took (the combination
// runner's seed 78: a process stopped 3.5 s while pacing locally, back on
// Redis 0.9 s after resuming, its local slots beside another's on Redis
// at the whole rate). It tells the loop to probe at once.
//
// A stall seen lasts until a probe answers (health.stalled): a probe begun
// since, still under way, does not end it, or a caller that comes meanwhile
// would pace locally before the fleet is known (TestStalledProbesTakeNoLocalSlot).
func (l *Limiter) probesStalled() bool {
	h := &l.health
	budget := l.probeBudget() // (before the lock: it takes it)
	h.mu.Lock()
	if !h.degraded || h.probeDue.IsZero() {
		h.mu.Unlock()
		return false
	}
	if !h.stalled {
		due := h.probeDue
		if !h.probing.IsZero() {
			due = h.probing.Add(budget)
		}
		if !l.overdue(due) {
			h.mu.Unlock()
			return false
		}
		h.stalled = true
	}
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
	return true
}

// localSlotsReady reports whether this Limiter, pacing locally, may take
// local slots as far as its own heartbeats go. A heartbeat of its saying
// "redis" that Redis ran after the switch to local pacing (a CLIENT PAUSE
// queued it, a frozen Redis held it; the caller gave up on it meanwhile)
// marks it heard from on Redis: a member back from the same outage, which
// held it by its silence, stops holding it and takes its share on Redis,
// beside its local slots, until it hears "local". So when such a
// heartbeat may have run after the switch (one under way, answered since,
// or failed with its deadline after the switch), the local slots wait
// until the fleet has heard "local" (fleetView.localSlotsReady). Callers
// wait as for any share the Limiter lacks. (Combination runner, seed 28:
// two grants at one instant on a band of burst 1, 0.6 s after a CLIENT
// PAUSE of 2.35 s; TestLateRedisBeatHoldsLocalSlots.)
func (l *Limiter) localSlotsReady() bool {
	h := &l.health
	h.mu.Lock()
	out, until, since := h.beatsOut, h.beatUntil, h.since
	h.mu.Unlock()
	if out == 0 && !until.After(since) {
		return true
	}
	if out > 0 {
		until = time.Now().Add(l.probeBudget()) // not back yet: its deadline, at the most
	}
	return l.fleet.localSlotsReady(until)
}

// beatBack records the end of a heartbeat saying "redis" (beatsOut): until
// when it may have run on Redis, or may still: now if Redis answered it,
// its deadline if it may still run, zero if it never reached Redis or was
// sent without a deadline (a Limiter with no estimate of Redis's clock:
// taken as never run). A Limiter pacing locally is told: its callers
// waiting for a share look again, and an answer is Redis answering, so it
// probes at once.
func (l *Limiter) beatBack(answered bool, until time.Time) {
	if answered {
		until = time.Now()
	}
	h := &l.health
	h.mu.Lock()
	h.beatsOut--
	if until.After(h.beatUntil) {
		h.beatUntil = until
	}
	degraded := h.degraded
	h.mu.Unlock()
	if !degraded {
		return
	}
	l.sharesMoved()
	if answered {
		select {
		case h.kick <- struct{}{}:
		default:
		}
	}
}

// overdue reports whether due, a probe's due time or the latest end of one
// under way, passed more than probeSlack ago.
func (l *Limiter) overdue(due time.Time) bool {
	return time.Since(due) > probeSlack(l.opts.ProbeInterval)
}

// probeBudget bounds a probe's duration: its heartbeat and, after a
// timeout, the ping that decides.
func (l *Limiter) probeBudget() time.Duration {
	return outage.ProbeBudget(l.callTimeout(), l.opts.CallTimeout)
}

// probeSlack is how far behind its schedule a probe may run before the
// Limiter counts itself stalled: a loaded machine runs its goroutines
// late by far less.
func probeSlack(probeEvery time.Duration) time.Duration {
	return probeEvery/2 + 250*time.Millisecond
}

// isDegraded reports whether the Limiter is pacing locally.
func (l *Limiter) isDegraded() bool {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	return l.health.degraded
}

// unavailableErr is the error of a call refused while degraded: it matches
// ErrUnavailable and wraps the last failure.
func (l *Limiter) unavailableErr() error {
	l.health.mu.Lock()
	cause := l.health.lastErr
	l.health.mu.Unlock()
	if cause == nil {
		return ErrUnavailable
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, cause)
}

// succeeded records a Redis call that worked (Redis answered).
func (l *Limiter) succeeded() { l.answeredAt(time.Now()) }

// answeredAt records a Redis answer that arrived at now. When Redis last
// answered only moves forward: a caller that read the clock and then lost
// the CPU (a loaded machine) before taking the lock does not set it back
// past an answer noted meanwhile, which the check of a slow call reads
// (Redis answered after its ping was sent: slow, not gone).
func (l *Limiter) answeredAt(now time.Time) {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	l.health.failures = 0
	if now.After(l.health.answered) {
		l.health.answered = now
	}
}

// failed records a Redis call that could not reach Redis, and switches to
// local pacing after FailAfter of them in a row. A call that only timed
// out counts once a ping given confirmBudget fails too (confirm). key is
// the key the call was for ("" for the heartbeat).
func (l *Limiter) failed(key string, err error) {
	if l.reload != nil {
		l.reload()
	}
	if isTimeout(err) {
		h := &l.health
		h.mu.Lock()
		h.lastErr = err
		if key != "" {
			h.lastKey = key
		}
		h.mu.Unlock()
		l.confirm(key, err)
		return
	}
	l.countFailure(key, err, false)
}

// countFailure counts a failure that shows Redis is gone, and degrades
// after FailAfter in a row spanning blipBudget at least, or at once (now:
// a ping failed too).
func (l *Limiter) countFailure(key string, err error, now bool) {
	h := &l.health
	h.mu.Lock()
	h.failures++
	if h.failures == 1 {
		h.firstFail = time.Now()
	}
	h.lastErr = err
	if key != "" {
		h.lastKey = key
	}
	blip := l.opts.FailAfter > 1 && time.Since(h.firstFail) < l.blipBudget()
	switching := !h.degraded && (now || (h.failures >= l.opts.FailAfter && !blip))
	failures := h.failures
	h.mu.Unlock()
	if switching {
		l.degrade(failures, err)
	}
}

// confirm starts a ping of Redis after a call timed out, unless one is
// under way or the Limiter paces locally already: if Redis answers within
// confirmBudget (the ping, or any other call of the Limiter meanwhile), it
// is slow, not gone, and the call timeout grows to what the ping took; if
// not, the Limiter switches to local pacing.
func (l *Limiter) confirm(key string, cause error) {
	h := &l.health
	h.mu.Lock()
	if h.degraded || h.check != nil {
		h.mu.Unlock()
		return
	}
	v := &verdict{done: make(chan struct{})}
	h.check = v
	h.mu.Unlock()
	go func() {
		budget := l.confirmBudget()
		ctx, cancel := context.WithTimeout(l.loopCtx, budget)
		start := time.Now()
		pingErr := l.rdb.Ping(ctx).Err()
		took := time.Since(start)
		cancel()
		err := pingErr
		h.mu.Lock()
		if err != nil && h.answered.After(start) {
			// Redis answered another call of this Limiter while the ping
			// waited: slow, not gone. The ping may have had to open a
			// connection (every one busy with the slow calls), and
			// go-redis's handshake takes round trips of its own before
			// the PING: at 1.1 s a round trip those outlast the budget
			// (TestSlowRedisDialIsNotAnOutage). A Redis frozen or gone
			// answers nothing.
			err = nil
		}
		if err == nil {
			v.up = true
			h.failures = 0
			h.rtt = max(h.rtt, float64(took))
			if took >= l.opts.CallTimeout {
				// Redis stalled (frozen, a long fork): other members may
				// have taken it for an outage and pace locally now. The
				// calls waiting on this verdict go to Redis on the fleet's
				// view after the stall, not before: members silent for a
				// confirmBudget count as held (heartbeat.go).
				// (Not earlier than one recorded meanwhile: a heartbeat
				// that failed, or answered late, during the ping.)
				if at := time.Now().Add(-budget); at.After(h.outage) {
					h.outage, h.silent = at, false
				}
			}
		}
		h.mu.Unlock()
		if err == nil && took >= l.opts.CallTimeout {
			_ = l.heartbeat(l.loopCtx)
		}
		if err != nil && l.loopCtx.Err() == nil { // (not closing)
			// The Limiter paces locally before the calls waiting on the
			// verdict wake: they pace locally at once, and the fleet must
			// count this member as local by then (degrade). Woken first,
			// a call took a local slot while the Limiter still counted as
			// on Redis (TestSwitchToldAtOnce, beside a CPU hog).
			l.countFailure(key, fmt.Errorf("%w (and Redis did not answer a ping within %v: %v)", cause, budget, err), true)
		}
		// The verdict is concluded only now, after the heartbeat or the
		// switch: a call that asks for it earlier waits (slowNotGone,
		// awaitSlowCall). Cleared as soon as the ping answered, it let a
		// call that had waited out the stall go on the view of before it
		// (TestStallRefreshesFleet, under -race), and a call past its
		// timeout run on after the ping had failed.
		h.mu.Lock()
		h.check = nil
		h.mu.Unlock()
		close(v.done)
		l.opts.Metrics.RedisCall(names.OpConfirm, took, pingErr)
		switch {
		case pingErr == nil:
			l.opts.Logger.Debug("pacer: a call timed out but Redis answered a ping: slow, not gone",
				"key", key, "ping", took.Round(time.Microsecond), "call_timeout", l.callTimeout(), "err", cause, "limiter", l.id)
		case err == nil:
			l.opts.Logger.Debug("pacer: a call timed out and so did the ping, but Redis answered a call meanwhile: slow, not gone",
				"key", key, "ping", took.Round(time.Microsecond), "ping_err", pingErr, "call_timeout", l.callTimeout(), "err", cause, "limiter", l.id)
		}
	}()
}

// slowNotGone waits for the verdict of the ping a timed-out call started
// (until ctx ends) and reports whether Redis answered it: the call may go
// to Redis again. false: Redis is gone (the Limiter paces locally now: it
// switched before the verdict woke its callers), or ctx ended first.
func (l *Limiter) slowNotGone(ctx context.Context) bool {
	h := &l.health
	h.mu.Lock()
	v, degraded := h.check, h.degraded
	h.mu.Unlock()
	if degraded {
		return false
	}
	if v == nil {
		return true // concluded already: not degraded, so Redis answered
	}
	select {
	case <-v.done:
		return v.up
	case <-ctx.Done():
		return false
	}
}

// noReply reports whether err is a call Redis did not answer (the network,
// a Redis gone or frozen), not a reply of Redis's refusing it.
func noReply(err error) bool {
	_, reply := layout.ErrorCode(err)
	return !reply
}

// isTimeout reports whether err is a call that timed out: evidence of a
// slow call, not of a Redis gone.
func isTimeout(err error) bool {
	var te *timeoutError
	if errors.As(err, &te) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// degrade switches the Limiter to local pacing and wakes the loop, which
// probes Redis until it answers.
func (l *Limiter) degrade(failures int, err error) {
	h := &l.health
	h.mu.Lock()
	if h.degraded {
		h.mu.Unlock()
		return
	}
	h.degraded = true
	h.since = time.Now()
	h.outage, h.silent = h.since, noReply(err)
	h.probeDue = h.since.Add(l.opts.ProbeInterval * 5 / 4) // the loop sets it at its tell
	h.stalled = false
	h.upUntil = h.answered
	h.lastErr = err
	h.mu.Unlock()
	l.fleet.leaving()
	l.sharesMoved()
	l.logView(l.loopCtx, "leaving")
	select {
	case h.wake <- struct{}{}:
	default:
	}
	l.opts.Metrics.Fallback(true)
	mode := "pacing locally"
	switch size, known := l.fleet.size(); {
	case l.opts.FailClosed:
		mode = "failing closed (Options.FailClosed)"
	case known:
		mode = fmt.Sprintf("pacing locally at each key's rate / %d (the fleet last learned)", size)
	case size > 0:
		mode = fmt.Sprintf("pacing locally at each key's rate / %d (Options.FleetSize: Redis never answered this Limiter)", size)
	default:
		mode = "failing closed: Redis never answered this Limiter, so it does not know the fleet's size (set Options.FleetSize to pace locally)"
	}
	l.opts.Logger.Warn("pacer: redis unavailable, "+mode, "failures", failures, "err", err, "limiter", l.id)
}

// recovered switches back to Redis after a probe succeeded, and hands back
// what the local fallback granted meanwhile (see local.go): every key at
// once, so that no Limiter reserves on Redis before this one's local slots.
func (l *Limiter) recovered(ctx context.Context) {
	h := &l.health
	if !l.isDegraded() {
		return
	}
	// The share after an outage first: calls go to Redis as soon as the
	// Limiter is no longer degraded. Then the handback, while calls wait:
	// none of this Limiter's calls reaches Redis before its local slots,
	// its pauses and its stored limits have, and the local fallback grants
	// nothing more, which would never reach Redis (a key handed back
	// already, or one the handback did not list: TestNoLocalGrantDuringHandback).
	// Grants under way finish first (grantLocal holds local).
	l.fleet.recovered()
	l.logView(ctx, "back")
	l.local.Lock()
	h.mu.Lock()
	h.recovering = true
	h.mu.Unlock()
	l.local.Unlock()
	l.handBack(context.WithValue(ctx, recoveryKey{}, true))
	h.mu.Lock()
	h.degraded = false
	h.recovering = false
	h.failures = 0
	down := time.Since(h.since)
	h.since = time.Now()
	h.mu.Unlock()
	l.fleet.back()
	l.sharesMoved()
	l.opts.Metrics.Fallback(false)
	l.opts.Logger.Info("pacer: redis answers again, back on the shared buckets",
		"degraded_for", down.Round(time.Millisecond), "limiter", l.id)
}

// recoveryKey marks the context of the handback at recovery: its calls go
// to Redis while the Limiter is still degraded.
type recoveryKey struct{}

// loop runs in the background from New until Close: a heartbeat every
// HeartbeatInterval while Redis is up, a probe every ProbeInterval (jittered)
// while it is not.
func (l *Limiter) loop() {
	defer close(l.done)
	timer := time.NewTimer(l.opts.HeartbeatInterval)
	defer timer.Stop()
	// tell, while above 0, is when to tell the fleet "local" again: the
	// tell at the switch failed (Redis frozen, a loaded machine).
	var tell time.Duration
	for {
		select {
		case <-l.stop:
			return
		case <-l.health.kick:
			// A caller found the probes stalled (probesStalled): probe now.
			if l.isDegraded() {
				timer.Reset(0)
			}
		case <-l.health.wake:
			// Tell the fleet at once that this Limiter paces locally: a
			// heartbeat made before the switch may still reach Redis (one
			// that stalled), saying "redis"; the others must hold this
			// one. It is not a probe: Redis just failed. (A Limiter that
			// never learned the fleet has told it nothing, and learns it
			// only as joining allows.)
			tell = 0
			if _, known := l.fleet.size(); known {
				if _, err := l.heartbeatOnce(l.loopCtx); err != nil {
					tell = tellRetry
				}
			}
			l.afterTell(timer, tell)
		case <-timer.C:
			if tell > 0 {
				// The tell again, not a probe, doubling its wait up to
				// the ProbeInterval, where probes take over (each tells
				// too). A call that timed out on a frozen Redis (CLIENT
				// PAUSE, SIGSTOP) may never arrive; without this, the
				// fleet counted this Limiter on Redis for a ProbeInterval
				// (TestSwitchToldAtOnce beside CPU hogs).
				if !l.isDegraded() {
					tell = 0
				} else if _, err := l.heartbeatOnce(l.loopCtx); err == nil {
					// Redis answers again, where the tells before did
					// not: probe now, not a ProbeInterval on. Before, a
					// Limiter whose Redis came back while it told the
					// switch stayed local 1.0 to 2.0 s after Redis
					// answered (TestBackSoonAfterTell).
					tell = 0
					l.setProbeTimer(timer, 0)
					continue
				} else if 2*tell >= l.opts.ProbeInterval {
					tell = 0
				} else {
					tell *= 2
				}
				l.afterTell(timer, tell)
				continue
			}
			degraded := l.isDegraded()
			l.health.mu.Lock()
			hook := l.health.stallHook
			l.health.mu.Unlock()
			if hook != nil && degraded {
				hook()
			}
			began := time.Now()
			l.health.mu.Lock()
			if degraded {
				if !l.health.probeDue.IsZero() && l.overdue(l.health.probeDue) {
					// The loop itself ran far behind its schedule: a
					// stall, whether or not a caller saw it.
					l.health.stalled = true
				}
				l.health.probing = began
			}
			l.health.mu.Unlock()
			err := l.heartbeat(l.loopCtx)
			spanned := degraded && err != nil && l.overdue(began.Add(l.probeBudget()))
			l.health.mu.Lock()
			l.health.probing = time.Time{}
			// A probe that answered (or failed in its time) ends a stall
			// seen; one that spanned a stall starts one.
			l.health.stalled = spanned && l.health.degraded
			l.health.mu.Unlock()
			if spanned {
				// The probe spanned a stall (the process was off the CPU
				// while it was under way): its failure says nothing of
				// Redis now. Probe again at once; callers wait for it.
				timer.Reset(0)
				continue
			}
			if degraded && err != nil {
				// The fleet did not answer: joining starts again. (A key
				// that still fails, below, does not restart it: the
				// fleet heard this Limiter.)
				l.fleet.joinFailed()
			}
			if degraded && err == nil {
				err = l.probeKey(l.loopCtx)
			}
			if wait := l.fleet.joining(); degraded && err == nil && wait > 0 {
				// Started while Redis was down: learn the fleet once the
				// members pacing locally could have probed too.
				l.setProbeTimer(timer, wait+time.Millisecond)
				continue
			}
			switch {
			case degraded && err == nil:
				l.recovered(l.loopCtx)
				// Tell the fleet at once: until it hears "redis", the
				// others count this Limiter as pacing locally (held).
				_ = l.heartbeat(l.loopCtx)
				timer.Reset(jitter10(l.opts.HeartbeatInterval))
			case degraded:
				l.setProbeTimer(timer, jitter(l.opts.ProbeInterval))
			default:
				timer.Reset(jitter10(l.opts.HeartbeatInterval))
			}
			if !l.isDegraded() && err == nil {
				l.renewSeats(l.loopCtx)
				l.retryPending(l.loopCtx)
				l.retryHandbacks(l.loopCtx)
			}
			l.sweepKeys()
			l.store.Sweep()
		}
	}
}

// tellRetry is the first wait before a failed tell of the switch to local
// pacing goes again (loop).
const tellRetry = 20 * time.Millisecond

// afterTell sets the loop's timer after a tell of the switch to local
// pacing: to tell again after tell, or (0) to probe a ProbeInterval on.
func (l *Limiter) afterTell(timer *time.Timer, tell time.Duration) {
	if tell > 0 {
		l.setProbeTimer(timer, tell)
		return
	}
	l.setProbeTimer(timer, jitter(l.opts.ProbeInterval))
}

// setProbeTimer sets the loop's timer to d, the next probe's (or tell's)
// due time, which probesStalled checks.
func (l *Limiter) setProbeTimer(timer *time.Timer, d time.Duration) {
	l.health.mu.Lock()
	l.health.probeDue = time.Now().Add(d)
	l.health.mu.Unlock()
	timer.Reset(d)
}

// jitter10 returns d ± 10%: the fleet's heartbeats do not stay in step.
func jitter10(d time.Duration) time.Duration {
	return d*9/10 + rand.N(d/5+1)
}

// jitter returns d ± 25%.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// probeKey checks that the key of the last failed call answers too: on a
// Redis Cluster the heartbeat set may live on a healthy master while the
// key's slot is still failing over.
func (l *Limiter) probeKey(ctx context.Context) error {
	l.health.mu.Lock()
	key := l.health.lastKey
	l.health.mu.Unlock()
	if key == "" {
		return nil
	}
	_, err := l.run(ctx, names.OpProbe, key, func(ctx context.Context) (any, error) {
		return l.rdb.PTTL(ctx, l.RedisKey(key)).Result()
	}, nil)
	return err
}
