// Package asynqtest runs real asynq servers on a real Redis for tests, and
// measures what a paced fleet did: when the provider was called, how many
// handlers slept at once.
//
// Each Env has its own queue name, so tests sharing a Redis (REDIS_URL)
// never see each other's tasks, and only one test on the machine holds an
// Env at a time, so their timings do not disturb each other. Servers, clients and inspectors are shut
// down or closed on t.Cleanup.
package asynqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/pacer-go/pacer/internal/redistest"
)

// Env is a Redis and a queue for asynq.
type Env struct {
	Redis *redistest.Server
	Conn  asynq.RedisConnOpt
	Queue string // a fresh queue name, "pacertest-<hex>"
}

// New returns an Env on a real Redis (redistest.New). Only one test on the
// machine holds an Env at a time (see lockMachine); the others wait.
func New(t testing.TB) *Env {
	t.Helper()
	lockMachine(t) // first, so that it is released after everything else
	s := redistest.New(t)
	conn, err := asynq.ParseRedisURI(s.URL)
	if err != nil {
		t.Fatalf("asynqtest: %v", err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Env{Redis: s, Conn: conn, Queue: "pacertest-" + hex.EncodeToString(b[:])}
}

// Start starts an asynq server on e's queue with cfg (Queues and Logger are
// set here) running h, and shuts it down on t.Cleanup. Errors and warnings
// asynq logs go to t.Log while the test runs.
func (e *Env) Start(t testing.TB, cfg asynq.Config, h asynq.Handler) *asynq.Server {
	t.Helper()
	cfg.Queues = map[string]int{e.Queue: 1}
	lg := &logger{t: t}
	cfg.Logger = lg
	cfg.LogLevel = asynq.WarnLevel
	srv := asynq.NewServer(e.Conn, cfg)
	if err := srv.Start(h); err != nil {
		t.Fatalf("asynqtest: start server: %v", err)
	}
	t.Cleanup(func() {
		srv.Shutdown()
		lg.close()
	})
	return srv
}

// Client returns an asynq client, closed on t.Cleanup.
func (e *Env) Client(t testing.TB) *asynq.Client {
	t.Helper()
	c := asynq.NewClient(e.Conn)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Inspector returns an asynq inspector, closed on t.Cleanup.
func (e *Env) Inspector(t testing.TB) *asynq.Inspector {
	t.Helper()
	i := asynq.NewInspector(e.Conn)
	t.Cleanup(func() { _ = i.Close() })
	return i
}

// QueueInfo returns the state counts of e's queue.
func (e *Env) QueueInfo(t testing.TB, i *asynq.Inspector) *asynq.QueueInfo {
	t.Helper()
	q, err := i.GetQueueInfo(e.Queue)
	if err != nil {
		t.Fatalf("asynqtest: queue info: %v", err)
	}
	return q
}

// logger sends asynq's log lines to t.Log until closed (t.Log must not be
// called once the test is over).
type logger struct {
	mu     sync.Mutex
	t      testing.TB
	closed bool
}

func (l *logger) log(level string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.t.Log(append([]any{"asynq " + level + ":"}, args...)...)
	}
}

func (l *logger) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
}

func (l *logger) Debug(args ...any) {}
func (l *logger) Info(args ...any)  {}
func (l *logger) Warn(args ...any)  { l.log("warn", args...) }
func (l *logger) Error(args ...any) { l.log("error", args...) }
func (l *logger) Fatal(args ...any) { l.log("fatal", args...) }

// WaitFor polls cond every 50 ms until it is true or timeout passes, and
// reports whether it became true.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-tick.C:
		}
	}
}

// LockMachine makes t the only test on the machine holding an Env (or this
// lock) until it ends, as New does: for tests that run asynq servers on a
// Redis of their own.
func LockMachine(t testing.TB) {
	t.Helper()
	lockMachine(t)
}
