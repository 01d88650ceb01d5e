package reserve

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// health tracks whether Redis answers. After FailAfter consecutive failures
// the Limiter is degraded: it stops calling Redis and paces locally, and its
// background loop probes Redis until it answers.
type health struct {
	mu       sync.Mutex
	failures int
	degraded bool
	since    time.Time     // when the current mode began
	outage   time.Time     // when Redis last failed the Limiter: its last switch to local pacing, or a heartbeat that failed; zero if none
	lastKey  string        // the key of the last failed call, probed with the heartbeat
	lastErr  error         // the last failure: what the logs and ErrUnavailable name
	wake     chan struct{} // tells the loop to start probing
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

// succeeded records a Redis call that worked.
func (l *Limiter) succeeded() {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	l.health.failures = 0
}

// failed records a Redis call that could not reach Redis, and switches to
// local pacing after FailAfter of them in a row. key is the key the call was
// for ("" for the heartbeat).
func (l *Limiter) failed(key string, err error) {
	if l.reload != nil {
		l.reload()
	}
	h := &l.health
	h.mu.Lock()
	h.failures++
	h.lastErr = err
	if key != "" {
		h.lastKey = key
	}
	switching := !h.degraded && h.failures >= l.opts.FailAfter
	failures := h.failures
	h.mu.Unlock()
	if switching {
		l.degrade(failures, err)
	}
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
	h.outage = h.since
	h.lastErr = err
	h.mu.Unlock()
	l.fleet.leaving()
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
// what the local fallback granted meanwhile (see fallback.go): every key at
// once, so that no Limiter reserves on Redis before this one's local slots.
func (l *Limiter) recovered(ctx context.Context) {
	h := &l.health
	if !l.isDegraded() {
		return
	}
	// The share after an outage first: calls go to Redis as soon as the
	// Limiter is no longer degraded. Then the handback, while calls still
	// go to the local fallback: none of this Limiter's calls reaches Redis
	// before its local slots, its pauses and its stored limits have.
	l.fleet.recovered()
	l.logView(ctx, "back")
	l.handBack(context.WithValue(ctx, recoveryKey{}, true))
	h.mu.Lock()
	h.degraded = false
	h.failures = 0
	down := time.Since(h.since)
	h.since = time.Now()
	h.mu.Unlock()
	l.fleet.back()
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
	for {
		select {
		case <-l.stop:
			return
		case <-l.health.wake:
			timer.Reset(jitter(l.opts.ProbeInterval))
		case <-timer.C:
			degraded := l.isDegraded()
			err := l.heartbeat(l.loopCtx)
			if degraded && err == nil {
				err = l.probeKey(l.loopCtx)
			}
			if degraded && err != nil {
				l.fleet.joinFailed()
			}
			if wait := l.fleet.joining(); degraded && err == nil && wait > 0 {
				// Started while Redis was down: learn the fleet once the
				// members pacing locally could have probed too.
				timer.Reset(wait + time.Millisecond)
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
				timer.Reset(jitter(l.opts.ProbeInterval))
			default:
				timer.Reset(jitter10(l.opts.HeartbeatInterval))
			}
			l.sweepLocal()
			nowNS, _ := l.serverNow()
			l.horizons.sweep(nowNS)
		}
	}
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
	_, err := l.run(ctx, "probe", key, func(ctx context.Context) (any, error) {
		return l.rdb.PTTL(ctx, l.RedisKey(key)).Result()
	}, nil)
	return err
}
