package main

import (
	"context"
	"log"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/internal/syncbuf"
)

// TestMain runs a worker process when the test binary is re-run as one.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := childMain(); err != nil {
			log.Fatal(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// small is a short crawl: 2 hosts x 150 pages, 3 processes of 4 workers,
// the first killed after 1 s: enough pages left, on any machine, for the
// killed worker's seats to be seen back before the crawl ends.
func small(redisURL string) config {
	return config{RedisURL: redisURL, Hosts: 2, Pages: 150, Procs: 3, Workers: 4, Conns: 4, Rate: 20, KillAt: time.Second, Seed: 1}
}

// check asserts what holds exactly, whatever the machine's load: the
// provider refused no call beyond 4 open; no host's slots went over 20/s
// burst 1 in any second; the killed worker lost at most the pages its
// workers had taken; every other page was fetched; and each seat it held
// came back to the fleet (4 calls open again on its host) before the end.
func check(t *testing.T, s summary, c config, out string) {
	t.Helper()
	t.Log(s)
	if s.Refused != 0 || s.MostOpen > c.Conns {
		t.Errorf("the provider refused %d calls, most open %d; want 0, at most %d", s.Refused, s.MostOpen, c.Conns)
	}
	if s.Busiest1s > 1+int(c.Rate) {
		t.Errorf("busiest second %d slots, want at most %d", s.Busiest1s, 1+int(c.Rate))
	}
	if s.Pages != c.Hosts*c.Pages || s.Lost < s.MidCall || s.Lost > c.Workers || s.MidCall < 1 {
		t.Errorf("pages %d, lost %d, mid-call %d; want %d pages, 1 to %d mid-call, at most %d lost", s.Pages, s.Lost, s.MidCall, c.Hosts*c.Pages, c.Workers, c.Workers)
	}
	if s.HeldHosts < 1 || len(s.SeatsBack) != s.HeldHosts {
		t.Errorf("seats back on %d of the %d hosts the killed worker held; want all\n%s", len(s.SeatsBack), s.HeldHosts, out)
	}
	if !strings.Contains(out, "killed worker process 1") || strings.Count(out, "came back") != s.HeldHosts {
		t.Errorf("output does not tell the kill and each seat back:\n%s", out)
	}
}

// TestEmbedded is the demo with no -redis: the embedded Redis.
func TestEmbedded(t *testing.T) {
	c := small("")
	var out syncbuf.Buffer
	s, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, c, out.String())
	if !strings.Contains(out.String(), "SilentHold") {
		t.Errorf("the embedded run does not say it sets SilentHold:\n%s", out.String())
	}
}

// TestRealRedis is the demo with -redis: a redis-server, whose CLIENT
// LIST tells the fleet a killed process is gone.
func TestRealRedis(t *testing.T) {
	srv := redistest.New(t)
	c := small(srv.URL)
	var out syncbuf.Buffer
	s, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatal(err)
	}
	check(t, s, c, out.String())
}

// TestBadInput: bad flags fail before anything starts.
func TestBadInput(t *testing.T) {
	for _, c := range []config{
		{Hosts: 0, Pages: 1, Procs: 2, Workers: 1, Conns: 1, Rate: 1},
		{Hosts: 1, Pages: 1, Procs: 1, Workers: 1, Conns: 1, Rate: 1},
		{Hosts: 1, Pages: 1, Procs: 2, Workers: 1, Conns: 0, Rate: 1},
		{Hosts: 1, Pages: 1, Procs: 2, Workers: 1, Conns: 1, Rate: 0},
		{Hosts: 1, Pages: 1, Procs: 2, Workers: 1, Conns: 1, Rate: 1, KillAt: -time.Second},
	} {
		var out syncbuf.Buffer
		if _, err := run(context.Background(), c, &out); err == nil || out.String() != "" {
			t.Errorf("run(%+v): %v, printed %q; want an error and nothing printed", c, err, out.String())
		}
	}
}
