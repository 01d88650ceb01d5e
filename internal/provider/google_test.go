package provider

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// googleCall calls srv once and returns the status and the decoded body.
func googleCall(t *testing.T, url string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %q: %v", b, err)
	}
	return resp.StatusCode, m
}

// quotaOf returns the quotaId and retryDelay of a Google refusal's body.
func quotaOf(t *testing.T, m map[string]any) (quota, delay string) {
	t.Helper()
	e, _ := m["error"].(map[string]any)
	if e == nil || e["status"] != "RESOURCE_EXHAUSTED" {
		t.Fatalf("not a RESOURCE_EXHAUSTED error: %v", m)
	}
	ds, _ := e["details"].([]any)
	for _, d := range ds {
		d := d.(map[string]any)
		switch d["@type"] {
		case "type.googleapis.com/google.rpc.QuotaFailure":
			quota = d["violations"].([]any)[0].(map[string]any)["quotaId"].(string)
		case "type.googleapis.com/google.rpc.RetryInfo":
			delay = d["retryDelay"].(string)
		}
	}
	return quota, delay
}

// TestGoogle: a Google refuses the call beyond its quota per minute, then
// the one beyond its quota per day, each with its QuotaFailure and a
// RetryInfo to the minute's end; the day ends at midnight Pacific time,
// on the day the clocks go forward too (a day of 23 hours).
func TestGoogle(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip("no zone database:", err)
	}
	var (
		mu  sync.Mutex
		now = time.Date(2026, 3, 7, 23, 0, 17, 0, la) // the day before the clocks go forward
	)
	clock := func(d time.Time) { mu.Lock(); now = d; mu.Unlock() }
	p := &Google{PerMinute: 2, PerDay: 3, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	srv := httptest.NewServer(p)
	defer srv.Close()

	for range 2 {
		if st, m := googleCall(t, srv.URL); st != http.StatusOK {
			t.Fatalf("status %d: %v", st, m)
		}
	}
	st, m := googleCall(t, srv.URL)
	if q, d := quotaOf(t, m); st != http.StatusTooManyRequests || q != GoogleMinuteQuota || d != "43s" {
		t.Fatalf("the third call in a minute: %d %s %s", st, q, d)
	}
	clock(time.Date(2026, 3, 7, 23, 1, 50, 0, la))
	if st, m := googleCall(t, srv.URL); st != http.StatusOK {
		t.Fatalf("the next minute: %d %v", st, m)
	}
	st, m = googleCall(t, srv.URL)
	if q, d := quotaOf(t, m); st != http.StatusTooManyRequests || q != GoogleDayQuota || d != "10s" {
		t.Fatalf("the fourth call of the day: %d %s %s", st, q, d)
	}
	// March 8, 2026: 2 am PST is 3 am PDT, and the day ends 23 hours
	// after it began. A second before its end the quota is still spent.
	clock(time.Date(2026, 3, 8, 23, 58, 0, 0, la))
	if st, m := googleCall(t, srv.URL); st != http.StatusOK {
		t.Fatalf("a new day: %d %v", st, m)
	}
	clock(time.Date(2026, 3, 8, 23, 59, 0, 0, la))
	googleCall(t, srv.URL)
	googleCall(t, srv.URL) // the day's third call
	clock(time.Date(2026, 3, 8, 23, 59, 59, 0, la))
	st, m = googleCall(t, srv.URL)
	if q, _ := quotaOf(t, m); st != http.StatusTooManyRequests || q != GoogleDayQuota {
		t.Fatalf("a second before midnight: %d %s", st, q)
	}
	clock(time.Date(2026, 3, 9, 0, 0, 0, 0, la))
	if st, m := googleCall(t, srv.URL); st != http.StatusOK {
		t.Fatalf("at midnight: %d %v", st, m)
	}
	calls := p.Calls()
	if len(calls) != 10 {
		t.Fatalf("%d calls recorded, want 10", len(calls))
	}
}

// TestGoogleTokens: with TokensPerMinute, a call's input tokens
// (X-Prompt-Tokens) count against the minute's tokens, a call beyond them
// is refused naming the tokens' quota, and an accepted call's answer
// reports its usageMetadata; a shortened Minute ends the minute sooner.
func TestGoogleTokens(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 3, 7, 12, 0, 0, 300_000_000, time.UTC)
	)
	p := &Google{TokensPerMinute: 100, Minute: 2 * time.Second, Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }}
	srv := httptest.NewServer(p)
	defer srv.Close()
	call := func(prompt, output string) (int, map[string]any) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("X-Prompt-Tokens", prompt)
		req.Header.Set("X-Output-Tokens", output)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		json.Unmarshal(b, &m)
		return resp.StatusCode, m
	}
	st, m := call("60", "25")
	u, _ := m["usageMetadata"].(map[string]any)
	if st != http.StatusOK || u["promptTokenCount"] != 60.0 || u["candidatesTokenCount"] != 25.0 || u["totalTokenCount"] != 85.0 {
		t.Fatalf("first call: %d %v", st, m)
	}
	st, m = call("41", "0")
	if q, d := quotaOf(t, m); st != http.StatusTooManyRequests || q != GoogleTokenQuota || d != "2s" {
		t.Fatalf("101 tokens in a minute: %d %s %s", st, q, d)
	}
	if st, m := call("40", "0"); st != http.StatusOK {
		t.Fatalf("100 tokens in a minute: %d %v", st, m)
	}
	mu.Lock()
	now = now.Add(1700 * time.Millisecond) // the next 2-second minute
	mu.Unlock()
	if st, m := call("100", "0"); st != http.StatusOK {
		t.Fatalf("the next minute: %d %v", st, m)
	}
	if st, _ := call("x", "0"); st != http.StatusBadRequest {
		t.Errorf("X-Prompt-Tokens x: %d, want 400", st)
	}
	if calls := p.Calls(); len(calls) != 4 || calls[0].Tokens != 60 || calls[1].Accepted {
		t.Errorf("calls %+v", calls)
	}
}
