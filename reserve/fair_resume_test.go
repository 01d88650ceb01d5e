package reserve_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pacer-go/pacer/admin"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
)

// A fair sleeper hears an operator's resume however its reads fare (the
// combination runner, seed 4 beside a CPU hog: a fair Reserve booked
// before an operator's pause, moved after it by its Sleep, fired at the
// pause's old end although the pause had been resumed 10.7 s before; its
// process was frozen when the resume came, and Redis was frozen by CLIENT
// PAUSE when it woke). Each test makes the pause an hour long and gives
// the sleeper a minute after the resume: the old end is never close.

// resumeGrace is how long after the resume a test waits for its sleeper
// before it calls the sleeper deaf (it hears the resume at once).
const resumeGrace = time.Minute

// TestFairSleeperHearsResumeUnread: a sleeper whose slot lies after a
// pause and whose reads of the key fail (Redis frozen) still goes when
// the fleet's event tells its Limiter of the resume. Before, one failed
// read ended its watch (the key's pause counted as unknown, so its slot
// no longer counted as after a pause) and it slept to the check before
// its slot, an hour on; and a resume heard by the event alone did not
// move it, since only a read applied the resume's move.
func TestFairSleeperHearsResumeUnread(t *testing.T) {
	// Mostly waiting, on a server of its own: beside the other parallel
	// tests (the package's time in CI).
	t.Parallel()
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	cli := hookable(t, s)
	lose := &loseReads{lost: make(chan struct{}, 1)}
	cli.AddHook(lose)
	l, err := reserve.New(cli, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	listening(t, s, prefix)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	lim := reserve.Limit{Rate: 0.1, Burst: 1} // a slot every 10 s
	_, err = l.ReserveN(ctx, fair("api", lim, "a"))
	require.NoError(t, err)
	r, err := l.ReserveN(ctx, fair("api", lim, "a")) // 10 s on
	require.NoError(t, err)
	require.NoError(t, a.Pause(ctx, "api", time.Hour, "ops", "the provider is down"))
	oldEnd := time.Now().Add(time.Hour)

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	slept := make(chan error, 1)
	go func() { slept <- r.Sleep(sctx) }()
	// Its check before its slot finds the pause: it takes a slot after it
	// and watches for a resume.
	for r.Time().Before(oldEnd.Add(-time.Minute)) {
		select {
		case err := <-slept:
			t.Fatalf("Sleep returned before it moved after the pause: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// From now on its reads fail: it hears of the resume by the event.
	lose.on.Store(true)
	select {
	case <-lose.lost: // a read of its watch failed
	case err := <-slept:
		t.Fatalf("Sleep returned inside the pause: %v", err)
	case <-time.After(resumeGrace):
		t.Fatal("the sleeper read nothing for a minute after its slot moved after the pause")
	}
	require.NoError(t, a.Resume(ctx, "api", "ops", "the provider is back"))
	stop := time.AfterFunc(resumeGrace, cancel)
	defer stop.Stop()
	require.NoError(t, <-slept, "the sleeper did not go within %v of the resume (the pause had an hour to run)", resumeGrace)
	require.True(t, r.Time().Before(oldEnd.Add(-time.Minute)), "it went at %v, the pause's old end is %v", r.Time(), oldEnd)
}

// TestFairPumpHearsResumeDuringCall: a fair request deferred by a pause
// is served once an operator resumes the key, even when the resume comes
// while the pump's call is on its way back (the call ran before the
// resume and deferred the request to the pause's end). Before, the pump
// took the key's wake channel after the call, the one made by the resume
// it had missed, and slept to the old end.
func TestFairPumpHearsResumeDuringCall(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	cli := hookable(t, s)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)
	var l *reserve.Limiter
	heard := make(chan error, 1)
	h := &afterFairCall{during: func() {
		// The call ran on Redis (the pause deferred its request); the
		// resume comes before its reply is back, and the Limiter hears it.
		if err := a.Resume(ctx, "api", "ops", "the provider is back"); err != nil {
			heard <- err
			return
		}
		for deadline := time.Now().Add(resumeGrace); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if end, _ := l.LearnedPause("api"); end == 0 {
				heard <- nil
				return
			}
		}
		heard <- errors.New("the Limiter never heard of the resume")
	}}
	cli.AddHook(h)
	l, err = reserve.New(cli, reserve.Options{KeyPrefix: prefix, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	listening(t, s, prefix)

	lim := reserve.Limit{Rate: 100, Burst: 1}
	pauseKnown(t, l, a, lim)
	h.armed.Store(true)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.WaitN(wctx, fair("api", lim, "a")) }()
	require.NoError(t, <-heard)
	stop := time.AfterFunc(resumeGrace, cancel)
	defer stop.Stop()
	require.NoError(t, <-done, "the fair Wait was not served within %v of the resume (the pause had an hour to run)", resumeGrace)
}

// hookable returns a client to s that New uses as it is (set up as pacer
// needs it), so that a hook on it sees the Limiter's commands.
func hookable(t *testing.T, s *redistest.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// listening waits until the Limiter made on s with prefix listens to the
// fleet's events (it subscribes once New has returned).
func listening(t *testing.T, s *redistest.Server, prefix string) {
	ch := layout.EventsChannel(prefix)
	require.Eventually(t, func() bool {
		n, err := s.Client.PubSubNumSub(context.Background(), ch).Result()
		return err == nil && n[ch] > 0
	}, resumeGrace, time.Millisecond, "the Limiter never subscribed to %s", ch)
}

// loseReads fails the GETs of the client it hooks while on, as a Redis
// frozen by CLIENT PAUSE or a connection reset would: lost gets a value
// (if it has room) each time.
type loseReads struct {
	passHook
	on   atomic.Bool
	lost chan struct{}
}

func (h *loseReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() && cmd.Name() == "get" {
			select {
			case h.lost <- struct{}{}:
			default:
			}
			err := errors.New("test: the read was lost")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// afterFairCall runs during, once armed, after a call of the fair script
// has run on Redis and before its reply reaches the caller.
type afterFairCall struct {
	passHook
	armed  atomic.Bool
	during func()
}

func (h *afterFairCall) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && isFairCall(cmd) && h.armed.CompareAndSwap(true, false) {
			h.during()
		}
		return err
	}
}

// isFairCall reports whether cmd runs the fair script (its KEYS name the
// key's fair hash).
func isFairCall(cmd redis.Cmder) bool {
	if n := cmd.Name(); n != "evalsha" && n != "eval" {
		return false
	}
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.HasSuffix(s, ":fair") {
			return true
		}
	}
	return false
}

// TestFairPumpAsksRedisAfterOutage: a fair request the local fallback
// deferred to a pause it still holds (its store started from the key's
// state with the operator's pause; Redis's resume reached the Limiter by
// the event, not the store) is asked for on Redis once Redis answers
// again, and is served there: neither the store's pause nor the retry it
// gave holds it to the pause's old end. Before, the pump slept to that
// retry (the combination runner, seed 4 beside a CPU hog, after the first
// fix: fair requests of a process frozen across the resume, then paced
// locally while Redis was frozen, were served at the old end), and the
// handback gave Redis the store's pause again, undoing the resume.
func TestFairPumpAsksRedisAfterOutage(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	cli := hookable(t, s)
	down := &failAll{}
	cli.AddHook(down)
	m := &deferrals{ch: make(chan struct{}, 16)}
	l, err := reserve.New(cli, reserve.Options{KeyPrefix: prefix, FailAfter: 1, HeartbeatInterval: 50 * time.Millisecond,
		ProbeInterval: 50 * time.Millisecond, Metrics: m, Logger: quiet})
	require.NoError(t, err)
	closeLimiter(t, l)
	listening(t, s, prefix)
	a, err := admin.New(s.Client, admin.Options{KeyPrefix: prefix})
	require.NoError(t, err)

	lim := reserve.Limit{Rate: 100, Burst: 1}
	pauseKnown(t, l, a, lim)

	// Redis fails for the Limiter (its events still come): the fair
	// request goes to the local fallback, which defers it to the pause.
	down.on.Store(true)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.WaitN(wctx, fair("api", lim, "a")) }()
	deferred := func(what string) {
		select {
		case <-m.ch:
		case err := <-done:
			t.Fatalf("the fair Wait returned before %s: %v", what, err)
		case <-time.After(resumeGrace):
			t.Fatalf("no deferral: %s", what)
		}
	}
	deferred("the local fallback deferred it to the pause")
	require.True(t, l.Degraded())
	// The operator resumes the key: the Limiter hears it and asks again;
	// the local fallback, which still holds the pause, defers it again.
	require.NoError(t, a.Resume(ctx, "api", "ops", "the provider is back"))
	deferred("the local fallback deferred it again after the resume")
	end, _ := l.LearnedPause("api")
	require.Zero(t, end, "the Limiter did not hear of the resume")

	// Redis answers again.
	down.on.Store(false)
	backOnRedis(t, l)
	stop := time.AfterFunc(resumeGrace, cancel)
	defer stop.Stop()
	require.NoError(t, <-done, "the fair Wait was not served within %v of Redis's return (the pause had an hour to run)", resumeGrace)
	ttl, err := s.Client.PTTL(ctx, l.RedisKey("api")).Result()
	require.NoError(t, err)
	paused, err := l.Peek(ctx, reserve.Single("api", lim, 1))
	require.NoError(t, err)
	require.Zero(t, paused.Paused, "the key is paused on Redis again (time to live %v)", ttl)
}

// failAll fails every command of the client it hooks while on (not the
// messages of its subscriptions), as a Redis that refuses the calls.
type failAll struct {
	passHook
	on atomic.Bool
}

func (h *failAll) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.on.Load() {
			err := errors.New("test: Redis refused")
			for _, c := range cmds {
				c.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

func (h *failAll) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			err := errors.New("test: Redis refused")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// deferrals counts the fair requests deferred (FairMetrics), on ch.
type deferrals struct {
	noMetrics
	ch chan struct{}
}

func (m *deferrals) Turn(string, string, reserve.Lane, time.Duration) {}

func (m *deferrals) Deferred(string, string, reserve.Lane) {
	select {
	case m.ch <- struct{}{}:
	default:
	}
}

// pauseKnown makes key "api" known to l at lim, has the operator pause it
// for an hour, and waits until l has heard of the pause.
func pauseKnown(t *testing.T, l *reserve.Limiter, a *admin.Client, lim reserve.Limit) {
	t.Helper()
	ctx := context.Background()
	_, err := l.Reserve(ctx, "api", lim)
	require.NoError(t, err)
	require.NoError(t, a.Pause(ctx, "api", time.Hour, "ops", "the provider is down"))
	require.Eventually(t, func() bool { end, _ := l.LearnedPause("api"); return end != 0 },
		resumeGrace, time.Millisecond, "the Limiter never heard of the pause")
}
