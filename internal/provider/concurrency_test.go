package provider

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// call makes one call to host on c, with X-Hold hold ("" for none), and
// returns its status (0 and the error if it did not complete).
func concurrencyCall(ctx context.Context, c *Concurrency, host, hold string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.URL()+"/call", nil)
	req.Host = host
	if hold != "" {
		req.Header.Set("X-Hold", hold)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// awaitOpen waits until host has open calls open (a state, not a timing
// bound: it fails only after a minute).
func awaitOpen(t *testing.T, c *Concurrency, host string, open int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, by := c.Stats()
		if by[host].Open == open {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d open, want %d", host, by[host].Open, open)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrencyRefusesOverN: N calls held open, the next is refused with
// 429 and X-Concurrency-Limit, another host is counted apart, a client
// that disconnects ends its call and frees its place.
func TestConcurrencyRefusesOverN(t *testing.T) {
	c, err := StartConcurrency(ConcurrencyOptions{N: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if _, err := concurrencyCall(ctx, c, "a.test", "1h"); !errors.Is(err, context.Canceled) {
				t.Errorf("held call: %v, want context.Canceled", err)
			}
		})
	}
	awaitOpen(t, c, "a.test", 3)

	req, _ := http.NewRequest(http.MethodGet, c.URL()+"/over", nil)
	req.Host = "a.test"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-Concurrency-Limit") != "3" || resp.Header.Get("Retry-After") != "" {
		t.Errorf("fourth call: %d, X-Concurrency-Limit %q, Retry-After %q; want 429, 3, none",
			resp.StatusCode, resp.Header.Get("X-Concurrency-Limit"), resp.Header.Get("Retry-After"))
	}
	if code, err := concurrencyCall(context.Background(), c, "b.test", ""); err != nil || code != http.StatusOK {
		t.Errorf("other host: %d, %v; want 200", code, err)
	}

	cancel() // the three clients disconnect
	wg.Wait()
	awaitOpen(t, c, "a.test", 0)
	if code, err := concurrencyCall(context.Background(), c, "a.test", "0s"); err != nil || code != http.StatusOK {
		t.Errorf("after the disconnects: %d, %v; want 200", code, err)
	}
	total, by := c.Stats()
	want := ConcurrencyStats{Served: 1, Refused: 1, Abandoned: 3, MaxOpen: 3}
	if by["a.test"] != want {
		t.Errorf("a.test: %+v, want %+v", by["a.test"], want)
	}
	if want := (ConcurrencyStats{Served: 2, Refused: 1, Abandoned: 3, MaxOpen: 3}); total != want {
		t.Errorf("total: %+v, want %+v", total, want)
	}
}

// TestConcurrencyResponseEnd: a call is no longer open once its answer is
// read, so calls one after the other on N = 1 are never refused.
func TestConcurrencyResponseEnd(t *testing.T) {
	c, err := StartConcurrency(ConcurrencyOptions{N: 1, Hold: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 100 {
		if code, err := concurrencyCall(context.Background(), c, "a.test", ""); err != nil || code != http.StatusOK {
			t.Fatalf("call %d: %d, %v; want 200", i, code, err)
		}
		if _, by := c.Stats(); by["a.test"].Open != 0 {
			t.Fatalf("call %d read: %d open, want 0", i, by["a.test"].Open)
		}
	}
	if total, _ := c.Stats(); total != (ConcurrencyStats{Served: 100, MaxOpen: 1}) {
		t.Errorf("stats %+v", total)
	}
}

// TestConcurrencyBadInput: bad options fail Start; a bad X-Hold is
// answered 400 and counts nothing.
func TestConcurrencyBadInput(t *testing.T) {
	for _, o := range []ConcurrencyOptions{
		{}, {N: -1}, {N: 1, Hold: -time.Second}, {N: 1, Hold: time.Second, HoldMax: time.Millisecond},
		{N: 1, HoldMax: time.Second},
	} {
		if c, err := StartConcurrency(o); err == nil {
			c.Close()
			t.Errorf("StartConcurrency(%+v): no error", o)
		}
	}
	c, err := StartConcurrency(ConcurrencyOptions{N: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, h := range []string{"soon", "-1s"} {
		if code, err := concurrencyCall(context.Background(), c, "a.test", h); err != nil || code != http.StatusBadRequest {
			t.Errorf("X-Hold %q: %d, %v; want 400", h, code, err)
		}
	}
	if total, by := c.Stats(); total != (ConcurrencyStats{}) || len(by) != 0 {
		t.Errorf("after bad calls: %+v %v, want nothing counted", total, by)
	}
}

// TestConcurrencyHoldDistribution: holds drawn between Hold and HoldMax
// stay within them, spread over both ends' orders of magnitude, and
// repeat with the seed.
func TestConcurrencyHoldDistribution(t *testing.T) {
	draw := func(seed uint64) []time.Duration {
		c, err := StartConcurrency(ConcurrencyOptions{N: 1, Hold: 10 * time.Millisecond, HoldMax: 30 * time.Second, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		r, _ := http.NewRequest(http.MethodGet, "/", nil)
		var ds []time.Duration
		for range 2000 {
			d, err := c.hold(r)
			if err != nil {
				t.Fatal(err)
			}
			ds = append(ds, d)
		}
		return ds
	}
	a, b := draw(7), draw(7)
	var under100ms, over3s int
	for i, d := range a {
		if d < 10*time.Millisecond || d > 30*time.Second {
			t.Fatalf("hold %v outside [10ms, 30s]", d)
		}
		if d != b[i] {
			t.Fatalf("draw %d: %v and %v from one seed", i, d, b[i])
		}
		if d < 100*time.Millisecond {
			under100ms++
		}
		if d > 3*time.Second {
			over3s++
		}
	}
	// Log-uniform: each of the range's 3.5 decades holds about 2/7 of the
	// draws; under 100 ms and over 3 s are a decade each.
	if under100ms < 400 || over3s < 400 {
		t.Errorf("of 2000 holds, %d under 100 ms and %d over 3 s; want about 570 each", under100ms, over3s)
	}
}
