package pacehttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/lua"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The provider's counts (Options.IgnoreCounts): once a key's answers have
// reported a quota of calls (Advice.Calls), every call on it takes one from
// the fleet's count in Redis before it is sent, and reports its answer.
// lua/quota.lua keeps the count: the calls the provider said were left,
// less those in flight, spread over the time to the reset.

var quotaScript = redis.NewScript(lua.Quota)

const (
	// quotaKeep is how long a key's count outlives its window and its last
	// call.
	quotaKeep = 10 * time.Minute
	// quotaLapse is how long after its slot a call never answered (its
	// process died) stops counting as in flight; the script makes it at
	// least four round trips.
	quotaLapse = 10 * time.Second
	// quotaStale is how long after its turn a call taken from the count
	// may wait for its slot (of the Limit, after a pause) and still be sent
	// on that turn; past it, it asks the count again (Transport.admit). It
	// is below the least time a probe is alone (lua/quota.lua: 250 ms).
	quotaStale = 200 * time.Millisecond
)

// counted remembers, per key, whether the fleet keeps a count of its calls:
// true once an answer of this process reported one, or a take found one
// kept by another process; false when a take found none (this process
// takes no more on the key until one of its answers reports a count).
// Absent: not known yet, the next call takes. At most maxRates keys; past
// it they start afresh.
type counted struct {
	mu sync.Mutex
	m  map[string]bool
}

// get returns whether key is counted, and whether that is known.
func (c *counted) get(key string) (counted, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counted, known = c.m[key]
	return counted, known
}

func (c *counted) set(key string, counted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[key]; ok && v == counted {
		return
	}
	if c.m == nil || len(c.m) >= maxRates {
		c.m = map[string]bool{}
	}
	c.m[key] = counted
}

// has reports whether key is counted.
func (c *counted) has(key string) bool {
	v, _ := c.get(key)
	return v
}

// quotaKeys returns the Redis keys of key's count.
func (t *Transport) quotaKeys(key string) []string {
	k := t.lim.RedisKey(key) + ":quota"
	return []string{k, k + ":flight"}
}

// runQuota runs the quota script on key.
func (t *Transport) runQuota(ctx context.Context, key string, args ...any) (any, error) {
	keys := t.quotaKeys(key)
	return hook.Run(t.lim, ctx, names.OpQuota, key, func(ctx context.Context, rdb redis.Scripter) (any, error) {
		return quotaScript.Run(ctx, rdb, keys, args...).Result()
	})
}

// A countTake is the answer of one take from a key's count.
type countTake struct {
	id    int64         // the take's number (0: nothing taken)
	wait  time.Duration // how long to wait: for the turn taken, or before taking again
	known bool          // a count is kept for the key
	// blind: Redis could not be reached, so whether a count is kept is not
	// known; the call goes on without it (known is false), and asks again
	// once it has its slot (Transport.admit).
	blind bool
}

// take takes one call from key's count and sleeps until its turn, no later
// than ctx's deadline. It returns the take's number, for answer or drop;
// 0 when nothing was taken: no count is kept for key (it is then recorded
// as not counted), or Redis cannot be reached (blind: the call goes on, as
// the reservation does, paced locally, and asks the count again once it
// has its slot).
func (t *Transport) take(ctx context.Context, key string) (id int64, blind bool, err error) {
	for {
		tk, err := t.takeOnce(ctx, key)
		if err != nil || !tk.known {
			return 0, tk.blind, err
		}
		if err := t.waitCount(ctx, key, tk.id, tk.wait); err != nil {
			return 0, false, err
		}
		if tk.id > 0 {
			return tk.id, false, nil
		}
	}
}

// takeOnce runs one take on key's count.
func (t *Transport) takeOnce(ctx context.Context, key string) (countTake, error) {
	res, err := t.runQuota(ctx, key, "take", quotaKeep.Milliseconds(), quotaLapse.Milliseconds())
	if errors.Is(err, reserve.ErrUnavailable) && !hook.FailClosed(t.lim) {
		return countTake{blind: true}, nil
	}
	if err != nil {
		return countTake{}, fmt.Errorf("provider's count: %w", err)
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 3 {
		return countTake{}, fmt.Errorf("provider's count of %q: unexpected reply %v", key, res)
	}
	ms, _ := reply[0].(int64)
	id, _ := reply[1].(int64)
	k, _ := reply[2].(int64)
	t.counted.set(key, k == 1)
	if k == 0 {
		return countTake{}, nil
	}
	return countTake{id: id, wait: time.Duration(ms) * time.Millisecond, known: true}, nil
}

// waitCount sleeps for a count's wait, no later than ctx's deadline; take
// id (0: none) is dropped if the call cannot wait.
func (t *Transport) waitCount(ctx context.Context, key string, id int64, wait time.Duration) error {
	if d, ok := ctx.Deadline(); ok {
		if left := time.Until(d); wait > left {
			if id > 0 {
				t.drop(ctx, key, id)
			}
			return &reserve.WaitTooLongError{Wait: wait, MaxWait: max(left, 0), Deadline: true}
		}
	}
	if wait > 0 {
		if err := sleepCtx(ctx, wait); err != nil {
			if id > 0 {
				t.drop(ctx, key, id)
			}
			return err
		}
	}
	return nil
}

// drop reports that take id on key was not sent.
func (t *Transport) drop(ctx context.Context, key string, id int64) {
	if _, err := t.runQuota(context.WithoutCancel(ctx), key, "drop", quotaKeep.Milliseconds(), id); err != nil && !errors.Is(err, reserve.ErrUnavailable) {
		t.opts.Logger.Warn("pacehttp: could not update the provider's count", "key", key, "err", err)
	}
}

// answer reports the answer to take id on key (0: a call taken before the
// key was counted): the quota of calls it reports, if any, and the call's
// round trip.
//
// Every quota of calls is counted as a fixed window that ends at its reset,
// OpenAI's and Anthropic's too (Quota.Refill). Their headers give the time
// until the quota is whole again, which a fixed window (the whole quota
// back at its end) and a bucket refilled continuously both send, and the
// two cannot be told apart from an answer. A window's count is right for
// both: a bucket holds at least what it said was left, less what was spent
// since, until it is full, so the fleet never sends more than either
// allows, and it spends a bucket's refill too, window after window, at the
// bucket's rate on average. The bucket's count (lua/quota.lua's refill, at
// (limit - left) / reset) sent a fixed window's calls at that rate after
// its quota was spent, into refusals until its end.
//
// A reset given as a delay (relative) counts from when the provider wrote
// it, somewhere in the call's round trip: see below.
func (t *Transport) answer(ctx context.Context, key string, id int64, q Quota, rtt time.Duration, relative bool) {
	left := int64(-1)
	if q.Source != "" {
		left = q.Remaining
	}
	// A reset beyond MaxWait is cut to it, as a wait the provider asks for
	// is: no call sleeps longer for a count.
	reset := min(q.Reset, t.opts.MaxWait)
	// A reset in whole seconds is taken as rounded up (express-rate-limit,
	// the IETF drafts' examples): the window may end up to a second
	// earlier. One from a Unix time (GitHub) is exact to the millisecond.
	unc := time.Millisecond
	if reset%time.Second == 0 {
		unc = time.Second
	}
	if relative {
		// A delay counts from when the provider wrote it, within the
		// call's round trip before the answer came back: the window may
		// end as early as a whole round trip before the answer's arrival
		// plus the delay. The calls left are spread to that earliest end;
		// the latest stays where it was, so the probe after it still goes
		// once the window is over. Spread to the latest, the last calls
		// reached the provider in its next window, uncharged, when the
		// answer's way back was long (a loaded machine:
		// TestQuotaRelativeReset).
		unc += rtt
	}
	ms := func(d time.Duration) string {
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
	}
	_, err := t.runQuota(context.WithoutCancel(ctx), key, "answer", quotaKeep.Milliseconds(), id, left, ms(reset), q.Limit, "0", ms(rtt), ms(unc))
	if err != nil && !errors.Is(err, reserve.ErrUnavailable) {
		t.opts.Logger.Warn("pacehttp: could not update the provider's count", "key", key, "err", err)
	}
}

// relativeReset reports whether the reset of q, read from h, is a delay
// from when the provider wrote it (OpenAI's durations, the IETF drafts'
// seconds, x-ratelimit-reset and RateLimit-Reset below unixTimeFloor),
// not a time (GitHub's Unix seconds, Anthropic's RFC 3339).
func relativeReset(h http.Header, q Quota) bool {
	delay := func(name string) bool {
		vs := h.Values(name)
		if len(vs) == 0 {
			return false
		}
		d, err := parseDecimal(strings.Trim(vs[0], " \t"), time.Second)
		return err == nil && d < unixTimeFloor
	}
	switch q.Source {
	case "", "anthropic-ratelimit-requests-remaining":
		return false
	case "x-ratelimit-remaining":
		return delay("x-ratelimit-reset")
	case "ratelimit-remaining":
		return delay("ratelimit-reset")
	}
	return true
}
