package provider

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

func get(t *testing.T, s *Server, host string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.URL()+"/page", nil)
	req.Host = host
	req.Header.Set("X-Client", "test")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}

// TestStrict: a host accepts Limit calls in a second and refuses the next
// with 429 and a Retry-After; other hosts are counted apart.
func TestStrict(t *testing.T) {
	s, err := Start(Options{Limit: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 5 {
		if r := get(t, s, "a.test"); r.StatusCode != http.StatusOK {
			t.Fatalf("call %d: %d, want 200", i, r.StatusCode)
		}
	}
	r := get(t, s, "a.test")
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("sixth call: %d, want 429", r.StatusCode)
	}
	if ra, err := strconv.Atoi(r.Header.Get("Retry-After")); err != nil || ra < 1 {
		t.Errorf("Retry-After %q, want whole seconds >= 1", r.Header.Get("Retry-After"))
	}
	if r := get(t, s, "b.test"); r.StatusCode != http.StatusOK {
		t.Errorf("other host: %d, want 200", r.StatusCode)
	}
	if ms := r.Header.Get("retry-after-ms"); ms != "" {
		t.Errorf("retry-after-ms %q without RetryAfterMs", ms)
	}
	st := s.Stats()
	if st.Accepted != 6 || st.Rejected != 1 || st.ByHost["a.test"].Busiest1s != 5 || st.ByClient["test"].Rejected != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestStrict100ms: with Strict100ms, Limit/10 calls in 100 ms, then 429.
func TestStrict100ms(t *testing.T) {
	s, err := Start(Options{Limit: 20, Strict100ms: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	get(t, s, "a.test")
	get(t, s, "a.test")
	if r := get(t, s, "a.test"); r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third call within 100 ms: %d, want 429", r.StatusCode)
	}
	time.Sleep(110 * time.Millisecond)
	if r := get(t, s, "a.test"); r.StatusCode != http.StatusOK {
		t.Fatalf("after 100 ms: %d, want 200", r.StatusCode)
	}
}

func TestBusiest(t *testing.T) {
	t0 := time.Unix(0, 0)
	ts := []time.Time{t0, t0.Add(900 * time.Millisecond), t0.Add(999 * time.Millisecond), t0.Add(1000 * time.Millisecond)}
	if got := Busiest(ts, time.Second); got != 3 {
		t.Errorf("Busiest = %d, want 3 (a window is [t, t+1s))", got)
	}
}

// TestCalls: Calls returns each host's accepted calls in order, and a copy.
func TestCalls(t *testing.T) {
	s, err := Start(Options{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := time.Now()
	for range 3 {
		get(t, s, "a.test") // the third is refused
	}
	get(t, s, "b.test")
	calls := s.Calls()
	if len(calls["a.test"]) != 2 || len(calls["b.test"]) != 1 {
		t.Fatalf("Calls() = %v, want 2 accepted calls for a.test and 1 for b.test", calls)
	}
	a := calls["a.test"]
	if a[0].Before(before) || a[1].Before(a[0]) {
		t.Errorf("Calls()[a.test] = %v, want times in order, after %v", a, before)
	}
	a[0] = time.Time{}
	if s.Calls()["a.test"][0].IsZero() {
		t.Error("Calls() returned the provider's own slice")
	}
}

// TestRejections: Rejections returns each host's 429s in order, and a copy.
func TestRejections(t *testing.T) {
	s, err := Start(Options{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	before := time.Now()
	for range 3 {
		get(t, s, "a.test") // the second and third are refused
	}
	rej := s.Rejections()
	if len(rej["a.test"]) != 2 || len(rej) != 1 {
		t.Fatalf("Rejections() = %v, want 2 refused calls for a.test", rej)
	}
	a := rej["a.test"]
	if a[0].Before(before) || a[1].Before(a[0]) {
		t.Errorf("Rejections()[a.test] = %v, want times in order, after %v", a, before)
	}
	if st := s.Stats(); st.Rejected != 2 || st.ByHost["a.test"].Rejected != 2 {
		t.Errorf("Stats() = %+v, want 2 rejected", st)
	}
	a[0] = time.Time{}
	if s.Rejections()["a.test"][0].IsZero() {
		t.Error("Rejections() returned the provider's own slice")
	}
}

// TestLeaky: calls spaced exactly 1/Rate apart all pass; one call of
// tolerance lets a call come up to one interval early, not two; the clock
// is whole milliseconds; a refused call does not count.
func TestLeaky(t *testing.T) {
	base := time.Unix(1000, 0)
	at := func(ms float64) time.Time { return base.Add(time.Duration(ms * float64(time.Millisecond))) }
	l := Leaky{Rate: 100} // one call per 10 ms
	for i := range 5 {
		if !l.Admit(at(float64(10 * i))) {
			t.Fatalf("call %d at its turn refused", i)
		}
	}
	// The next turn is at 50 ms; one interval early (40 ms) passes...
	if !l.Admit(at(40)) {
		t.Fatal("a call one interval early refused")
	}
	// ...the next turn is now 60 ms; 50.9 ms is 50 ms on the ms clock,
	// one interval early again: passes, and the turn is 70 ms.
	if !l.Admit(at(50.9)) {
		t.Fatal("a call at 50.9 ms (50 on the ms clock) refused")
	}
	// 59 ms is 11 ms early: refused, and not counted.
	if l.Admit(at(59)) {
		t.Fatal("a call 11 ms early admitted")
	}
	if !l.Admit(at(60)) {
		t.Fatal("the call at 60 ms refused after a refused one")
	}
	times := []time.Time{at(0), at(1), at(2), at(3), at(30)}
	if got := LeakyRejections(times, 100); got != 2 {
		t.Fatalf("LeakyRejections = %d, want 2 (0 and 1 pass, 2 and 3 are refused, 30 passes)", got)
	}
}

// TestRetryAfterMs: with RetryAfterMs a 429 also says, in milliseconds,
// when the oldest call of the window leaves it: a second after the first
// call, so no sooner than the rest of the second since it was sent, and no
// later than a second.
func TestRetryAfterMs(t *testing.T) {
	s, err := Start(Options{Limit: 2, RetryAfterMs: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := time.Now()
	for range 2 {
		get(t, s, "a.test")
	}
	r := get(t, s, "a.test")
	gone := time.Since(first)
	if r.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third call: %d, want 429", r.StatusCode)
	}
	ms, err := strconv.Atoi(r.Header.Get("retry-after-ms"))
	if d := time.Duration(ms) * time.Millisecond; err != nil || d < time.Second-gone || d > time.Second {
		t.Errorf("retry-after-ms %q, want %v to 1s (a second after the first call, which was sent %v ago)", r.Header.Get("retry-after-ms"), time.Second-gone, gone)
	}
	if ra := r.Header.Get("Retry-After"); ra != "1" {
		t.Errorf("Retry-After %q, want 1", ra)
	}
}

// TestMustRefuse: 60 calls at 16/s after a burst of 1 span 3.7 s, four
// seconds of at least 15 calls each on average: a provider allowing 14
// refuses some. At 7.8/s they span 7.6 s, and 8 seconds of 14 hold 112.
func TestMustRefuse(t *testing.T) {
	for _, c := range []struct {
		n, burst int
		rate     float64
		limit    int
		want     bool
	}{
		{60, 1, 16, 14, true},
		{60, 1, 7.82, 14, false},
		{56, 0, 14, 14, false}, // 4 s exactly: five seconds cover them
		{60, 1, 20, 14, true},  // 2.95 s: three seconds of 14 hold 42
		{15, 15, 0, 14, true},  // all at once
		{14, 14, 0, 14, false},
	} {
		if got := MustRefuse(c.n, c.burst, c.rate, c.limit); got != c.want {
			t.Errorf("MustRefuse(%d, %d, %v, %d) = %v, want %v", c.n, c.burst, c.rate, c.limit, got, c.want)
		}
	}
}
