package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestMain runs a worker process when the test binary is re-run as one.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		if err := childMain(os.Stdout); err != nil {
			log.Fatal(err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// short is a run of 3 s at a quota the fleet saturates: 300,000 tokens per
// minute (5,000/s) against calls of 50 to 450 tokens from 8 workers.
func short(redisURL, mode string, procs int) config {
	return config{RedisURL: redisURL, RPM: 6000, TPM: 300_000, Tokens: 250, Error: 0.5, Reserve: mode,
		Procs: procs, Workers: 8 / procs, Duration: 3 * time.Second, Latency: 50 * time.Millisecond, Seed: 7}
}

// check asserts what holds whatever the machine's load: calls were made,
// the provider refused none (its buckets hold a minute of quota, pacer's
// burst a second and the tokens of 8 calls in flight), and the tokens the
// workers settled are exactly the tokens the provider charged.
func check(t *testing.T, s summary) {
	t.Helper()
	t.Log(s)
	if s.Calls == 0 {
		t.Fatal("no calls")
	}
	if s.Rejected != 0 {
		t.Errorf("provider answered 429 %d times, want 0", s.Rejected)
	}
	if s.Settled != float64(s.Tokens) {
		t.Errorf("workers settled %.0f tokens, the provider charged %d", s.Settled, s.Tokens)
	}
}

// TestEmbedded is the demo's defaults but shorter, on the embedded Redis,
// with a fleet of 2 processes and -plot.
func TestEmbedded(t *testing.T) {
	c := short("", "low", 2)
	c.Plot = filepath.Join(t.TempDir(), "llm.svg")
	var out bytes.Buffer
	s, err := run(context.Background(), c, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, &out)
	}
	check(t, s)
	if !strings.Contains(out.String(), "using an embedded Redis") {
		t.Errorf("the demo did not say it uses the embedded Redis:\n%s", &out)
	}
	if !strings.Contains(out.String(), "-prefix pacer:llm:") {
		t.Errorf("the demo did not print its prefix and the pacer watch line:\n%s", &out)
	}
	svg, err := os.ReadFile(c.Plot)
	if err != nil {
		t.Fatalf("-plot: %v", err)
	}
	for _, want := range []string{"<svg", ">requests (", ">tokens ("} {
		if !bytes.Contains(svg, []byte(want)) {
			t.Errorf("-plot wrote %d bytes without %q", len(svg), want)
		}
	}
}

// TestReserveModes: whatever a call reserves, settling makes the fleet's
// account exact, on a real Redis.
func TestReserveModes(t *testing.T) {
	srv := redistest.New(t)
	for _, mode := range []string{"low", "estimate", "high"} {
		t.Run(mode, func(t *testing.T) {
			s, err := run(context.Background(), short(srv.URL, mode, 1), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			check(t, s)
		})
	}
}

// TestBadFlags: each bad setting is refused before anything runs.
func TestBadFlags(t *testing.T) {
	ok := short("", "low", 1)
	for name, mut := range map[string]func(*config){
		"rpm 0":             func(c *config) { c.RPM = 0 },
		"tpm below 60":      func(c *config) { c.TPM = 59 },
		"tokens 0":          func(c *config) { c.Tokens = 0 },
		"error 1":           func(c *config) { c.Error = 1 },
		"error negative":    func(c *config) { c.Error = -0.1 },
		"reserve unknown":   func(c *config) { c.Reserve = "mean" },
		"procs 0":           func(c *config) { c.Procs = 0 },
		"workers 0":         func(c *config) { c.Workers = 0 },
		"duration 0":        func(c *config) { c.Duration = 0 },
		"call over burst":   func(c *config) { c.Tokens = 5000 },
		"redis bad":         func(c *config) { c.RedisURL = "ftp://x" },
		"tenants unknown":   func(c *config) { c.Tenants = "weighted" },
		"tenants 3 workers": func(c *config) { c.Tenants, c.Workers = "fair", 3 },
		"per-second alone":  func(c *config) { c.PerSecond = true },
		"profile unknown":   func(c *config) { c.Profile = "gemini" },
		"profile reserve":   func(c *config) { c.Profile, c.Reserve = "openai", "high" },
		"profile tenants":   func(c *config) { c.Profile, c.Tenants = "openai", "fair" },
		"profile call big":  func(c *config) { c.Profile, c.Tokens = "openai", 1000 }, // 2,700 tokens, above 300 ms of 300,000 TPM
	} {
		c := ok
		mut(&c)
		if _, err := run(context.Background(), c, io.Discard); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestTenants: -tenants fair and fifo, a fleet of 2 processes on the
// embedded Redis: every tenant's calls are made and counted, the provider
// refuses none, and the tenants' tokens add up to what it charged; -plot
// draws each tenant.
func TestTenants(t *testing.T) {
	for _, mode := range []string{"fair", "fifo"} {
		t.Run(mode, func(t *testing.T) {
			c := short("", "low", 2)
			c.Workers, c.Tenants = 6, mode
			c.Plot = filepath.Join(t.TempDir(), "tenants.svg")
			var out bytes.Buffer
			s, err := run(context.Background(), c, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, &out)
			}
			check(t, s)
			if len(s.Tenants) != len(roles) {
				t.Fatalf("%d tenants in the summary, want %d", len(s.Tenants), len(roles))
			}
			share := 0.0
			for _, tn := range s.Tenants {
				if tn.Calls == 0 {
					t.Errorf("tenant %s made no call", tn.Tenant)
				}
				share += tn.TokenShare
			}
			if share < 0.999999 || share > 1.000001 {
				t.Errorf("the tenants' token shares add up to %v", share)
			}
			svg, err := os.ReadFile(c.Plot)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range roles {
				if !bytes.Contains(svg, []byte(">"+r.tenant+" (")) {
					t.Errorf("-plot has no panel for %s", r.tenant)
				}
			}
		})
	}
}

// TestWrongRedis: a -redis where nothing listens fails the run before
// any worker process starts (it ran its 30 s and exited 0, each call refused), naming the address.
func TestWrongRedis(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = run(context.Background(), short(addr, "low", 2), io.Discard)
	if want := "llm: -redis: cannot reach Redis at " + addr + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("run with -redis %s = %v, want an error starting %q", addr, err, want)
	}
}

// TestProfiles: each -profile against its provider model enforcing the
// minute's quota per second, 2 processes on the embedded Redis for 3 s:
// the provider refused no call, and the fleet paid for every token the
// provider charged (what it settled beyond them is the credit the
// processes held at the end: at most a burst each).
func TestProfiles(t *testing.T) {
	for _, name := range profileNames {
		t.Run(name, func(t *testing.T) {
			c := short("", "low", 2)
			c.Profile, c.PerSecond, c.ITPM, c.OTPM = name, true, 300_000, 60_000
			var out bytes.Buffer
			s, err := runProfile(context.Background(), c, &out)
			if err != nil {
				t.Fatalf("%v\n%s", err, &out)
			}
			t.Log(s)
			if s.Calls == 0 || s.Rejected != 0 {
				t.Errorf("the provider accepted %d calls and refused %d, want some and none", s.Calls, s.Rejected)
			}
			p, err := profileFor(c)
			if err != nil {
				t.Fatal(err)
			}
			bursts := 0.0
			for _, b := range p.Policy[1:] {
				bursts += float64(b.Limit.Burst)
			}
			if s.Settled < s.Charged || s.Settled > s.Charged+float64(c.Procs)*bursts {
				t.Errorf("the workers settled %.0f tokens, the provider charged %.0f: want from that to %.0f more", s.Settled, s.Charged, float64(c.Procs)*bursts)
			}
		})
	}
}
