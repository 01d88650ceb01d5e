package reserve

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

var (
	pauseScript = redis.NewScript(lua.Pause)
	peekScript  = redis.NewScript(lua.Peek)
)

// Pause grants no slot on key before d from now, fleet-wide: use it when
// the provider answers 429 with Retry-After d. A pause belongs to the key:
// whatever policies its callers pass, every band stops, and every bucket is
// empty when the pause ends, so callers resume at the rate instead of all at
// once. Reservations already granted keep their slots, but their Sleep (and
// Wait) take a slot after the pause instead of spending the cost inside it.
// A pause shorter than one already in force changes nothing.
func (l *Limiter) Pause(ctx context.Context, key string, d time.Duration) error {
	if err := checkKey(key); err != nil {
		return err
	}
	return l.pause(ctx, key, keyOnly, d)
}

func (l *Limiter) pause(ctx context.Context, key string, s *spec, d time.Duration) error {
	if d <= 0 || d > maxFill {
		return fmt.Errorf("%w: pause %v (want 0 < d <= %v)", ErrInvalidDuration, d, maxFill)
	}
	var err error
	if l.isDegraded() && !l.opts.FailClosed {
		err = fmt.Errorf("reserve: pause %q: %w", key, l.unavailableErr())
	} else {
		err = l.pauseRedis(ctx, key, s, d)
		if askedCalendar(err) {
			err = l.pauseRedis(ctx, key, s, d) // with the table learned
		}
	}
	if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		// Paced locally until Redis is back, then passed on to it.
		err = l.pauseLocal(ctx, key, s, d)
	}
	if err == nil {
		// This Limiter's leases on the key lapse: their slots may lie
		// inside the pause, and a new lease comes after it.
		ks := l.states.get(key)
		ks.mu.Lock()
		l.dropLeases(ks)
		ks.mu.Unlock()
		l.opts.Metrics.Paused(key, d)
	}
	return err
}

func (l *Limiter) pauseRedis(ctx context.Context, key string, s *spec, d time.Duration) error {
	now := l.clock.Now()
	args := l.args(key, now, s, 1)
	args = append(args, strconv.FormatInt(int64((d+time.Microsecond-1)/time.Microsecond), 10))
	keys := l.keys(key)
	sent := now
	var sentReal time.Time
	res, err := l.run(ctx, names.OpPause, key, func(ctx context.Context) (any, error) {
		sent, sentReal = l.clock.Now(), time.Now()
		return pauseScript.Run(ctx, l.scripts, keys, args...).Result()
	}, nil)
	if err != nil {
		return err
	}
	// The pause is known here at once: sleepers and leases honour it
	// without waiting for their next read.
	if reply, ok := res.([]any); ok && len(reply) == 5 {
		base, err := l.replyBaseAt(sent, l.clock.Now(), reply)
		end, ok1 := reply[2].(int64)
		seq, ok2 := reply[3].(int64)
		state, ok3 := reply[4].(string)
		if err == nil && ok1 && ok2 && ok3 && end > 0 {
			ks := l.states.get(key)
			ks.mu.Lock()
			ks.noteSeen(state, ks.stored, sentReal)
			ks.mine(base.serverNS+end, seq, s)
			ks.mu.Unlock()
		}
	}
	return nil
}

// A Snapshot is a key as Peek reads it, without changing it.
type Snapshot struct {
	// Wait is how long the cost Peek was given would wait if reserved now;
	// negative when it could never be granted at this Limiter's share
	// (while other Limiters pace locally, a window band's share is below
	// the cost in every window).
	Wait time.Duration
	// Paused is the time left in a pause (zero if none).
	Paused time.Duration
	// Bands are the policy's bands in force, in order. With a limit stored
	// for the key (cmd/pacer set), they are that limit's.
	Bands []BandSnapshot
	// Local is true when the local fallback answered (Redis unavailable).
	Local bool
	// Binding is what makes the cost wait: the band whose own wait is the
	// longest, or PauseBinding when a pause in force sets Wait (every
	// band would let the cost through the moment it ends, its buckets
	// emptied by it aside); "" when the cost would not wait. Wait is when
	// it frees.
	Binding string
}

// A BandSnapshot is one band as Peek reads it.
type BandSnapshot struct {
	Name string
	// Value is a bucket's balance (at most its burst, negative while
	// reservations are queued), or the units reserved in a window band's
	// latest window.
	Value float64
	// Wait is how long this band alone would make the cost wait.
	Wait time.Duration
	// WindowEnd is the end of a window band's latest window (zero for a
	// bucket).
	WindowEnd time.Time
}

// Peek reads req's key without changing it: the wait req's cost would have
// now, the pause, and each band's balance or window use.
func (l *Limiter) Peek(ctx context.Context, req Request) (Snapshot, error) {
	s, amounts, _, err := l.check(req)
	if err != nil {
		return Snapshot{}, err
	}
	return l.peek(ctx, req.Key, s, amounts)
}

func (l *Limiter) peek(ctx context.Context, key string, s *spec, amounts []float64) (Snapshot, error) {
	now := l.clock.Now()
	run := func(local bool) (any, error) {
		if !local {
			send := func() (any, error) {
				args := l.args(key, now, s, len(amounts))
				for _, a := range amounts {
					args = append(args, formatFloat(a))
				}
				keys := l.keys(key)
				return l.run(ctx, names.OpPeek, key, func(ctx context.Context) (any, error) {
					return peekScript.Run(ctx, l.scripts, keys, args...).Result()
				}, nil)
			}
			res, err := send()
			if askedCalendar(err) {
				res, err = send() // with the table learned
			}
			return res, err
		}
		shareArg, err := l.localShareArg(key)
		if err != nil {
			return nil, err
		}
		args := l.argsWith(key, now, s, len(amounts), shareArg, true)
		for _, a := range amounts {
			args = append(args, formatFloat(a))
		}
		ks := l.states.get(key)
		ks.mu.Lock()
		defer ks.mu.Unlock()
		return l.runLocal(ctx, names.OpPeek, ks, s, peekScript, l.keys(key), args, shareArg)
	}
	local := l.isDegraded() && !l.opts.FailClosed
	res, err := run(local)
	if !local && errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		local = true
		res, err = run(true)
	}
	var noShare *noShareError
	if errors.As(err, &noShare) {
		// No share to pace on now: nothing could be granted here.
		return Snapshot{Wait: -1, Local: true}, nil
	}
	if err != nil {
		return Snapshot{}, err
	}
	reply, ok := res.([]any)
	if !ok || len(reply) < 4 || (len(reply)-4)%4 != 0 {
		return Snapshot{}, replyError(names.OpPeek, key, res)
	}
	var base replyTime
	if local {
		base, err = l.localBase(now, reply)
	} else {
		base, err = l.replyBase(now, reply)
	}
	wait, ok1 := reply[2].(int64)
	paused, ok2 := reply[3].(int64)
	if err != nil || !ok1 || !ok2 {
		return Snapshot{}, replyError(names.OpPeek, key, res)
	}
	var bands []bandPeek
	for i := 4; i < len(reply); i += 4 {
		name, ok1 := reply[i].(string)
		value, ok2 := reply[i+1].(string)
		bw, ok3 := reply[i+2].(int64)
		end, ok4 := reply[i+3].(int64)
		v, perr := strconv.ParseFloat(value, 64)
		if !ok1 || !ok2 || !ok3 || !ok4 || perr != nil {
			return Snapshot{}, replyError(names.OpPeek, key, res)
		}
		bands = append(bands, bandPeek{name: name, value: v, waitNS: bw, endNS: end})
	}
	return snapshotOf(base.local, wait, paused, bands, local, s.slowest(amounts)), nil
}

// bandPeek is one band as peek.lua reads it.
type bandPeek struct {
	name   string
	value  float64 // a bucket's balance, or a window's units in its latest window
	waitNS int64   // this band's own wait for the cost; -1: never at the share
	endNS  int64   // a window's latest window end, ns from now (0 for a bucket)
}

// snapshotOf builds a Snapshot from a peek made at at (the Limiter's clock):
// waits and ends in ns from then; a wait of -1 ns: never at this share.
// spacing is the cost's spacing in its slowest bucket: the most a bucket
// emptied by a pause adds to the pause.
func snapshotOf(at time.Time, wait, paused int64, bands []bandPeek, local bool, spacing time.Duration) Snapshot {
	snap := Snapshot{Wait: time.Duration(wait), Paused: time.Duration(max(paused, 0)), Local: local}
	if wait > 0 {
		longest := int64(0)
		for _, b := range bands {
			if b.waitNS > longest {
				snap.Binding, longest = b.name, b.waitNS
			}
		}
		if paused > 0 && longest <= paused+int64(spacing)+1 {
			snap.Binding = PauseBinding
		}
	}
	for _, b := range bands {
		bs := BandSnapshot{Name: b.name, Value: b.value, Wait: time.Duration(b.waitNS)}
		if b.endNS != 0 {
			bs.WindowEnd = at.Add(time.Duration(b.endNS))
		}
		snap.Bands = append(snap.Bands, bs)
	}
	return snap
}
