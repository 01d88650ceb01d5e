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
// less those in flight, spread over the time to the reset (a window), or
// paced at the refill rate (a bucket its answers showed).

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
//
// While the count has nothing to take (the window spent, a probe out),
// one caller per key in the process asks it again when its wait is over;
// the others wait for that answer (takeTurns), and take at once when it
// found the count open. Before, every waiting caller asked every quarter
// of a round trip while a probe was out: the polls grew with the callers
// (TestTakesCoalesced).
func (t *Transport) take(ctx context.Context, key string) (id int64, blind bool, err error) {
	for {
		turn, asks := t.turns.join(key)
		if !asks {
			if err := turn.await(ctx); err != nil {
				return 0, false, err
			}
			if !turn.open {
				continue // the count had nothing: wait for the next answer
			}
		}
		tk, err := t.takeOnce(ctx, key)
		if asks && (err != nil || !tk.known || tk.id > 0) {
			t.turns.end(key, turn, true) // the others take for themselves
			asks = false
		}
		if err != nil || !tk.known {
			return 0, tk.blind, err
		}
		if asks {
			turn.wait(tk.wait)
		}
		// Its turn (a number), or, with none, when to ask again: a caller
		// woken by an open count that found nothing left waits that long
		// alone, then with the others.
		err = t.waitCount(ctx, key, tk.id, tk.wait)
		if asks {
			t.turns.end(key, turn, false)
		}
		if err != nil {
			return 0, false, err
		}
		if tk.id > 0 {
			return tk.id, false, nil
		}
	}
}

// takeTurns are the keys whose count a caller of this process is asking
// again, or waiting to ask, for the others (Transport.take).
type takeTurns struct {
	mu sync.Mutex
	m  map[string]*takeTurn
}

// A takeTurn is one caller's asking of a key's count for the others.
type takeTurn struct {
	done chan struct{} // closed when it has its answer
	open bool          // set before done closes: the count had a call to take

	mu    sync.Mutex
	until time.Time // when it asks again (the count's wait); zero until known
}

// wait records that the asker asks again after d.
func (tr *takeTurn) wait(d time.Duration) {
	tr.mu.Lock()
	tr.until = time.Now().Add(d)
	tr.mu.Unlock()
}

// join returns key's turn in progress, or a new one that the caller asks
// for (asks).
func (ts *takeTurns) join(key string) (turn *takeTurn, asks bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if tr, ok := ts.m[key]; ok {
		return tr, false
	}
	if ts.m == nil {
		ts.m = map[string]*takeTurn{}
	}
	tr := &takeTurn{done: make(chan struct{})}
	ts.m[key] = tr
	return tr, true
}

// end ends key's turn tr, the count open or not, and wakes its waiters.
func (ts *takeTurns) end(key string, tr *takeTurn, open bool) {
	ts.mu.Lock()
	if ts.m[key] == tr {
		delete(ts.m, key)
	}
	ts.mu.Unlock()
	tr.open = open
	close(tr.done)
}

// await waits for tr's answer, no later than ctx's deadline: a caller
// that cannot wait as long as the asker waits is refused at once, as its
// own take would be (waitCount).
func (tr *takeTurn) await(ctx context.Context) error {
	tr.mu.Lock()
	until := tr.until
	tr.mu.Unlock()
	if d, ok := ctx.Deadline(); ok && !until.IsZero() && until.After(d) {
		wait := time.Until(until)
		return &reserve.WaitTooLongError{Wait: wait, MaxWait: max(time.Until(d), 0), Deadline: true}
	}
	select {
	case <-tr.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
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
// OpenAI's and Anthropic's quotas (Quota.Refill) give the time until the
// quota is whole again, which a bucket refilled continuously (full again
// then) and a fixed window (whole again at its end) both send. The count
// tells them apart from the answers (lua/quota.lua: in a bucket every
// answer's (limit - left) / reset is its one refill rate, up to the
// rounding; in a window it grows as the window runs out), and counts the
// quota as a window until it knows: a window's count never sends more than
// either allows. Counted as a window, a bucket refilled continuously ran a
// fleet at 28-45% of its quota (examples/llm: after each reset one call
// alone); counted as a bucket at (limit - left) / reset, a fixed window's
// calls went into refusals once its quota was spent.
//
// A reset given as a delay (relative) counts from when the provider wrote
// it, somewhere in the call's round trip: see below.
func (t *Transport) answer(ctx context.Context, key string, id int64, q Quota, rtt time.Duration, relative bool) {
	left, refill := int64(-1), "0"
	if q.Source != "" {
		left = q.Remaining
	}
	// A reset beyond MaxWait is cut to it, as a wait the provider asks for
	// is: no call sleeps longer for a count. A reset cut says nothing of a
	// bucket's rate: it is counted as a window's.
	reset := min(q.Reset, t.opts.MaxWait)
	if q.Refill && q.Source != "" && q.Limit > 0 && reset == q.Reset {
		refill = "1"
	}
	// A reset in whole seconds is taken as rounded up (express-rate-limit,
	// the IETF drafts' examples): the window may end up to a second
	// earlier. One from a Unix time (GitHub) is exact to the millisecond.
	unc := time.Millisecond
	if reset%time.Second == 0 {
		unc = time.Second
	}
	// How far the reset may be from the time until the quota is whole
	// again, as of when the provider counted what is left (for telling a
	// bucket from a window): a delay (OpenAI's) is written with the count,
	// up to its rounding (whole seconds, rounded either way, from 1 s up);
	// a time (Anthropic's RFC 3339, in whole seconds) is read against this
	// clock, after the round trip.
	unc2 := unc
	if !relative {
		unc2 = time.Second + rtt
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
	res, err := t.runQuota(context.WithoutCancel(ctx), key, "answer", quotaKeep.Milliseconds(), id, left, ms(reset), q.Limit, refill, ms(rtt), ms(unc), ms(unc2))
	if err != nil && !errors.Is(err, reserve.ErrUnavailable) {
		t.opts.Logger.Warn("pacehttp: could not update the provider's count", "key", key, "err", err)
	}
	if err == nil && refill == "1" {
		n, _ := res.(int64)
		t.buckets.set(key, n == 2)
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
