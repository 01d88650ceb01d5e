package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// coldChildEnv carries a cold child's job (see package internal/fleet).
const coldChildEnv = "PACERBENCH_COLD_CHILD"

// coldProfileEnv, when set to a directory, has each cold child write a CPU
// profile of its run there (cold-<limiter>-<shape>-<index>.pprof, e.g.
// cold-pacer-quick-start-client-none-waiting-0.pprof), for go tool pprof:
// pacerbench -phases cold -only ... with it set in the environment.
const coldProfileEnv = "PACERBENCH_COLD_PROFILE"

// coldJob is what each process of the cold phase is told; its share of
// the keys follows from its index (fleetproc.Index).
type coldJob struct {
	Variant  string // one of coldVariants
	RedisURL string
	Keys     int // the fleet's keys, "cold:0" ... "cold:<Keys-1>"
	Procs    int
	Chunk    int // keys per goroutine
	// KeepGoing counts a failed wait and goes on to the goroutine's next
	// key after a 10 ms pause (the loaded phase), instead of failing the
	// process.
	KeepGoing bool
	// Shape is how the keys are called (coldShapes); "" is coldAtLimit.
	Shape string
}

// coldEnd is a cold child's last line.
type coldEnd struct {
	Admissions int64
	CPU        time.Duration    // user + system over the run
	Fallbacks  int64            // pacer's switches to local pacing, from New on
	Ops        map[string]int64 // pacer's Redis calls by operation (Metrics.RedisCall)
	Sent       sent             // what the counted client sent (redis_rate, tuned pacer)
	Errors     int64            // failed waits (KeepGoing)
	FirstError string           // the first one's text
	Failed     int64            // pacer's Redis calls that failed (Metrics.RedisCall with an error), from New on
	Local      int64            // pacer's reservations granted locally, over the run
	// WarmErrors is the warm-up's failed waits, before the run
	// (KeepGoing), WarmFirstError the first one's text.
	WarmErrors     int64
	WarmFirstError string
	CloseError     string // Close's error, after the run: reported, not fatal
}

// coldMetrics is pacerCounts, also counting pacer's Redis calls by
// operation ("reserve", "check", "heartbeat", ...): the same figures
// whatever client pacer talks through.
type coldMetrics struct {
	*pacerCounts
	mu     sync.Mutex
	ops    map[string]int64
	failed int64
}

func (m *coldMetrics) RedisCall(op string, _ time.Duration, err error) {
	m.mu.Lock()
	m.ops[op]++
	if err != nil {
		m.failed++
	}
	m.mu.Unlock()
}

// take returns the calls counted since the last take.
func (m *coldMetrics) take() map[string]int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	ops := m.ops
	m.ops = map[string]int64{}
	return ops
}

// failures returns how many Redis calls failed, from New on.
func (m *coldMetrics) failures() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// runAsColdChild runs this process as one process of the cold phase, if it
// is one, and returns its exit code and true.
func runAsColdChild() (code int, isChild bool) {
	return runChild(coldChildEnv, "pacerbench cold child", coldChild)
}

// openCold opens j's limiter on the keys' limit: pacer on the client
// README's quick start builds, or on newClient's; or redis_rate on
// newClient's. count counts what newClient's client sends.
func openCold(j coldJob, goroutines int, count *counter, m *coldMetrics) (limiter, func(), error) {
	kl := shapeOf(j.Shape).limit
	lim := reserve.Limit{Rate: kl.Rate, Burst: kl.Burst}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if j.Variant == coldQuickStart {
		u, err := redis.ParseURL(j.RedisURL)
		if err != nil {
			return nil, nil, err
		}
		// As README's quick start: go-redis's defaults, which New copies
		// into a client of its own set up as pacer needs.
		rdb := redis.NewClient(&redis.Options{Addr: u.Addr})
		l, err := reserve.New(rdb, reserve.Options{RequireRedis: true, Logger: log, Metrics: m})
		if err != nil {
			rdb.Close()
			return nil, nil, err
		}
		p := &pacerLimiter{l: l, own: rdb, lim: lim}
		return p, func() {}, nil
	}
	rdb, err := newClient(j.RedisURL, goroutines, count)
	if err != nil {
		return nil, nil, err
	}
	if err := dial(context.Background(), rdb, goroutines); err != nil {
		rdb.Close()
		return nil, nil, err
	}
	done := func() { rdb.Close() }
	if j.Variant == coldGCRA {
		return &redisRate{l: redis_rate.NewLimiter(rdb), lim: gcraLimit(kl)}, done, nil
	}
	l, err := reserve.New(rdb, reserve.Options{RequireRedis: true, Logger: log, Metrics: m})
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return &pacerLimiter{l: l, lim: lim}, done, nil
}

// coldChild is one process of the cold phase: its share of the keys in
// chunks of j.Chunk, a goroutine per chunk looping over its keys with a
// wait on each (so each key is called at its limit, 1/s), from the start to
// the end read from stdin; its last line "end <coldEnd as JSON>".
func coldChild(j coldJob) error {
	i := fleetproc.Index()
	if i < 0 || i >= j.Procs {
		return fmt.Errorf("fleet index %d of %d", i, j.Procs)
	}
	first, last := i*j.Keys/j.Procs, (i+1)*j.Keys/j.Procs
	var chunks [][]string
	for k := first; k < last; k += j.Chunk {
		var keys []string
		for n := k; n < min(k+j.Chunk, last); n++ {
			keys = append(keys, coldKey(n))
		}
		chunks = append(chunks, keys)
	}
	count := newCounter()
	m := &coldMetrics{pacerCounts: &pacerCounts{}, ops: map[string]int64{}}
	l, done, err := openCold(j, len(chunks), count, m)
	if err != nil {
		return err
	}
	defer done()
	defer l.close()
	// Warm up on keys of this process's own: connections, scripts.
	warm := "warmup:" + strconv.Itoa(os.Getpid()) + ":"
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for g := range chunks {
		wg.Go(func() { errs[g] = l.wait(context.Background(), warm+strconv.Itoa(g)) })
	}
	wg.Wait()
	var warmErrors int64
	warmFirst := ""
	for _, err := range errs {
		if err != nil && j.KeepGoing {
			// Counted, not fatal: the phase reports it.
			if warmErrors++; warmFirst == "" {
				warmFirst = strings.Join(strings.Fields(err.Error()), " ")
			}
		}
	}
	if err := firstErr(errs); err != nil && !j.KeepGoing {
		return fmt.Errorf("warm-up: %w", err)
	}
	errs = make([]error, len(chunks))
	end, err := readyToStart()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	if dir := os.Getenv(coldProfileEnv); dir != "" {
		// A CPU profile of the run, per process, for go tool pprof.
		stop, err := startCPUProfile(dir, fmt.Sprintf("cold-%s-%s-%d.pprof", fileSlug(j.Variant), fileSlug(j.Shape), i))
		if err != nil {
			return err
		}
		defer stop()
	}
	count.take()
	m.take()
	cpu0 := cpuTime()
	local0 := m.local.Load()
	var (
		admissions, failures atomic.Int64
		firstFailure         atomic.Pointer[string]
	)
	if shape := shapeOf(j.Shape); shape.paced {
		for g, keys := range chunks {
			wg.Go(func() {
				n, err := coldPaced(ctx, l, keys, first+g*j.Chunk, shape.pairs, end, j.KeepGoing, &failures, &firstFailure)
				admissions.Add(n)
				errs[g] = err
			})
		}
	}
	for g, keys := range chunks {
		if shapeOf(j.Shape).paced {
			break
		}
		wg.Go(func() {
			n := int64(0)
			defer func() { admissions.Add(n) }()
			for {
				for _, key := range keys {
					if err := l.wait(ctx, key); err != nil {
						if endOfRun(ctx, err) {
							return
						}
						if !j.KeepGoing {
							errs[g] = err
							return
						}
						if failures.Add(1) == 1 {
							text := strings.Join(strings.Fields(err.Error()), " ")
							firstFailure.Store(&text)
						}
						if sleep(ctx, 10*time.Millisecond) != nil {
							return
						}
						continue
					}
					if !time.Now().Before(end) {
						return
					}
					n++
				}
			}
		})
	}
	wg.Wait()
	// Counted: what the run cost, up to its end, not Close's leave.
	last2 := coldEnd{Admissions: admissions.Load(), CPU: cpuTime() - cpu0, Fallbacks: m.fallbacks.Load(), Ops: m.take(), Sent: count.take(),
		Errors: failures.Load(), Failed: m.failures(), WarmErrors: warmErrors, WarmFirstError: warmFirst,
		Local: m.local.Load() - local0}
	if p := firstFailure.Load(); p != nil {
		last2.FirstError = *p
	}
	if err := firstErr(errs); err != nil {
		return err
	}
	if err := l.close(); err != nil {
		// The run's figures are taken; Close's leave may time out on a
		// loaded machine (its CallTimeout), which they do not depend on.
		fmt.Fprintf(os.Stderr, "pacerbench cold child: %v\n", err)
		last2.CloseError = err.Error()
	}
	js, err := json.Marshal(last2)
	if err != nil {
		return err
	}
	fmt.Printf("end %s\n", js)
	return nil
}

// coldKey is the n-th key of the cold phase.
func coldKey(n int) string { return "cold:" + strconv.Itoa(n) }

// coldPaced calls keys (the n-th being the fleet's key number base+n) on
// a schedule of their own, one call each per second, spread evenly over
// the second, until end: the caller's schedule, not the limiter's. With
// pairs, the keys of even numbers are called twice in a row every other
// second instead of once a second (half of them in even rounds, half in
// odd), so that a quarter of the calls (the second of a pair) wait for
// their slot; the waiting call runs on a goroutine of its own, leaving
// the schedule on time. It returns the admissions that ended before end,
// and with !keepGoing the first failed wait.
func coldPaced(ctx context.Context, l limiter, keys []string, base int, pairs bool, end time.Time,
	keepGoing bool, failures *atomic.Int64, firstFailure *atomic.Pointer[string]) (int64, error) {
	var (
		n        atomic.Int64
		failed   atomic.Pointer[error]
		inflight sync.WaitGroup
	)
	defer inflight.Wait()
	call := func(key string) {
		if err := l.wait(ctx, key); err != nil {
			if endOfRun(ctx, err) {
				return
			}
			if !keepGoing {
				failed.CompareAndSwap(nil, &err)
				return
			}
			if failures.Add(1) == 1 {
				text := strings.Join(strings.Fields(err.Error()), " ")
				firstFailure.Store(&text)
			}
			return
		}
		if time.Now().Before(end) {
			n.Add(1)
		}
	}
	step := time.Second / time.Duration(len(keys))
	// Each goroutine starts at its own offset within the step.
	next := time.Now().Add(rand.N(step))
	for round := 0; ; round++ {
		for i, key := range keys {
			if sleep(ctx, time.Until(next)) != nil || !time.Now().Before(end) || failed.Load() != nil {
				inflight.Wait()
				if p := failed.Load(); p != nil {
					return n.Load(), *p
				}
				return n.Load(), nil
			}
			next = next.Add(step)
			switch k := base + i; {
			case !pairs || k%2 == 1:
				call(key)
			case (k/2+round)%2 == 0:
				// A pair: the second waits for the slot after the first's.
				call(key)
				inflight.Go(func() { call(key) })
			}
		}
	}
}

// fileSlug makes a limiter's or a shape's name part of a file name:
// "pacer, quick-start client" is "pacer-quick-start-client", "redis_rate
// (GCRA)" "redis_rate-GCRA", "" "".
func fileSlug(name string) string {
	return strings.Join(strings.FieldsFunc(name, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}), "-")
}
