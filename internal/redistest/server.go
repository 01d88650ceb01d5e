package redistest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Values of Server.Source, and the sources report names.
const (
	SourceURL       = "REDIS_URL"      // the server named by $REDIS_URL
	SourceProcess   = "redis-server"   // a redis-server process from PATH
	SourceContainer = "testcontainers" // a container started by testcontainers-go
	SourceMiniredis = "miniredis"      // NewMiniredis (never a Server's Source)
)

// pingTimeout bounds the PING that checks a client before it is handed out.
const pingTimeout = 5 * time.Second

// Server is a Redis server a test can use.
type Server struct {
	Addr   string        // host:port
	URL    string        // redis://host:port/db, usable by child processes
	Source string        // SourceURL, SourceProcess or SourceContainer
	Client *redis.Client // ready (PING ok), closed on t.Cleanup

	opts  *redis.Options    // how to reach the server; copied by NewClient
	proc  *redisproc.Server // set when Source is SourceProcess
	check *FullCheck        // the check its clients run under, if any (RunFullCheck)
}

// New returns a real Redis for t, found in this order:
//  1. REDIS_URL if set (redis.ParseURL); shared server, never flushed.
//  2. a throwaway redis-server from PATH on a free 127.0.0.1 port
//     (--save "" --appendonly no, own temporary --dir), stopped on t.Cleanup.
//  3. testcontainers-go's redis module (image "redis:7") when a Docker engine
//     is reachable; terminated on cleanup.
//  4. otherwise t.Skip with the reason, except when the CI environment
//     variable is non-empty, where it is t.Fatal.
//
// A REDIS_URL that does not answer, or a redis-server that is on PATH but
// will not start, fails the test rather than falling through.
func New(t testing.TB) *Server {
	t.Helper()
	if s := checked(t); s != nil {
		return s
	}
	if url := os.Getenv("REDIS_URL"); url != "" {
		return fromURL(t, url)
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		return newProcess(t, bin)
	}
	err := dockerAvailable()
	if err == nil {
		return newContainer(t)
	}
	unavailable(t, "no Redis: REDIS_URL is unset, redis-server is not on PATH, and %v", err)
	return nil // not reached: unavailable skips or fails
}

// NewPreferContainer returns a redis:7 container started with
// testcontainers-go when a Docker engine answers, even if REDIS_URL is set
// or redis-server is on PATH; otherwise it returns what [New] finds, in New's
// order (so without Docker it passes, skips or fails exactly as New does).
// The Docker probe is New's: asked once per test binary, never with
// REDISTEST_DOCKER=0. With REDISTEST_DOCKER=require (which .ci/run sets when
// it has a Docker engine), a missing engine fails the test instead: the
// container path provably ran. Use it where a test should run against a
// stock Redis image whenever it can, such as the end-to-end tests of the
// examples. As with New, child processes reach the server through Addr or
// URL.
func NewPreferContainer(t testing.TB) *Server {
	t.Helper()
	err := dockerAvailable()
	if err == nil {
		return newContainer(t)
	}
	if containerRequired() {
		t.Fatalf("redistest: REDISTEST_DOCKER=require is set, but %v", err)
	}
	return New(t)
}

// NewProcess returns a throwaway redis-server started from PATH, whatever
// REDIS_URL says: for tests that need a server of their own, for example to
// stop or pause it. Without redis-server it skips, or fails when CI is set.
func NewProcess(t testing.TB) *Server {
	t.Helper()
	if s := checked(t); s != nil {
		return s
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not on PATH: %v", err)
	}
	return newProcess(t, bin)
}

// NewClient returns another client to the same server, closed on t.Cleanup.
func (s *Server) NewClient(t testing.TB) *redis.Client {
	t.Helper()
	opts := *s.opts
	c := newClient(t, &opts, s.Source)
	if s.check != nil {
		c.AddHook(s.check)
	}
	return c
}

// TunedClient is NewClient with the options reserve.New uses as they are
// (no retries, the context's deadline on reads, one dial): a hook added to
// it sees a Limiter's commands, where from any other client reserve.New
// makes one of its own.
func (s *Server) TunedClient(t testing.TB) *redis.Client {
	t.Helper()
	opts := *s.opts
	opts.MaxRetries, opts.ContextTimeoutEnabled, opts.DialerRetries = -1, true, 1
	c := newClient(t, &opts, s.Source)
	if s.check != nil {
		c.AddHook(s.check)
	}
	return c
}

func fromURL(t testing.TB, url string) *Server {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: REDIS_URL: %v", err)
	}
	report(t, SourceURL, "server", opts.Addr)
	return &Server{
		Addr:   opts.Addr,
		URL:    url,
		Source: SourceURL,
		Client: newClient(t, opts, "REDIS_URL"),
		opts:   opts,
	}
}

func newProcess(t testing.TB, bin string) *Server {
	t.Helper()
	p := startServer(t, redisproc.Spec{Bin: bin}, "")
	opts := &redis.Options{Addr: p.Addr()}
	report(t, SourceProcess, "server", p.Addr())
	return &Server{
		Addr:   p.Addr(),
		URL:    p.URL(),
		Source: SourceProcess,
		Client: newClient(t, opts, bin),
		opts:   opts,
		proc:   p,
	}
}

// startServer starts a redis-server for sp (see package redisproc) and
// closes it on t.Cleanup, or fails t, saying what failed to start (role,
// if not empty).
func startServer(t testing.TB, sp redisproc.Spec, role string) *redisproc.Server {
	t.Helper()
	p, err := redisproc.Start(sp)
	if err != nil {
		if role != "" {
			t.Fatalf("redistest: %s: %v", role, err)
		}
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

// newClient returns a client for opts that has answered PING, closed on
// t.Cleanup. source says where the server came from, for the error message.
func newClient(t testing.TB, opts *redis.Options, source string) *redis.Client {
	t.Helper()
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("redistest: PING %s (from %s): %v", opts.Addr, source, err)
	}
	return c
}

// unavailable skips t because Redis cannot be had, or fails it when the CI
// environment variable is non-empty: on CI a missing Redis is a broken
// setup, not a reason to pass silently.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if ci := os.Getenv("CI"); ci != "" {
		t.Fatalf("redistest: %s (CI=%q is set, so this is a failure, not a skip)", msg, ci)
	}
	t.Skipf("redistest: %s", msg)
}

// report says where t's Redis came from (source) and what it is (kind:
// server, cluster, sentinel): in t's log, and, when REDISTEST_REPORT names
// a file, in a line appended to it, "<test binary> <test> <source> <kind>
// <addr>", which .ci/run sums up after the tests.
func report(t testing.TB, source, kind, addr string) {
	t.Helper()
	t.Logf("redistest: a %s from %s at %s", kind, source, addr)
	path := os.Getenv("REDISTEST_REPORT")
	if path == "" {
		return
	}
	line := fmt.Sprintf("%s %s %s %s %s\n", filepath.Base(os.Args[0]), t.Name(), source, kind, addr)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, err = f.WriteString(line) // one write: lines from parallel tests stay whole
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Errorf("redistest: REDISTEST_REPORT: %v", err)
	}
}

// Prefix returns a fresh random key prefix for t, like "pacertest:1a2b3c4d:",
// so that tests sharing a REDIS_URL server never touch each other's keys.
func Prefix(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "pacertest:" + hex.EncodeToString(b[:]) + ":"
}
