package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/internal/syncbuf"
)

// TestMain runs a worker process's share when the test binary is re-run as
// one (see fleet).
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := childMain(); err != nil {
			log.Fatal(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// small is a short crawl: 3 hosts x 40 pages at 20/s per host, about 2 s.
func small(redisURL string, providerLimit int) config {
	return config{RedisURL: redisURL, Hosts: 3, Pages: 40, Workers: 16, Rate: 20, Burst: 1, ProviderLimit: providerLimit}
}

// check asserts what the provider saw, as far as a busy machine cannot
// change it: every page fetched once (a 429, if any, paused its host and
// the page was fetched again). Not zero 429s, which a quiet machine sees:
// the provider allows exactly rate + burst calls in any second, so a call
// that reaches it more than a slot late, from a process stalled after its
// slot, is refused (integration's checkPaced says more). Nor the busiest
// second, which the provider itself keeps within its limit. The slots are
// judged exactly by the combination runner.
func check(t *testing.T, s summary, c config) {
	t.Helper()
	t.Log(s)
	if s.Rejected != 0 {
		t.Logf("%d of %d calls refused: a call reached the provider more than a slot late (a busy machine)", s.Rejected, s.Calls)
	}
	if want := c.Hosts * c.Pages; s.Calls-s.Rejected != want {
		t.Errorf("calls - rejected = %d - %d, want every page once (%d)", s.Calls, s.Rejected, want)
	}
}

// TestEmbedded is the demo with no flags but -plot: the embedded Redis.
func TestEmbedded(t *testing.T) {
	c := small("", 21)
	c.Plot = filepath.Join(t.TempDir(), "calls.svg")
	s, err := run(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, c)
	svg, err := os.ReadFile(c.Plot)
	if err != nil {
		t.Fatalf("-plot: %v", err)
	}
	if !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("h2.example (40 calls)")) {
		t.Errorf("-plot wrote %d bytes without the chart of the 3 hosts", len(svg))
	}
}

// TestRealRedis is the demo with -redis.
func TestRealRedis(t *testing.T) {
	srv := redistest.New(t)
	c := small(srv.URL, 21)
	s, err := run(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, c)
}

// TestRedisHostPort: -redis takes a bare host:port too.
func TestRedisHostPort(t *testing.T) {
	srv := redistest.New(t)
	c := small(srv.Addr, 21)
	s, err := run(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, c)
}

// TestProviderBelowLimit: a provider 10% below pacer's limit must answer
// 429s, or the checks above could not fail. Each 429 pauses the host for the
// fleet, and every page is still fetched.
func TestProviderBelowLimit(t *testing.T) {
	c := small("", 18)
	s, err := run(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(s)
	if s.Rejected == 0 {
		t.Error("no 429 from a provider 10% below the limit")
	}
	if want := c.Hosts * c.Pages; s.Calls-s.Rejected != want {
		t.Errorf("accepted = %d, want every page (%d)", s.Calls-s.Rejected, want)
	}
}

// TestProcs is the fleet: 4 worker processes (this test binary, re-run) of
// 4 goroutines each share the per-host limit through a real Redis.
func TestProcs(t *testing.T) {
	srv := redistest.New(t)
	c := small(srv.URL, 21)
	c.Procs, c.Workers = 4, 4
	s, err := run(context.Background(), c, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, c)
}

// TestAdaptive: with the provider's limit hidden, 2 processes learn it from
// its 429s (which pause each host fleet-wide and are retried), the
// provider's limit changes midway, and every page is fetched exactly once.
// How fast the fleet converges is timing: `go run ./examples/crawler
// -adaptive` measures it (docs/demos.md).
func TestAdaptive(t *testing.T) {
	srv := redistest.New(t)
	c := small(srv.URL, 21)
	c.Adaptive, c.Start, c.Procs, c.Workers = true, 5, 2, 8
	c.ChangeAt, c.ChangeTo = time.Second, 10
	var out syncbuf.Buffer
	s, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Logf("%s\n%s", s, out.String())
	if want := c.Hosts * c.Pages; s.Calls-s.Rejected != want {
		t.Errorf("accepted = %d, want every page once (%d)", s.Calls-s.Rejected, want)
	}
	if text := out.String(); !strings.Contains(text, "the provider's limit is now 10 per host") || !strings.Contains(text, "learning: refused") {
		t.Errorf("the run did not report the change and the learning:\n%s", text)
	}
}
