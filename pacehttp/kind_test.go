package pacehttp

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/internal/redistest"
)

// OpenAI's and Anthropic's quotas of requests (Quota.Refill): the reset is
// the time until the quota is whole again, which a bucket refilled
// continuously (OpenAI, internal/provider.LLM) and a fixed window
// (internal/provider.Window in the openai dialect) both send. The count
// (lua/quota.lua) tells them apart from the answers: in a bucket every
// answer's (limit - remaining) / reset is its one refill rate, up to the
// rounding; in a window it grows as the window runs out. Here the answers
// are scripted, each one's headers as the provider would write them
// (internal/provider's rounding), read through ParseAdvice and
// Transport.answer; the script's state is read back from a real Redis.
// The times are simulated: the script reads the answers' counts and resets,
// not when they come, so the test asserts exact state.

// refillAnswer answers on key as an OpenAI-style quota of requests that
// says left of limit remain, full again (or at the window's end) in reset.
func refillAnswer(t *testing.T, tr *Transport, key string, left, limit int, reset time.Duration) {
	t.Helper()
	h := http.Header{}
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(limit))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(left))
	h.Set("x-ratelimit-reset-requests", provider.OpenAIDuration(reset))
	adv, bad := ParseAdvice(h, http.StatusOK, time.Now(), time.Hour)
	if len(bad) > 0 || !adv.Calls.Refill {
		t.Fatalf("headers %v: %v, refill %v", h, bad, adv.Calls.Refill)
	}
	tr.answer(context.Background(), key, 0, adv.Calls, time.Millisecond, relativeReset(h, adv.Calls))
}

// bucketAnswers answers on key as a bucket of limit requests refilled at
// rate per second would, after a call at each of the simulated times (s):
// its level after the call rounded down, and the time until it is full.
func bucketAnswers(t *testing.T, tr *Transport, key string, limit int, rate float64, at []float64) {
	t.Helper()
	level, last := float64(limit), 0.0
	for _, now := range at {
		level = math.Min(float64(limit), level+(now-last)*rate) - 1
		last = now
		reset := time.Duration((float64(limit) - level) / rate * 1e9)
		refillAnswer(t, tr, key, int(level), limit, reset)
	}
}

// kind returns the count's reading of key's quota: its kind ("" or "0"
// not known, "1" a window, "2" a bucket) and its refill per ms.
func kind(t *testing.T, tr *Transport, s *redistest.Server, key string) (string, float64) {
	t.Helper()
	m, err := s.Client.HGetAll(context.Background(), tr.quotaKeys(key)[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	f, _ := strconv.ParseFloat(m["f"], 64)
	return m["k"], f
}

// A bucket of 6 requests refilled at one every 100 s (OpenAI's "6m0s"
// resets, in whole seconds), called at these times (s).
var bucketCalls = []float64{0, 1, 2, 150, 151, 300, 301, 302, 500, 501, 600, 601}

// TestQuotaTellsBucket: a bucket's answers are read as a bucket once they
// agree on one refill rate with at least two counts of calls used; it is
// then paced at the least rate they allow (never above the true one), so
// with nothing left a call waits for one call's refill, not until full.
func TestQuotaTellsBucket(t *testing.T) {
	tr, s := quotaTransport(t)
	bucketAnswers(t, tr, "k", 6, 0.01, bucketCalls[:3])
	if k, _ := kind(t, tr, s, "k"); k == "2" {
		t.Fatalf("3 answers read as a bucket: too few to tell")
	}
	bucketAnswers(t, tr, "k", 6, 0.01, bucketCalls)
	k, f := kind(t, tr, s, "k")
	if k != "2" || f <= 0 || f > 0.01/1000 {
		t.Fatalf("a bucket's answers: kind %q, refill %g per ms; want 2 (a bucket) refilled at most at its rate, 1e-05 per ms", k, f)
	}
	// Empty, full again in 600 s: one call's refill is 100 s.
	refillAnswer(t, tr, "k", 0, 6, 600*time.Second)
	wait, id, known := takeOnce(t, tr, "k")
	if id == 0 || !known || wait < 99*time.Second || wait > 150*time.Second {
		t.Fatalf("an empty bucket refilled at 1 call per 100 s: take number %d, known %v, wait %v; want a take after about 100 s, not 600", id, known, wait)
	}
	// A take not sent gives its turn back: the next take has it.
	tr.drop(context.Background(), "k", id)
	again, id2, _ := takeOnce(t, tr, "k")
	if id2 == 0 || again > wait {
		t.Fatalf("a take dropped, then another: number %d, wait %v; want the dropped one's turn, %v", id2, again, wait)
	}
}

// TestQuotaTellsWindow: a fixed window's answers (its end fixed, the calls
// used growing) cannot share one refill rate: the count reads it as a
// window for good, even if later answers would fit a bucket, and a bucket
// whose answers stop fitting one is read as a window from then on.
func TestQuotaTellsWindow(t *testing.T) {
	tr, s := quotaTransport(t)
	// A window of 6 ending in 600 s: 1, 2, then 3 used, 10 s apart.
	for i := range 3 {
		refillAnswer(t, tr, "w", 5-i, 6, time.Duration(600-10*i)*time.Second)
	}
	if k, _ := kind(t, tr, s, "w"); k != "1" {
		t.Fatalf("a window's answers: kind %q, want 1", k)
	}
	refillAnswer(t, tr, "w", 0, 6, 570*time.Second)
	if wait, id, _ := takeOnce(t, tr, "w"); id != 0 || wait < 560*time.Second {
		t.Fatalf("a window with nothing left for 570 s: take number %d, wait %v; want none until its end", id, wait)
	}
	bucketAnswers(t, tr, "w", 6, 0.01, bucketCalls)
	if k, f := kind(t, tr, s, "w"); k != "1" || f != 0 {
		t.Fatalf("a window's answers, then a bucket's: kind %q, refill %g; want a window still", k, f)
	}

	// A bucket, then a window's end: 3 used with 10 s left.
	bucketAnswers(t, tr, "b", 6, 0.01, bucketCalls)
	if k, _ := kind(t, tr, s, "b"); k != "2" {
		t.Fatalf("a bucket's answers: kind %q, want 2", k)
	}
	refillAnswer(t, tr, "b", 3, 6, 10*time.Second)
	if k, f := kind(t, tr, s, "b"); k != "1" || f != 0 {
		t.Fatalf("a bucket's answers, then one no bucket at that rate sends: kind %q, refill %g; want a window", k, f)
	}
}

// TestQuotaTellsWindowDialect: internal/provider.Window's answers in
// OpenAI's dialect (a window of 50 calls per 5 s, reset to the
// millisecond), called 5 times 100 ms apart, are read as a window.
func TestQuotaTellsWindowDialect(t *testing.T) {
	tr, s := quotaTransport(t)
	// The window's end 4.2 s after the first call; resets as the provider
	// writes them.
	for i := range 5 {
		reset := 4200*time.Millisecond - time.Duration(i)*100*time.Millisecond
		h := http.Header{}
		h.Set("x-ratelimit-limit-requests", "50")
		h.Set("x-ratelimit-remaining-requests", strconv.Itoa(49-i))
		h.Set("x-ratelimit-reset-requests", reset.Round(time.Millisecond).String())
		adv, _ := ParseAdvice(h, http.StatusOK, time.Now(), time.Hour)
		tr.answer(context.Background(), "o", 0, adv.Calls, time.Millisecond, relativeReset(h, adv.Calls))
	}
	if k, f := kind(t, tr, s, "o"); k != "1" || f != 0 {
		t.Fatalf("a window's answers in OpenAI's dialect: kind %q, refill %g; want 1 (a window)", k, f)
	}
}

// TestQuotaTellsAnthropicWindow: a window of 20 calls per 2 s in
// Anthropic's dialect (its end an RFC 3339 time, read after a round trip
// of 200 ms) is never read as a bucket: its resets are all within twice
// what the time's rounding and the round trip hide, so its answers tell
// nothing, and it stays counted as a window. (Read from the ranges of
// every answer, 12 calls answered over the window's last 1.3 s, the
// fleet's first, agreed on a rate from 7.9 to 10 a second: a bucket, paced
// into refusals until the next window's answers said otherwise.)
func TestQuotaTellsAnthropicWindow(t *testing.T) {
	tr, s := quotaTransport(t)
	end := time.Now().Add(3 * time.Second).Truncate(time.Second)
	for i := range 12 {
		now := end.Add(-1300*time.Millisecond + time.Duration(i)*100*time.Millisecond)
		h := http.Header{}
		h.Set("anthropic-ratelimit-requests-limit", "20")
		h.Set("anthropic-ratelimit-requests-remaining", strconv.Itoa(19-i))
		h.Set("anthropic-ratelimit-requests-reset", end.UTC().Format(time.RFC3339))
		adv, bad := ParseAdvice(h, http.StatusOK, now, time.Hour)
		if len(bad) > 0 || !adv.Calls.Refill {
			t.Fatalf("headers %v: %v, refill %v", h, bad, adv.Calls.Refill)
		}
		tr.answer(context.Background(), "a", 0, adv.Calls, 200*time.Millisecond, relativeReset(h, adv.Calls))
		if k, _ := kind(t, tr, s, "a"); k == "2" {
			t.Fatalf("after %d answers of a window of 2 s in Anthropic's dialect: read as a bucket", i+1)
		}
	}
}

// TestQuotaTellsNothingFromZero: an answer with a reset of 0 and no
// rounding (a full bucket, exact) tells no rate: no division by zero, the
// kind not known.
func TestQuotaTellsNothingFromZero(t *testing.T) {
	tr, s := quotaTransport(t)
	for range 10 {
		if _, err := tr.runQuota(context.Background(), "z", "answer", 1000, 0, 5, 0, 10, "1", 1, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	m, err := s.Client.HGetAll(context.Background(), tr.quotaKeys("z")[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if m["k"] != "0" || m["q"] != "0" || m["h"] != "-1" || m["m"] != "0" {
		t.Fatalf("answers with a reset of 0: state %v; want nothing told", m)
	}
}
