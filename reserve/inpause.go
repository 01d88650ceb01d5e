package reserve

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// InPause reports whether a Pause made after r was granted covers r's slot:
// the provider asked the fleet to stop until after it. Pause lets
// reservations already granted keep their slots; a caller that slept until
// its slot and has not used the permits yet can ask InPause first, and
// reserve again (a slot after the pause) instead of calling a provider that
// said to wait. It costs one read (HMGET), no script and no clock: the pause
// and the slot are both absolute times in Redis.
//
// A reservation made by the local fallback (Redis unavailable) is checked
// against the local pauses. If Redis cannot be reached, the error matches
// ErrUnavailable.
func (r *Reservation) InPause(ctx context.Context) (bool, error) {
	l := r.lim
	if r.local != nil {
		return l.local.pausedAfter(r.key, r.at), nil
	}
	v, err := l.call(ctx, "in pause", func(ctx context.Context) (any, error) {
		return l.rdb.HMGet(ctx, l.RedisKey(r.key), "pause", "pausef").Result()
	})
	if err != nil {
		if ctx.Err() == nil && unavailable(err) {
			return false, fmt.Errorf("reserve: in pause %q: %w: %w", r.key, ErrUnavailable, err)
		}
		return false, scriptError("in pause", r.key, err)
	}
	res, ok := v.([]any)
	if !ok || len(res) != 2 {
		return false, replyError("in pause", r.key, v)
	}
	whole, ok1 := res[0].(string)
	frac, ok2 := res[1].(string)
	if !ok1 || !ok2 {
		return false, nil // no pause recorded (or the bucket expired)
	}
	return later(whole, frac, r.slotUS, r.slotFrac)
}

// later reports whether time (w1, f1) is after (w2, f2): integer Unix µs as
// written with %d, and fractions of a µs in [0, 1).
func later(w1, f1, w2, f2 string) (bool, error) {
	a, err1 := strconv.ParseInt(strings.TrimSpace(w1), 10, 64)
	b, err2 := strconv.ParseInt(strings.TrimSpace(w2), 10, 64)
	fa, err3 := strconv.ParseFloat(f1, 64)
	fb, err4 := strconv.ParseFloat(f2, 64)
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return false, fmt.Errorf("reserve: in pause: unreadable times %q %q, %q %q", w1, f1, w2, f2)
	}
	if a != b {
		return a > b, nil
	}
	return fa > fb, nil
}
