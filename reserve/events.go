package reserve

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pacer-go/pacer/internal/layout"
)

// Events: a script that changes a key in a way a Limiter cannot see in its
// own replies (a pause, an operator's resume, a stored limit set or
// removed) announces it on the fleet's channel (core.lua's publish,
// layout.EventsChannel), and each Limiter that uses the key applies it to
// the key's state at once: it reads the key again, which wakes the
// sleepers behind a pause and the fair queues (keyState.changed), and its
// local fallback would start from what Redis holds now. Without the
// events (a Redis user that may not SUBSCRIBE, a message lost while the
// connection was down), a Limiter learns the same at its next read: a
// sleeper's check before its slot, its next reply.

// listen receives the fleet's events until Close.
func (l *Limiter) listen() {
	defer close(l.listening)
	ps := l.rdb.Subscribe(l.loopCtx, layout.EventsChannel(l.opts.KeyPrefix))
	// Receive does not watch its context while it reads: closing the
	// subscription ends it.
	stop := context.AfterFunc(l.loopCtx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	backoff := 10 * time.Millisecond
	for {
		msg, err := ps.Receive(l.loopCtx)
		if l.loopCtx.Err() != nil {
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			l.onEvent(m.Payload)
			backoff = 10 * time.Millisecond
			continue
		case *redis.Subscription:
			backoff = 10 * time.Millisecond
			continue
		}
		var rerr redis.Error
		if err != nil && errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOPERM") {
			l.opts.Logger.Info("pacer: the Redis user may not SUBSCRIBE to the fleet's events: pauses, resumes and stored limits are learned at the next read instead",
				"channel", layout.EventsChannel(l.opts.KeyPrefix), "err", err, "limiter", l.id)
			return
		}
		// Redis is down, or the connection broke: go-redis dials again at
		// the next Receive.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-l.loopCtx.Done():
			t.Stop()
			return
		}
		backoff = min(2*backoff, l.opts.ProbeInterval)
	}
}

// onEvent applies one event ("<op> <the key's Redis key> <arg>": a pause
// or a resume with the key's state as written, or a stored limit set,
// "" when removed) to the key's state, if this Limiter uses the key.
func (l *Limiter) onEvent(payload string) {
	op, rest, ok := strings.Cut(payload, " ")
	if !ok {
		return
	}
	rk, arg, _ := strings.Cut(rest, " ")
	key, ok := layout.KeyName(l.opts.KeyPrefix, rk)
	if !ok && op != "seat" {
		return
	}
	if op == "seat" {
		// "seat <the key's seats> <tickets>": rk names the seats hash.
		if base, ok := strings.CutSuffix(rk, ":seats"); ok {
			if key, ok := layout.KeyName(l.opts.KeyPrefix, base); ok {
				l.onSeatEvent(key, arg)
			}
		}
		return
	}
	ks := l.states.peek(key)
	if ks == nil {
		return // not a key of this Limiter's
	}
	switch op {
	case "pause", "resume":
		// The key's state as the script left it: the pause, ended or
		// moved, reaches the key's sleepers and fair queues at once.
		ks.mu.Lock()
		ks.noteSeen(arg, ks.stored, time.Time{})
		ks.mu.Unlock()
	case "limit":
		ks.mu.Lock()
		ks.stored = arg
		ks.mu.Unlock()
	}
}
