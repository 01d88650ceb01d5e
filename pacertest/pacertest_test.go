package pacertest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/pacertest"
	"github.com/pacer-go/pacer/reserve"
)

// An hour of pacing at 10/s: 36,000 Waits, each at its slot 100 ms after
// the one before (the first from the full bucket), in the bubble's time.
// The wall time it takes is logged, not judged (run with -v to see it).
func TestHour(t *testing.T) {
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		rec := new(pacertest.Recorder)
		lim := pacertest.New(t, reserve.Options{Tracer: rec})
		start := time.Now()
		every := reserve.Every(100 * time.Millisecond)
		for range 36_000 {
			if err := lim.Wait(context.Background(), "api", every); err != nil {
				t.Fatal(err)
			}
		}
		if took := time.Since(start); took != time.Hour-100*time.Millisecond {
			t.Errorf("36,000 Waits at 10/s took %v in the bubble, want 59m59.9s", took)
		}
		slots := rec.Slots("api")
		want := make([]time.Duration, 36_000)
		for i := range want {
			want[i] = time.Duration(i) * 100 * time.Millisecond
		}
		if err := pacertest.CheckSchedule(slots, pacertest.Schedule(start, want...)); err != nil {
			t.Error(err)
		}
		for _, w := range rec.Waits() {
			if !w.Woke.Equal(w.Slot) || w.Moves != 0 || w.Err != nil {
				t.Fatalf("a Wait woke at %v for its slot %v (moves %d, err %v): want at its slot", w.Woke, w.Slot, w.Moves, w.Err)
			}
		}
	})
	t.Logf("an hour of pacing at 10/s (36,000 Waits) took %v of wall time", time.Since(wall).Round(time.Millisecond))
}

// Concurrent callers on one Limiter and on two Limiters sharing a Store
// take distinct slots, 10 ms apart, as callers sharing a Redis do.
func TestConcurrentShare(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := pacertest.NewStore()
		rec := new(pacertest.Recorder)
		var lims []*reserve.Limiter
		for range 2 {
			l, err := store.NewLimiter(reserve.Options{Tracer: rec})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lims = append(lims, l)
		}
		start := time.Now()
		lim := reserve.Limit{Rate: 100, Burst: 5}
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for range 25 {
					if err := lims[g%2].Wait(context.Background(), "k", lim); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		var want []time.Duration
		for i := range 200 {
			want = append(want, time.Duration(max(0, i-4))*10*time.Millisecond)
		}
		if err := pacertest.CheckSchedule(rec.Slots("k"), pacertest.Schedule(start, want...)); err != nil {
			t.Error(err)
		}
		if err := pacertest.CheckWindow(rec.Slots("k"), 5+10, 100*time.Millisecond); err != nil {
			t.Error(err)
		}
	})
}

// An in-flight band on a Store: two Limiters share its N, and a call
// open for a minute keeps its seat (no heartbeat renews it; nothing
// drops it). Before, Acquire ran the seats on the nil Redis client and
// panicked.
func TestInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := pacertest.NewStore()
		var lims []*reserve.Limiter
		for range 2 {
			l, err := store.NewLimiter(reserve.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			lims = append(lims, l)
		}
		req := reserve.Request{Key: "k", Policy: reserve.Policy{{Name: "open", Unit: "calls", InFlight: 1}}, Cost: reserve.Cost{"calls": 1}}
		ctx := context.Background()
		a, err := lims[0].Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		if _, err := lims[1].Acquire(short, req); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a second call while the first is open: %v, want context.DeadlineExceeded", err)
		}
		got := make(chan error, 1)
		go func() {
			b, err := lims[1].Acquire(ctx, req)
			if err == nil {
				b.Done()
			}
			got <- err
		}()
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("the waiter went before the first call ended: %v", err)
		default:
		}
		a.Done()
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	})
}

// A Pause on a Store's Limiter holds every caller of the key, the other
// Limiter's too: the bucket is empty when the pause ends, so the first
// slot at 1/s comes a second after it.
func TestPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := pacertest.NewStore()
		a, err := store.NewLimiter(reserve.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec := new(pacertest.Recorder)
		b, err := store.NewLimiter(reserve.Options{Tracer: rec})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := a.Pause(context.Background(), "k", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(context.Background(), "k", reserve.Limit{Rate: 1, Burst: 1}); err != nil {
			t.Fatal(err)
		}
		if err := pacertest.CheckSchedule(rec.Slots("k"), pacertest.Schedule(start, 31*time.Second)); err != nil {
			t.Error(err)
		}
		for _, l := range []*reserve.Limiter{a, b} {
			if err := l.Close(); err != nil {
				t.Error(err)
			}
			if err := l.Wait(context.Background(), "k", reserve.Limit{Rate: 1, Burst: 1}); !errors.Is(err, reserve.ErrClosed) {
				t.Errorf("Wait after Close: %v, want ErrClosed", err)
			}
		}
	})
}

// Bad input gets clear errors.
func TestBadInput(t *testing.T) {
	store := pacertest.NewStore()
	if _, err := store.NewLimiter(reserve.Options{Clock: fixedClock{}}); !errors.Is(err, pacertest.ErrClock) {
		t.Errorf("Options.Clock set: %v, want ErrClock", err)
	}
	if _, err := store.NewLimiter(reserve.Options{KeyPrefix: "a{b"}); !errors.Is(err, reserve.ErrInvalidPrefix) {
		t.Errorf("a bad prefix: %v, want ErrInvalidPrefix", err)
	}
	if _, err := store.NewLimiter(reserve.Options{LeaseQueue: 1}); !errors.Is(err, reserve.ErrInvalidOptions) || !strings.HasPrefix(err.Error(), "pacertest: ") {
		t.Errorf("LeaseQueue 1: %v, want pacertest: ... ErrInvalidOptions", err)
	}
	if _, err := new(pacertest.Store).NewLimiter(reserve.Options{}); err == nil || !strings.Contains(err.Error(), "NewStore") {
		t.Errorf("a zero Store: %v, want an error naming NewStore", err)
	}
	rec := httptest.NewRecorder()
	new(pacertest.Provider).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), "NewProvider") {
		t.Errorf("a zero Provider: %d %q, want 500 naming NewProvider", rec.Code, rec.Body.String())
	}
	lim, err := store.NewLimiter(reserve.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	if err := lim.Wait(context.Background(), "k", reserve.Limit{Rate: -1, Burst: 1}); !errors.Is(err, reserve.ErrInvalidRate) {
		t.Errorf("a negative rate: %v, want ErrInvalidRate", err)
	}
	if err := lim.Wait(context.Background(), "", reserve.Limit{Rate: 1, Burst: 1}); !errors.Is(err, reserve.ErrEmptyKey) {
		t.Errorf("an empty key: %v, want ErrEmptyKey", err)
	}
	for _, o := range []pacertest.ProviderOptions{
		{Limit: 0, Window: time.Second},
		{Limit: 1, Window: 0},
		{Limit: 1, Window: time.Second, RetryAfter: -time.Second},
	} {
		if _, err := pacertest.NewProvider(o); err == nil || !strings.HasPrefix(err.Error(), "pacertest: ProviderOptions.") {
			t.Errorf("NewProvider(%+v): %v, want an error naming the field", o, err)
		}
	}
	for _, c := range []struct {
		n   int
		per time.Duration
	}{{-1, time.Second}, {1, 0}} {
		if err := pacertest.CheckWindow(nil, c.n, c.per); err == nil {
			t.Errorf("CheckWindow(n=%d, per=%v): no error", c.n, c.per)
		}
	}
}

type fixedClock struct{}

func (fixedClock) Now() time.Time { return time.Unix(0, 0) }

// The check helpers report what differs.
func TestChecks(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := pacertest.Schedule(t0, 0, time.Second, 2*time.Second)
	if err := pacertest.CheckSchedule(s, s); err != nil {
		t.Error(err)
	}
	late := pacertest.Schedule(t0, 0, time.Second+time.Nanosecond, 2*time.Second)
	if err := pacertest.CheckSchedule(late, s); err == nil || !strings.Contains(err.Error(), "slot 1") || !strings.Contains(err.Error(), "(1ns)") {
		t.Errorf("a slot 1 ns late: %v", err)
	}
	if err := pacertest.CheckSchedule(s[:2], s); err == nil || !strings.Contains(err.Error(), "2 slots, want 3") {
		t.Errorf("a slot missing: %v", err)
	}
	if err := pacertest.CheckWindow(s, 1, time.Second); err != nil {
		t.Errorf("one a second, 1 per second: %v", err)
	}
	if err := pacertest.CheckWindow(late, 1, time.Second+2*time.Nanosecond); err == nil {
		t.Error("two within 1s+1ns, 1 per 1s+2ns: no error")
	}
	if err := pacertest.CheckWindow(s, 2, time.Second); err != nil {
		t.Error(err)
	}
}

// The Provider accepts Limit requests in any sliding Window and answers
// the rest 429 with the Retry-After it would take.
func TestProvider(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 2, Window: 1500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		c := p.Client()
		start := time.Now()
		get := func() (int, string) {
			resp, err := c.Get("http://api.example/x")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode, resp.Header.Get("Retry-After")
		}
		for i, want := range []struct {
			after  time.Duration
			code   int
			header string
		}{
			{0, 200, ""},
			{500 * time.Millisecond, 200, ""},
			{500 * time.Millisecond, 429, "1"}, // at 1 s; the first leaves at 1.5 s
			{600 * time.Millisecond, 200, ""},  // at 1.6 s
			{0, 429, "1"},                      // at 1.6 s; the second leaves at 2 s
			{400 * time.Millisecond, 200, ""},  // at 2 s
		} {
			time.Sleep(want.after)
			if code, h := get(); code != want.code || h != want.header {
				t.Errorf("request %d at %v: %d Retry-After %q, want %d %q", i, time.Since(start), code, h, want.code, want.header)
			}
		}
		if got := len(p.Accepted()); got != 4 {
			t.Errorf("%d accepted, want 4", got)
		}
		if err := pacertest.CheckSchedule(p.Rejected(), pacertest.Schedule(start, time.Second, 1600*time.Millisecond)); err != nil {
			t.Error(err)
		}
	})
	// Served over the network by httptest, outside a bubble, with a fixed
	// RetryAfter and a Handler.
	p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 1, Window: time.Hour, RetryAfter: 90 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") })})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	defer srv.Close()
	for i, want := range []string{"200 hello", "429 90"} {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got := resp.Status[:3] + " " + string(body)
		if resp.StatusCode == 429 {
			got = resp.Status[:3] + " " + resp.Header.Get("Retry-After")
		}
		if got != want {
			t.Errorf("request %d: %q, want %q", i, got, want)
		}
	}
}

// pacehttp on a Store's Limiter and a Provider's Transport: an hour's
// 3,600 calls at 1/s, with a provider that allows 1 per second, in the
// bubble's time; none is refused, and the Recorder sees every slot.
func TestPacehttp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 1, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		rec := new(pacertest.Recorder)
		tr, err := pacehttp.New(pacertest.New(t, reserve.Options{}), pacehttp.Options{
			Base: p.Transport(), Limit: reserve.Every(time.Second), Tracer: rec})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		start := time.Now()
		for range 3600 {
			resp, err := client.Get("http://api.example/v1/things")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s at %v", resp.Status, time.Since(start))
			}
		}
		if n := len(p.Rejected()); n != 0 {
			t.Errorf("%d calls refused", n)
		}
		want := make([]time.Duration, 3600)
		for i := range want {
			want[i] = time.Duration(i) * time.Second
		}
		if err := pacertest.CheckSchedule(rec.Slots("api.example"), pacertest.Schedule(start, want...)); err != nil {
			t.Error(err)
		}
	})
}

// pacehttp obeys a Provider's 429: a provider that allows 2 calls in any
// 10 s, and a client paced at 1/s, whose retries wait out Retry-After.
func TestPacehttpRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 2, Window: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := pacehttp.New(pacertest.New(t, reserve.Options{}), pacehttp.Options{
			Base: p.Transport(), Limit: reserve.Every(time.Second), MaxRetries: 5})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		start := time.Now()
		for i := range 6 {
			resp, err := client.Get("http://api.example/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("call %d: %s", i, resp.Status)
			}
		}
		// Calls 3 and 5 are refused (at 2 s and 13 s) until the first of
		// the two before leaves the window; the pause (Retry-After) ends
		// then, with the bucket empty: the call goes a second later.
		sec := time.Second
		if err := pacertest.CheckSchedule(p.Accepted(), pacertest.Schedule(start, 0, sec, 11*sec, 12*sec, 22*sec, 23*sec)); err != nil {
			t.Error(err)
		}
		if err := pacertest.CheckSchedule(p.Rejected(), pacertest.Schedule(start, 2*sec, 13*sec)); err != nil {
			t.Error(err)
		}
	})
}

// pacehttp with Adaptive on a Store's Limiter (package adaptive's script
// runs on the Store): against a Provider that allows 5 calls in any second,
// a client that starts at 20/s is refused, learns, and gets every call
// through.
func TestPacehttpAdaptive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 5, Window: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		tr, err := pacehttp.New(pacertest.New(t, reserve.Options{}), pacehttp.Options{
			Base: p.Transport(), Adaptive: &adaptive.Config{Start: 20, Min: 1, Max: 50}, MaxRetries: 10})
		if err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Transport: tr}
		start := time.Now()
		for i := range 600 {
			resp, err := client.Get("http://api.example/")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("call %d: %s", i, resp.Status)
			}
		}
		took := time.Since(start)
		if got := len(p.Accepted()); got != 600 {
			t.Errorf("%d accepted, want 600", got)
		}
		rejected := len(p.Rejected())
		if rejected == 0 {
			t.Error("no call refused: the client never went over 5/s, so nothing was learned")
		}
		t.Logf("600 calls in %v of the bubble's time (120 s at 5/s), %d refused", took, rejected)
	})
}

// pacehttp's count of a provider's quota (its script runs on the Store):
// a Provider that allows 20 calls in any 10 s and reports the calls left
// (x-ratelimit-remaining-requests, x-ratelimit-reset-requests), and a
// client allowed 100/s. Counting, the client spreads its calls over the
// reset and is refused less often than without (IgnoreCounts).
func TestPacehttpCounts(t *testing.T) {
	refused := map[bool]int{}
	for _, ignore := range []bool{false, true} {
		synctest.Test(t, func(t *testing.T) {
			var p *pacertest.Provider
			p, err := pacertest.NewProvider(pacertest.ProviderOptions{Limit: 20, Window: 10 * time.Second,
				Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					acc := p.Accepted()
					now := time.Now()
					in := 0
					for _, a := range acc {
						if now.Sub(a) < 10*time.Second {
							in++
						}
					}
					w.Header().Set("x-ratelimit-limit-requests", "20")
					w.Header().Set("x-ratelimit-remaining-requests", strconv.Itoa(20-in))
					w.Header().Set("x-ratelimit-reset-requests", (acc[len(acc)-in].Add(10 * time.Second).Sub(now)).String())
				})})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := pacehttp.New(pacertest.New(t, reserve.Options{}), pacehttp.Options{
				Base: p.Transport(), Limit: reserve.Limit{Rate: 100, Burst: 1}, MaxRetries: 10, IgnoreCounts: ignore})
			if err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: tr}
			for i := range 100 {
				resp, err := client.Get("http://api.example/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("call %d: %s", i, resp.Status)
				}
			}
			refused[ignore] = len(p.Rejected())
		})
	}
	t.Logf("refused: %d counting, %d not", refused[false], refused[true])
	if refused[false] >= refused[true] {
		t.Errorf("refused %d times counting, %d not: the count did not help", refused[false], refused[true])
	}
}

// 64 callers on a key at 10,000/s: the queue is deep enough (6.4 ms) that
// a call is held for the callers coming meanwhile, LeaseQueue of them
// queue behind it, and the Limiter leases runs of slots, on the Store as on
// Redis. Every slot is on the schedule, 100 µs apart, none twice.
func TestLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := new(pacertest.Recorder)
		calls := &countCalls{n: map[string]int{}}
		lim := pacertest.New(t, reserve.Options{Tracer: rec, Metrics: calls})
		start := time.Now()
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				for range 50 {
					if err := lim.Wait(context.Background(), "hot", reserve.Limit{Rate: 10_000, Burst: 1}); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		want := make([]time.Duration, 3200)
		for i := range want {
			want[i] = time.Duration(i) * 100 * time.Microsecond
		}
		if err := pacertest.CheckSchedule(rec.Slots("hot"), pacertest.Schedule(start, want...)); err != nil {
			t.Error(err)
		}
		calls.mu.Lock()
		defer calls.mu.Unlock()
		if calls.n["lease"] == 0 {
			t.Errorf("no lease among the calls to the store: %v", calls.n)
		}
		t.Logf("calls to the store: %v", calls.n)
	})
}

// countCalls is a reserve.Metrics that counts the calls to the store by op.
type countCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *countCalls) RedisCall(op string, d time.Duration, err error) {
	c.mu.Lock()
	c.n[op]++
	c.mu.Unlock()
}
func (*countCalls) Reserved(string, []string, []float64, time.Duration, bool) {}
func (*countCalls) Moved(string, string)                                      {}
func (*countCalls) Fallback(bool)                                             {}
func (*countCalls) Paused(string, time.Duration)                              {}
func (*countCalls) Evictable(string)                                          {}

// Fair callers (two tenants, one of them with an Urgent lane too) on a
// Store's Limiter: the fair script and its queue's pump run in the bubble,
// and the 40 calls take the key's slots one after the other, 100 ms apart.
func TestFair(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := new(pacertest.Recorder)
		lim := pacertest.New(t, reserve.Options{Tracer: rec})
		every := reserve.Every(100 * time.Millisecond)
		start := time.Now()
		var wg sync.WaitGroup
		for g, who := range []string{"a", "b", "a", "b"} {
			wg.Go(func() {
				for range 10 {
					req := reserve.Request{Key: "k", Policy: every.Policy(), Cost: reserve.Permits(1), Tenant: who}
					if g == 0 {
						req.Lane = reserve.Urgent
					}
					if err := lim.WaitN(context.Background(), req); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		want := make([]time.Duration, 40)
		for i := range want {
			want[i] = time.Duration(i) * 100 * time.Millisecond
		}
		if err := pacertest.CheckSchedule(rec.Slots("k"), pacertest.Schedule(start, want...)); err != nil {
			t.Error(err)
		}
	})
}

// A pause made on one Limiter while a caller of another (on the same
// Store) sleeps to its slot: the sleeper finds it at its check before the
// slot and takes the first slot after the pause: the pause ends at 35 s
// with the bucket empty, so 10 s later at one call per 10 s.
func TestPauseWhileSleeping(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := pacertest.NewStore()
		a, err := store.NewLimiter(reserve.Options{})
		if err != nil {
			t.Fatal(err)
		}
		rec := new(pacertest.Recorder)
		b, err := store.NewLimiter(reserve.Options{Tracer: rec})
		if err != nil {
			t.Fatal(err)
		}
		every := reserve.Every(10 * time.Second)
		start := time.Now()
		if err := b.Wait(context.Background(), "k", every); err != nil { // the burst
			t.Fatal(err)
		}
		done := make(chan error)
		go func() { done <- b.Wait(context.Background(), "k", every) }() // its slot at 10 s
		time.Sleep(5 * time.Second)
		if err := a.Pause(context.Background(), "k", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := pacertest.CheckSchedule(rec.Slots("k"), pacertest.Schedule(start, 0, 45*time.Second)); err != nil {
			t.Error(err)
		}
		if w := rec.Waits()[1]; w.Moves != 1 || !w.Woke.Equal(w.Slot) {
			t.Errorf("the sleeper moved %d times, woke at %v for its slot %v: want moved once, woke at its slot", w.Moves, w.Woke.Sub(start), w.Slot.Sub(start))
		}
	})
}
