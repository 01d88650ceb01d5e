package reserve

import (
	"context"
	"math/rand/v2"
	"strconv"
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
	since    time.Time     // when the current degraded spell began
	lastKey  string        // the bucket of the last failed call, probed with the heartbeat
	wake     chan struct{} // tells the loop to start probing
}

// isDegraded reports whether the Limiter is pacing locally.
func (l *Limiter) isDegraded() bool {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	return l.health.degraded
}

// succeeded records a Redis call that worked.
func (l *Limiter) succeeded() {
	l.health.mu.Lock()
	defer l.health.mu.Unlock()
	l.health.failures = 0
}

// failed records a Redis call that could not reach Redis, and switches to
// local pacing after FailAfter of them in a row.
// key is the bucket the call was for ("" for the heartbeat).
func (l *Limiter) failed(key string, err error) {
	if l.reload != nil {
		l.reload()
	}
	h := &l.health
	h.mu.Lock()
	h.failures++
	if key != "" {
		h.lastKey = key
	}
	switching := !h.degraded && h.failures >= l.opts.FailAfter
	if switching {
		h.degraded = true
		h.since = time.Now()
	}
	failures := h.failures
	h.mu.Unlock()
	if !switching {
		return
	}
	select {
	case h.wake <- struct{}{}:
	default:
	}
	l.opts.Metrics.Fallback(true)
	mode := "pacing locally at each key's rate / " + strconv.Itoa(l.fleetSize()) + " (live limiters)"
	if l.opts.FailClosed {
		mode = "failing closed"
	}
	l.opts.Logger.Warn("pacer: redis unavailable, "+mode,
		"failures", failures, "err", err, "limiter", l.id)
}

// recovered switches back to Redis after a probe succeeded, passing on the
// pauses made while degraded.
func (l *Limiter) recovered(ctx context.Context) {
	h := &l.health
	h.mu.Lock()
	if !h.degraded {
		h.mu.Unlock()
		return
	}
	h.degraded = false
	h.failures = 0
	down := time.Since(h.since)
	h.mu.Unlock()

	for key, p := range l.local.drain(l.clock.Now()) {
		// Best effort: a failure here counts like any other.
		_ = l.pauseRedis(ctx, key, p.limit, p.left)
	}
	l.opts.Metrics.Fallback(false)
	l.opts.Logger.Info("pacer: redis answers again, back on the shared buckets",
		"degraded_for", down.Round(time.Millisecond), "limiter", l.id)
}

// loop runs in the background from New until Close: a heartbeat every
// HeartbeatInterval while Redis is up, a probe every ProbeInterval (jittered)
// while it is not.
func (l *Limiter) loop() {
	defer close(l.done)
	timer := time.NewTimer(0) // the first heartbeat at once: learn the fleet size early
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
				err = l.probeBucket(l.loopCtx)
			}
			switch {
			case degraded && err == nil:
				l.recovered(context.Background())
				timer.Reset(l.opts.HeartbeatInterval)
			case degraded:
				timer.Reset(jitter(l.opts.ProbeInterval))
			default:
				timer.Reset(l.opts.HeartbeatInterval)
			}
			l.local.sweep(l.clock.Now())
		}
	}
}

// jitter returns d ± 25%.
func jitter(d time.Duration) time.Duration {
	return d*3/4 + rand.N(d/2+1)
}

// heartbeat records this Limiter as live and learns the fleet size. It
// bypasses the degraded check: it is also the probe.
func (l *Limiter) heartbeat(ctx context.Context) error {
	ttl := 3 * l.opts.HeartbeatInterval
	res, err := l.call(ctx, "heartbeat", func(ctx context.Context) (any, error) {
		return l.heartbeatScript.Run(ctx, l.rdb, []string{l.fleetKey()}, l.id, strconv.FormatInt(ttl.Milliseconds(), 10)).Result()
	})
	if err != nil {
		if ctx.Err() == nil {
			l.failed("", err)
		}
		return err
	}
	l.succeeded()
	if n, ok := res.(int64); ok && n >= 1 {
		l.fleet.Store(n)
	}
	return nil
}

// probeBucket checks that the bucket of the last failed call answers too: on
// a Redis Cluster the heartbeat set may live on a healthy master while the
// buckets' slot is still failing over.
func (l *Limiter) probeBucket(ctx context.Context) error {
	l.health.mu.Lock()
	key := l.health.lastKey
	l.health.mu.Unlock()
	if key == "" {
		return nil
	}
	_, err := l.call(ctx, "probe", func(ctx context.Context) (any, error) {
		return l.rdb.PTTL(ctx, l.RedisKey(key)).Result()
	})
	if err != nil && ctx.Err() == nil {
		l.failed(key, err)
	}
	return err
}

// fleetKey is the sorted set of live Limiters sharing this KeyPrefix.
func (l *Limiter) fleetKey() string { return l.opts.KeyPrefix + "limiters" }

// fleetSize returns the number of live Limiters last learned, at least 1.
func (l *Limiter) fleetSize() int { return int(max(l.fleet.Load(), 1)) }
