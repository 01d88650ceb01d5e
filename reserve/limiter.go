package reserve

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/luastore"
	"github.com/pacer-go/pacer/internal/outage"
	"github.com/pacer-go/pacer/internal/wake"
	"github.com/redis/go-redis/v9"
)

// A Limiter paces callers sharing keys kept in Redis. Each key is paced by
// a Policy; a single Limit is the common case: such a key behaves like
// golang.org/x/time/rate's Limiter created with NewLimiter(lim.Rate,
// lim.Burst). It starts full with Burst permits and refills at Rate permits
// per second up to Burst. A reservation may take the balance below zero; it
// then waits until the balance is back at zero. Every caller thus pays for
// its own permits, and slots are handed out in the order Redis runs the
// requests, spaced 1/Rate apart.
//
// Most callers want Wait, which reserves and sleeps until the slot. Reserve
// returns the slot without sleeping (to reschedule a job instead), Allow
// takes a permit only if it is free now, Pause stops a key fleet-wide (a
// provider's 429), and Peek reads a key without changing it. The methods
// ending in N (ReserveN, TryReserveN, WaitN, AllowN) and Peek take a
// Request: n permits of a Limit (Single), or a Policy of several limits and
// a Cost per unit, which Reservation.Settle corrects after the call.
//
// Time is Redis server time, so the processes' clocks may disagree; durations
// are exact to the ns, rounded up, and a slot is placed on the local clock by
// an estimate of the server clock's offset, never more than MaxEarly early.
// When Redis is slow or gone, a Limiter paces each key locally on its share
// of the rate and comes back to Redis by itself (see Options). A Limiter is
// safe for concurrent use; all processes that share a Redis and a KeyPrefix
// share the keys. It is created with New; the zero value is not usable.
type Limiter struct {
	opts  Options
	clock Clock
	id    string // this Limiter in the fleet's heartbeat set

	// A call's way, stage by stage (see wait.go), on the keys' states.
	specs  sync.Map     // checking: Limit -> *spec, the compiled one-band policies
	nspecs atomic.Int64 // how many specs holds
	states keyTable     // every key's state: everything the Limiter knows of it (keys.go)
	// store is the local fallback's (local.go): the scripts run there
	// while Redis is unavailable.
	store   *luastore.Store
	sync    clockSync    // 3, placing slots: the server's clock against the local one, with serverTime (place.go)
	sleeper wake.Sleeper // 4: the precise timer

	leased         leaseCounts   // slots leased, handed out, lapsed (lease.go)
	noPrefetch     bool          // leases are not fetched ahead, set by tests (lease_export_test.go)
	localIDs       atomic.Uint64 // local reservations' numbers
	droppedAdjusts atomic.Int64  // pending adjustments dropped (over maxPending)
	anyPending     atomic.Bool   // a key may have pending adjustments (retryPending)
	anyHandback    atomic.Bool   // a key may hold a handback a failed call left (retryHandbacks)
	fairMutant     *redis.Script // a mutant of the fair script, set by tests (export_test.go)

	// The path to Redis (call.go) and its health.
	rdb        redis.UniversalClient
	scripts    redis.Scripter  // where the scripts run: rdb, or onStore
	onStore    *luastore.Store // the keyspace in place of Redis, for package pacertest (onstore.go); nil: Redis
	ownsClient bool            // rdb was made by New (see tunedClient): Close closes it
	serverTime bool
	reload     func()    // asks a Cluster client to reload its slot map
	health     health    // (health.go)
	slow       slowWatch // the patient calls in flight (slowcall.go)
	// local is held (read) by each reservation the local fallback grants,
	// and (write) by recovered as the handback begins (grantLocal).
	local sync.RWMutex

	// The fleet: heartbeats, shares and what is reported to operators.
	fleet    fleetView // (fleet.go)
	presence presence  // a named connection kept open while the Limiter lives (presence.go)
	started  time.Time // when New made it (see heartbeat)
	// format is the state format the fleet writes (1, 2 or 3): the
	// operator's setting (cmd/pacer format), as the last heartbeat read it.
	// Until one says otherwise, the Limiter writes format 2, which the
	// previous release reads (defaultFormat).
	format atomic.Int32
	// cals are the calendar windows of stored limits that a script asked
	// for (PACER_CALENDAR), by key: every call on the key sends their
	// tables from then on. ncals counts the keys (bounded by maxKeys).
	cals  sync.Map // key -> *[]*calendar
	ncals atomic.Int64

	closed     atomic.Bool
	closeOnce  sync.Once
	closeErr   error
	stop       chan struct{}
	done       chan struct{} // closed when loop returns
	listening  chan struct{} // closed when listen returns
	loopCtx    context.Context
	loopCancel context.CancelFunc
}

// New returns a Limiter keeping its keys in rdb, which may be a single
// node, Sentinel (redis.NewFailoverClient) or Cluster client.
//
// pacer needs a client that does not resend commands after a timeout
// (MaxRetries -1: a resent reservation costs the fleet a slot), that
// honours context deadlines (ContextTimeoutEnabled) and that dials once per
// attempt (DialerRetries 1: go-redis's default, 5 dials 100 ms apart,
// outlasts a call and turns a refused connection into a timeout). When rdb
// is not set up that way, which go-redis's defaults are not, New makes a
// client of its own from rdb's options with those three changes, and Close
// closes it; rdb itself is left as it is. That client has none of rdb's
// hooks (go-redis cannot list a client's hooks to copy them): hooks added
// to rdb with AddHook (tracing, logging, metrics) never see pacer's calls.
// To have them see pacer's calls, give New a client with MaxRetries -1,
// ContextTimeoutEnabled true and DialerRetries 1: New then uses rdb
// itself. Other redis.UniversalClient types are refused.
//
// New makes a first heartbeat (bounded by Options.CallTimeout) to learn the
// fleet, warns when the server may evict pacer's keys, and starts a
// background goroutine (heartbeats and, while Redis is down, probes) that
// Close stops. If Redis cannot be reached, New returns the Limiter anyway
// (it paces as Options.FleetSize says until Redis answers), unless
// Options.RequireRedis is set: then New fails with an error that matches
// ErrUnavailable and names the address it tried.
func New(rdb redis.UniversalClient, opts Options) (*Limiter, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	c, owned, err := tunedClient(rdb)
	if err != nil {
		return nil, err
	}
	var sc redis.Scripter = c
	if !opts.DisablePipelining {
		if p := newPipeScripter(c); p != nil {
			sc = p
		}
	}
	l := newLimiter(opts, sc)
	l.rdb, l.ownsClient = c, owned
	if cc, ok := c.(*redis.ClusterClient); ok {
		// After a master fails over, go-redis keeps sending a slot's
		// commands to the dead master until its periodic refresh, which
		// can itself pick the dead node: seconds of refused calls. A
		// failed call asks for a reload (go-redis runs one at a time).
		l.reload = func() { cc.ReloadState(context.Background()) }
	}
	l.loopCtx, l.loopCancel = context.WithCancel(context.Background())

	if err := l.firstHeartbeat(); err != nil && opts.RequireRedis {
		l.loopCancel()
		defer l.stopSlowWatch()
		if owned {
			_ = c.Close()
		}
		return nil, l.startError(rdb, err)
	} else if err == nil {
		l.checkEviction(l.loopCtx)
	} else if errors.Is(err, ErrUnavailable) {
		// It does not know the fleet: it stays off Redis until it has
		// learned it (fleetView.born), pacing locally on FleetSize's share
		// or refusing meanwhile.
		opts.Logger.Warn("pacer: redis unavailable at start (a wrong address? Options.RequireRedis makes New fail instead)",
			"redis", describeClient(rdb), "err", err, "limiter", l.id)
		// Under the view's lock: the first heartbeat's timeout may have
		// started a ping whose verdict heartbeats again (confirm), and
		// applies its reply (fleetView.update) while New goes on here
		// (a data race pacerbench's TestQuick found under -race).
		l.fleet.mu.Lock()
		l.fleet.born = true
		l.fleet.mu.Unlock()
		l.degrade(1, err)
	} else {
		// Redis answered, with an error (a denied command, a key of another
		// type): the heartbeats go on, and the log says why they fail.
		opts.Logger.Warn("pacer: the first heartbeat failed", "err", err, "limiter", l.id)
	}
	go l.loop()
	go l.listen()
	return l, nil
}

// firstHeartbeat is New's heartbeat. One that timed out is no evidence
// that Redis is gone (a loaded machine, a first call that dials and loads
// the script): as for any call, a ping given confirmBudget decides, and
// when Redis answered it the heartbeat goes again, its call timeout grown
// to what the ping took. Twice at most; an error is New's to report.
func (l *Limiter) firstHeartbeat() error {
	err := l.heartbeat(l.loopCtx)
	for i := 0; i < 2 && err != nil && isTimeout(err); i++ {
		ctx, cancel := context.WithTimeout(l.loopCtx, l.confirmBudget()+time.Second)
		up := l.slowNotGone(ctx)
		cancel()
		if !up {
			break
		}
		err = l.heartbeat(l.loopCtx)
	}
	return err
}

// newLimiter returns a Limiter on opts (defaults filled in) whose scripts
// run on sc, with no client and no background goroutine yet: New's and
// newOnStore's common part.
func newLimiter(opts Options, sc redis.Scripter) *Limiter {
	l := &Limiter{
		scripts:   sc,
		opts:      opts,
		clock:     opts.Clock,
		id:        newID(),
		sleeper:   wake.Sleeper{Margin: opts.PreciseWake},
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		listening: make(chan struct{}),
	}
	l.health.wake = make(chan struct{}, 1)
	l.health.kick = make(chan struct{}, 1)
	l.format.Store(defaultFormat)
	l.health.since = time.Now()
	l.started = l.health.since
	l.fleet.id, l.fleet.hint = l.id, opts.FleetSize
	// After an outage, the members Redis does not show yet are kept back
	// until they could have heartbeated again (a probe, then a heartbeat).
	l.fleet.remember = max(3*opts.HeartbeatInterval, 2*opts.ProbeInterval)
	l.fleet.join = opts.ProbeInterval * 3 / 2
	l.fleet.settle = outage.Settle(opts.HeartbeatInterval)
	// A guessed view waits for the heartbeat due within an interval (+10%)
	// and its longest call (maxCallTimeout), and one more interval.
	l.fleet.guessWait = 3*opts.HeartbeatInterval + maxCallTimeout
	// Back from an outage, the others probe back within a ProbeInterval
	// (+25%) and are heard at their next heartbeats.
	l.fleet.backWait = max(l.fleet.guessWait, l.fleet.remember+opts.HeartbeatInterval)
	if l.clock == nil {
		l.clock = systemClockValue
	}
	l.serverTime = !opts.ClientTime
	l.store = l.newStore()
	return l
}

// startError is New's error when the first heartbeat failed and
// Options.RequireRedis is set: it says where rdb points, the cause, and what
// to check.
func (l *Limiter) startError(rdb redis.UniversalClient, err error) error {
	where := describeClient(rdb)
	if errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("reserve: new: cannot reach %s: %w; check the address, that Redis is running there and that this host can reach it (Options.RequireRedis is set)",
			where, l.unavailableErr())
	}
	// Redis answered, with an error: a denied command, a key of another type.
	return fmt.Errorf("reserve: new: %s failed the first heartbeat: %w; check the Redis user's permissions (docs/security.md) and the key prefix (Options.RequireRedis is set)",
		where, err)
}

// Close stops the Limiter's background goroutine, removes it from the
// fleet's heartbeat set (its share goes back to the fleet at once; tried
// also while the Limiter paces locally, within one call's timeout, else
// within a heartbeat's: over 2 s on a Redis that does not answer), makes
// Redis's count of its in-flight seats what its calls left (the seats
// they gave back and the waits they gave up while it paced locally, or
// whose release Redis did not answer; within the same budget again, and
// only when there are any), and closes the client New made for it, if
// any (not the one passed to New). Calls after
// Close return ErrClosed; a Wait already sleeping finishes normally. Close
// is safe to call more than once, from several goroutines: the first does
// the work, and every call returns its result.
func (l *Limiter) Close() error {
	l.closeOnce.Do(func() {
		l.loopCancel()
		defer l.stopSlowWatch()
		close(l.stop)
		<-l.done
		<-l.listening
		// Leave the fleet, also while pacing locally: Redis may answer by
		// now, and a member that stays listed holds its share back from the
		// others until it is found gone. Within a heartbeat's budget, as
		// every heartbeat, on the call timeout the Limiter has learned: a
		// slow machine is not an outage (TestCloseOnSlowRedis). While
		// degraded, within one call's timeout.
		budget := l.probeBudget()
		if l.isDegraded() {
			budget = l.callTimeout()
		}
		l.closeSeats(budget)
		ctx, cancel := context.WithTimeout(context.Background(), budget)
		err := l.leave(context.WithValue(ctx, recoveryKey{}, true))
		cancel()
		if l.isDegraded() {
			err = nil // Redis was unavailable: leaving was worth a try
		}
		l.closed.Store(true)
		if p, ok := l.scripts.(*pipeScripter); ok {
			p.close()
		}
		l.absent()
		if l.ownsClient {
			err = errors.Join(err, l.rdb.Close())
		}
		if err != nil {
			l.closeErr = fmt.Errorf("reserve: close: %w", err)
		}
	})
	return l.closeErr
}

// newID names a Limiter in the heartbeat set: host, process and a random part.
func newID() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d:%08x", host, os.Getpid(), rand.Uint32())
}

// RedisKey returns the Redis key that holds key's state. Braces and '%' in
// key are escaped (%7B, %7D, %25), so that every Redis key of key shares one
// Cluster hash tag and no two keys share a Redis key.
func (l *Limiter) RedisKey(key string) string { return layout.Key(l.opts.KeyPrefix, key) }

// keys returns the Redis keys every script on key starts with: its state
// and its stored limit.
func (l *Limiter) keys(key string, more ...string) []string {
	k := l.RedisKey(key)
	out := make([]string, 0, 2+len(more))
	out = append(out, k, k+":limit")
	for _, m := range more {
		out = append(out, k+m)
	}
	return out
}

// Clock returns the Limiter's clock: Options.Clock, or time.Now as a Clock.
func (l *Limiter) Clock() Clock { return l.clock }

// specOf returns lim compiled as a one-band policy, cached.
func (l *Limiter) specOf(lim Limit) (*spec, error) {
	if s, ok := l.specs.Load(lim); ok {
		return s.(*spec), nil
	}
	s, err := lim.Policy().compile()
	if err != nil {
		return nil, err
	}
	if l.nspecs.Add(1) > 4096 {
		// Limits that keep changing (adaptive pacing) must not grow the
		// cache without bound.
		l.specs.Clear()
		l.nspecs.Store(1)
	}
	l.specs.Store(lim, s)
	return s, nil
}

// checkKey reports an empty key.
func checkKey(key string) error {
	switch key {
	case "":
		return ErrEmptyKey
	case layout.FleetName:
		return ErrReservedKey
	}
	return nil
}
