package reserve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// A Limiter paces callers sharing buckets kept in Redis. Each bucket is named
// by a key and behaves like golang.org/x/time/rate's Limiter created with
// NewLimiter(lim.Rate, lim.Burst): it starts full with Burst permits and
// refills at Rate permits per second up to Burst. A reservation may take the
// balance below zero; it then waits until the balance is back at zero. Every
// caller thus pays for its own permits, and slots are handed out in the order
// Redis runs the requests, spaced 1/Rate apart.
//
// Most callers want Wait, which reserves and sleeps until the slot. Reserve
// returns the slot without sleeping (to reschedule a job instead), TryReserve
// reserves only if the wait is short enough, Pause stops a key fleet-wide, and
// Peek reads a key without changing it.
//
// Durations are exact to the microsecond, rounded up, so a slot is never
// early. A Limiter is safe for concurrent use; all processes that share a
// Redis and a KeyPrefix share the buckets. It is created with New; the zero
// value is not usable.
type Limiter struct {
	rdb         redis.UniversalClient
	opts        Options
	clock       Clock
	serverTime  bool
	ctxTimeouts bool   // the client honours context deadlines on its sockets
	reload      func() // asks a Cluster client to reload its slot map
	id          string // this Limiter in the fleet's heartbeat set

	reserveScript   *redis.Script
	cancelScript    *redis.Script
	pauseScript     *redis.Script
	peekScript      *redis.Script
	heartbeatScript *redis.Script

	health    health
	local     *local
	coalescer coalescer
	waker     *waker
	fleet     atomic.Int64 // live Limiters sharing the KeyPrefix, last learned

	closed     atomic.Bool
	stop       chan struct{}
	done       chan struct{}
	loopCtx    context.Context
	loopCancel context.CancelFunc
}

// New returns a Limiter keeping its buckets in rdb, which may be a single
// node, Sentinel (redis.NewFailoverClient) or Cluster client. It starts a
// background goroutine (heartbeat and, while Redis is down, probes) that
// Close stops.
func New(rdb redis.UniversalClient, opts Options) (*Limiter, error) {
	if rdb == nil {
		return nil, errors.New("reserve: nil redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	l := &Limiter{
		rdb:             rdb,
		opts:            opts,
		clock:           opts.Clock,
		id:              newID(),
		reserveScript:   redis.NewScript(lua.Reserve),
		cancelScript:    redis.NewScript(lua.Cancel),
		pauseScript:     redis.NewScript(lua.Pause),
		peekScript:      redis.NewScript(lua.Peek),
		heartbeatScript: redis.NewScript(lua.Heartbeat),
		local:           newLocal(),
		coalescer:       coalescer{queues: make(map[batchKey]*queue)},
		waker:           newWaker(opts.PreciseWake),
		stop:            make(chan struct{}),
		done:            make(chan struct{}),
	}
	l.health.wake = make(chan struct{}, 1)
	if l.clock == nil {
		l.clock = systemClock{}
		l.serverTime = true
	}
	switch c := rdb.(type) {
	case *redis.Client:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
		// After a master fails over, go-redis keeps sending a slot's
		// commands to the dead master until its periodic refresh, which
		// can itself pick the dead node: seconds of refused calls. A
		// failed call asks for a reload (go-redis runs one at a time).
		l.reload = func() { c.ReloadState(context.Background()) }
	case *redis.Ring:
		l.ctxTimeouts = c.Options().ContextTimeoutEnabled
	}
	l.fleet.Store(1)
	l.loopCtx, l.loopCancel = context.WithCancel(context.Background())
	go l.loop()
	return l, nil
}

// Close stops the Limiter's background goroutine and removes it from the
// fleet's heartbeat set. It does not close the Redis client. Calls after
// Close return ErrClosed; a Wait already sleeping finishes normally.
func (l *Limiter) Close() error {
	if !l.closed.CompareAndSwap(false, true) {
		return nil
	}
	l.loopCancel()
	close(l.stop)
	<-l.done
	if l.isDegraded() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.opts.CallTimeout)
	defer cancel()
	_, err := l.call(ctx, "heartbeat", func(ctx context.Context) (any, error) {
		return l.rdb.ZRem(ctx, l.fleetKey(), l.id).Result()
	})
	if err != nil {
		return fmt.Errorf("reserve: close: leaving the fleet: %w", err)
	}
	return nil
}

// newID names a Limiter in the heartbeat set: host, process and a random part.
func newID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%016x", host, os.Getpid(), rand.Uint64())
}

// RedisKey returns the Redis key that holds the bucket named key.
func (l *Limiter) RedisKey(key string) string {
	return l.opts.KeyPrefix + "{" + key + "}"
}

// Reserve reserves n permits on key and returns the reservation, whose Delay
// says how long to wait before using them. It never refuses because of the
// wait's length (x/time/rate's ReserveN; see TryReserve), short of a queue
// over 30 years long (ErrQueueTooLong). n must be between 1 and lim.Burst.
func (l *Limiter) Reserve(ctx context.Context, key string, lim Limit, n int) (*Reservation, error) {
	return l.reserve(ctx, "reserve", key, lim, n, -1)
}

// TryReserve is Reserve, except that when the wait would be longer than
// maxWait it reserves nothing and returns a *WaitTooLongError carrying the
// wait that would have been needed (Guava's tryAcquire(permits, timeout)).
// maxWait 0 takes the permits only if they are available now.
func (l *Limiter) TryReserve(ctx context.Context, key string, lim Limit, n int, maxWait time.Duration) (*Reservation, error) {
	if maxWait < 0 {
		return nil, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	return l.reserve(ctx, "reserve", key, lim, n, maxWait)
}

// reserve runs reserve.lua for one request, through the coalescer unless
// it is disabled; maxWait < 0 means no maximum.
func (l *Limiter) reserve(ctx context.Context, op, key string, lim Limit, n int, maxWait time.Duration) (*Reservation, error) {
	if err := validate(key, lim, n); err != nil {
		return nil, err
	}
	if !l.opts.DisableCoalescing {
		return l.reserveCoalesced(ctx, op, key, lim, n, maxWait)
	}
	req := &request{op: op, n: n, maxWait: maxWait}
	res := l.reserveBatch(ctx, key, lim, []*request{req})[0]
	return res.r, res.err
}

// Pause grants no slot on key before d from now, fleet-wide: use it when the
// provider answers 429 with Retry-After d. The bucket is empty when the pause
// ends, so callers resume at lim.Rate instead of all at once. Reservations
// already granted keep their slots; a pause shorter than what is already
// queued changes nothing.
func (l *Limiter) Pause(ctx context.Context, key string, lim Limit, d time.Duration) error {
	if err := validate(key, lim, 1); err != nil {
		return err
	}
	if d <= 0 || d > maxFill {
		return fmt.Errorf("%w: pause %v (want 0 < d <= %v)", ErrInvalidDuration, d, maxFill)
	}
	err := l.pauseRedis(ctx, key, lim, d)
	if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		// Paced locally until Redis is back, then passed on to it.
		l.local.pause(l.clock.Now(), key, lim, l.fleetSize(), d)
		err = nil
	}
	if err == nil {
		l.opts.Metrics.Paused(key, d)
	}
	return err
}

func (l *Limiter) pauseRedis(ctx context.Context, key string, lim Limit, d time.Duration) error {
	dUS := (d + time.Microsecond - 1) / time.Microsecond
	_, args := l.args(lim, int64(dUS))
	_, err := l.run(ctx, "pause", l.pauseScript, key, args)
	return err
}

// Status is a bucket's state as Peek reads it.
type Status struct {
	// Wait is how long n permits reserved now would wait.
	Wait time.Duration
	// Tokens is the balance now: at most the burst, negative while
	// reservations are queued.
	Tokens float64
}

// Peek reads key without changing it: the wait n permits would have now, and
// the balance.
func (l *Limiter) Peek(ctx context.Context, key string, lim Limit, n int) (Status, error) {
	if err := validate(key, lim, n); err != nil {
		return Status{}, err
	}
	_, args := l.args(lim, n)
	res, err := l.run(ctx, "peek", l.peekScript, key, args)
	if errors.Is(err, ErrUnavailable) && !l.opts.FailClosed {
		return l.local.peek(l.clock.Now(), key, lim, l.fleetSize(), n), nil
	}
	if err != nil {
		return Status{}, err
	}
	reply, ok := res.([]any)
	if !ok || len(reply) != 2 {
		return Status{}, replyError("peek", key, res)
	}
	waitUS, ok1 := reply[0].(int64)
	tokens, ok2 := reply[1].(string)
	if !ok1 || !ok2 {
		return Status{}, replyError("peek", key, res)
	}
	t, err := strconv.ParseFloat(tokens, 64)
	if err != nil {
		return Status{}, replyError("peek", key, res)
	}
	return Status{Wait: durationUS(waitUS), Tokens: t}, nil
}

// args returns the time of the call on the limiter's clock and ARGV for a
// script: rate, burst, now (empty for server time), now's nanoseconds, extra.
func (l *Limiter) args(lim Limit, extra ...any) (time.Time, []any) {
	now := l.clock.Now()
	nowUS, nowNS := "", "0"
	if !l.serverTime {
		nowUS = strconv.FormatInt(now.UnixMicro(), 10)
		nowNS = strconv.Itoa(now.Nanosecond() % 1000)
	}
	args := make([]any, 0, 4+len(extra))
	args = append(args, strconv.FormatFloat(lim.Rate, 'f', -1, 64), strconv.Itoa(lim.Burst), nowUS, nowNS)
	for _, e := range extra {
		switch v := e.(type) {
		case int:
			args = append(args, strconv.Itoa(v))
		case int64:
			args = append(args, strconv.FormatInt(v, 10))
		case string:
			args = append(args, v)
		default:
			panic(fmt.Sprintf("reserve: script argument of type %T", e))
		}
	}
	return now, args
}

func replyError(op, key string, res any) error {
	return fmt.Errorf("reserve: %s %q: unexpected reply %#v", op, key, res)
}

// durationUS converts µs to a Duration, saturating instead of overflowing.
func durationUS(us int64) time.Duration {
	if us > math.MaxInt64/int64(time.Microsecond) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(us) * time.Microsecond
}

// reserveLocal reserves on the local fallback: Redis is unavailable.
func (l *Limiter) reserveLocal(key string, lim Limit, n int, maxWait time.Duration) (*Reservation, error) {
	now := l.clock.Now()
	r, wait := l.local.reserve(now, key, lim, l.fleetSize(), n, maxWait)
	if r == nil {
		return nil, &WaitTooLongError{Wait: wait, MaxWait: maxWait}
	}
	l.opts.Metrics.Reserved(key, n, wait, true)
	return &Reservation{lim: l, key: key, limit: lim, n: n, at: now.Add(wait), local: r}, nil
}
