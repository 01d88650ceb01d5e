package demo

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/reserve"
)

func TestParseRedis(t *testing.T) {
	for _, tt := range []struct {
		in, url, addr string
		db            int
		tls           bool
	}{
		{"127.0.0.1:6379", "redis://127.0.0.1:6379", "127.0.0.1:6379", 0, false},
		{"localhost:6380", "redis://localhost:6380", "localhost:6380", 0, false},
		{"redis://127.0.0.1:6379/2", "redis://127.0.0.1:6379/2", "127.0.0.1:6379", 2, false},
		{"rediss://cache.example:6380/0", "rediss://cache.example:6380/0", "cache.example:6380", 0, true},
	} {
		url, opts, err := ParseRedis(tt.in)
		if err != nil {
			t.Errorf("ParseRedis(%q) = %v", tt.in, err)
			continue
		}
		if url != tt.url || opts.Addr != tt.addr || opts.DB != tt.db || (opts.TLSConfig != nil) != tt.tls {
			t.Errorf("ParseRedis(%q) = %q, Addr %q, DB %d, TLS %v; want %q, %q, %d, %v",
				tt.in, url, opts.Addr, opts.DB, opts.TLSConfig != nil, tt.url, tt.addr, tt.db, tt.tls)
		}
	}
	for _, bad := range []string{"http://127.0.0.1:6379", "redis://127.0.0.1:6379/x"} {
		if _, _, err := ParseRedis(bad); err == nil {
			t.Errorf("ParseRedis(%q) = nil error, want one", bad)
		}
	}
}

// deadAddr returns a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// TestConnectWrongAddress: a -redis where nothing listens fails Connect,
// with the address, the dial error and what to check.
func TestConnectWrongAddress(t *testing.T) {
	addr := deadAddr(t)
	r, err := Connect(addr, io.Discard, "")
	if r != nil || err == nil {
		t.Fatalf("Connect(%q) = %v, %v; want an error", addr, r, err)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Fatalf("Connect(%q) = %v, want it to wrap the dial error", addr, err)
	}
	want := "-redis: cannot reach Redis at " + addr + ": " + opErr.Error() + "; check the address and that Redis is running there"
	if err.Error() != want {
		t.Errorf("Connect(%q) = %q, want %q", addr, err, want)
	}
}

func TestConnectEmbedded(t *testing.T) {
	var out bytes.Buffer
	r, err := Connect("", &out, " for us")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if !strings.HasPrefix(out.String(), "no -redis given: using an embedded Redis (miniredis, in this process) at 127.0.0.1:") ||
		!strings.HasSuffix(out.String(), " for us\n") {
		t.Errorf("Connect(\"\") said %q", out.String())
	}
	if err := r.Client.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
	if _, opts, err := ParseRedis(r.URL); err != nil || opts.Addr != r.Options.Addr {
		t.Errorf("URL %q does not lead to %s: %v", r.URL, r.Options.Addr, err)
	}
}

// TestEvery: f runs until stop, never after it returns; stop may be called
// twice.
func TestEvery(t *testing.T) {
	var n atomic.Int64
	stop := Every(time.Millisecond, func() { n.Add(1) })
	for n.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	stop()
	stop()
	after := n.Load()
	time.Sleep(10 * time.Millisecond)
	if n.Load() != after {
		t.Errorf("f ran after stop returned")
	}
	Every(0, func() { t.Error("f ran with d = 0") })()
}

func TestSummarize(t *testing.T) {
	t0 := time.Unix(100, 0)
	st := provider.Stats{Accepted: 42, Rejected: 2, ByHost: map[string]provider.HostStats{
		"a": {Accepted: 21, Rejected: 2, First: t0, Last: t0.Add(time.Second), Busiest1s: 21},
		"b": {Accepted: 21, First: t0, Last: t0.Add(2 * time.Second), Busiest1s: 11},
	}}
	got := Summarize(st, 20, 1, 5*time.Second)
	want := Summary{Calls: 44, Rejected: 2, Rate: (20 + 10) / 2, Limit: 20, Busiest1s: 21, Duration: 5 * time.Second}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if s := got.String(); s != "summary calls=44 rejected=2 rate=15.00 limit=20 busiest_1s=21 duration=5.0" {
		t.Errorf("String() = %q", s)
	}
}

// TestPacerLimit: pacer's limit derived from the provider's, and a warning
// for one that lets more into a second.
func TestPacerLimit(t *testing.T) {
	for _, tt := range []struct {
		provider, burst int
		rate            float64
		want            reserve.Limit
		warn            bool
	}{
		{20, 0, 0, reserve.Limit{Rate: 19, Burst: 1}, false},
		{20, 5, 0, reserve.Limit{Rate: 15, Burst: 5}, false},
		{20, 0, 10, reserve.Limit{Rate: 10, Burst: 1}, false},
		{20, 1, 20, reserve.Limit{Rate: 20, Burst: 1}, true},
	} {
		got, warn, err := PacerLimit(tt.provider, tt.rate, tt.burst)
		if err != nil || got != tt.want || (warn != "") != tt.warn {
			t.Errorf("PacerLimit(%d, %v, %d) = %+v, %q, %v; want %+v, warning %v", tt.provider, tt.rate, tt.burst, got, warn, err, tt.want, tt.warn)
		}
	}
	for _, bad := range [][3]float64{{0, 0, 0}, {1, 0, 0}, {20, -1, 0}, {20, 0, -1}} {
		if _, _, err := PacerLimit(int(bad[0]), bad[1], int(bad[2])); err == nil {
			t.Errorf("PacerLimit(%v): no error", bad)
		}
	}
}

// TestPrintWatch: the prefix and a pacer command line that names the
// Redis and the prefix.
func TestPrintWatch(t *testing.T) {
	var b strings.Builder
	PrintWatch(&b, &Redis{URL: "redis://127.0.0.1:6379/0"}, "pacer:x:1:")
	want := "keys under \"pacer:x:1:\": watch them with\n  go run ./cmd/pacer -redis redis://127.0.0.1:6379/0 -prefix pacer:x:1: watch\n"
	if b.String() != want {
		t.Errorf("PrintWatch wrote %q, want %q", b.String(), want)
	}
}
