package pacehttp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/internal/syncbuf"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// googleBody is a Gemini 429's body: a QuotaFailure naming quotaID and a
// RetryInfo of delay.
func googleBody(quotaID, delay string) string {
	return `{"error":{"code":429,"message":"You exceeded your current quota","status":"RESOURCE_EXHAUSTED","details":[` +
		`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_requests","quotaId":"` + quotaID + `","quotaDimensions":{"location":"global","model":"gemini-2.0-flash"},"quotaValue":"1500"}]},` +
		`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"` + delay + `"}]}}`
}

const (
	perDay    = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"
	perMinute = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
)

// TestParseBody: each provider's body signal, the day's end in Pacific
// time on the days the clocks change, and bodies that say nothing or
// cannot be used.
func TestParseBody(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	ordinary := time.Date(2026, 11, 26, 4, 0, 0, 0, la)
	tests := []struct {
		name string
		body string
		now  time.Time
		zone *time.Location
		want pacehttp.BodyAdvice
		bad  bool
	}{
		{name: "google minute", body: googleBody(perMinute, "43s"), now: ordinary,
			want: pacehttp.BodyAdvice{Wait: 43 * time.Second, Source: "google.rpc.RetryInfo", Quota: perMinute, Message: "You exceeded your current quota"}},
		{name: "google retryDelay with a fraction", body: googleBody(perMinute, "0.250s"), now: ordinary,
			want: pacehttp.BodyAdvice{Wait: 250 * time.Millisecond, Source: "google.rpc.RetryInfo", Quota: perMinute, Message: "You exceeded your current quota"}},
		{name: "google day, ordinary", body: googleBody(perDay, "43s"), now: ordinary,
			want: pacehttp.BodyAdvice{Wait: 20 * time.Hour, Source: "google.rpc.QuotaFailure", Quota: perDay, Daily: true, Message: "You exceeded your current quota"}},
		// March 8, 2026 has 23 hours in Los Angeles, November 1 has 25.
		{name: "google day, clocks forward", body: googleBody(perDay, "43s"), now: time.Date(2026, 3, 8, 0, 30, 0, 0, la),
			want: pacehttp.BodyAdvice{Wait: 22*time.Hour + 30*time.Minute, Source: "google.rpc.QuotaFailure", Quota: perDay, Daily: true, Message: "You exceeded your current quota"}},
		{name: "google day, clocks back", body: googleBody(perDay, "43s"), now: time.Date(2026, 11, 1, 0, 30, 0, 0, la),
			want: pacehttp.BodyAdvice{Wait: 24*time.Hour + 30*time.Minute, Source: "google.rpc.QuotaFailure", Quota: perDay, Daily: true, Message: "You exceeded your current quota"}},
		// In the day's last 43 s, RetryInfo's 43 s is the longer (CI ran
		// TestBodyWaits at 23:59:49 in Los Angeles, and its window for the
		// pause, to midnight, missed it).
		{name: "google day, its last seconds", body: googleBody(perDay, "43s"), now: time.Date(2026, 11, 30, 23, 59, 49, 0, la),
			want: pacehttp.BodyAdvice{Wait: 43 * time.Second, Source: "google.rpc.RetryInfo", Quota: perDay, Daily: true, Message: "You exceeded your current quota"}},
		{name: "google day in another zone", body: googleBody(perDay, "43s"), now: time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC), zone: time.UTC,
			want: pacehttp.BodyAdvice{Wait: 12 * time.Hour, Source: "google.rpc.QuotaFailure", Quota: perDay, Daily: true, Message: "You exceeded your current quota"}},
		{name: "openai requests", body: provider.OpenAIRefusal, now: ordinary,
			want: pacehttp.BodyAdvice{Quota: "requests", Message: "Rate limit reached for requests"}},
		{name: "openai tokens", body: `{"error":{"message":"Rate limit reached for tokens","type":"tokens","param":null,"code":"rate_limit_exceeded"}}`, now: ordinary,
			want: pacehttp.BodyAdvice{Quota: "tokens", Message: "Rate limit reached for tokens"}},
		{name: "openai insufficient_quota", body: `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`, now: ordinary,
			want: pacehttp.BodyAdvice{Billing: true, Message: "You exceeded your current quota"}},
		{name: "shopify cost", body: `{"data":{},"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":46,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":954,"restoreRate":50.0}}}}`, now: ordinary,
			want: pacehttp.BodyAdvice{Cost: &pacehttp.GraphQLCost{Requested: 101, Actual: 46, HasActual: true, Maximum: 1000, Available: 954, RestoreRate: 50, HasStatus: true}}},
		{name: "shopify throttled", body: `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":101,"actualQueryCost":null,"throttleStatus":{"maximumAvailable":1000.0,"currentlyAvailable":54,"restoreRate":50.0}}}}`, now: ordinary,
			want: pacehttp.BodyAdvice{Wait: 940 * time.Millisecond, Source: "shopify-throttled", Throttled: true, Message: "Throttled",
				Cost: &pacehttp.GraphQLCost{Requested: 101, Maximum: 1000, Available: 54, RestoreRate: 50, HasStatus: true}}},
		{name: "html", body: "<html><body>429 Too Many Requests</body></html>", now: ordinary},
		{name: "cut short", body: googleBody(perDay, "43s")[:200], now: ordinary},
		{name: "another API's errors", body: `{"errors":"too many","error":"slow down","extensions":[1]}`, now: ordinary},
		{name: "bad retryDelay", body: googleBody(perMinute, "soon"), now: ordinary, bad: true,
			want: pacehttp.BodyAdvice{Quota: perMinute, Message: "You exceeded your current quota"}},
		{name: "negative retryDelay", body: googleBody(perMinute, "-3s"), now: ordinary, bad: true,
			want: pacehttp.BodyAdvice{Quota: perMinute, Message: "You exceeded your current quota"}},
		{name: "bad throttleStatus", body: `{"errors":[{"message":"Throttled","extensions":{"code":"THROTTLED"}}],"extensions":{"cost":{"requestedQueryCost":101,"throttleStatus":{"maximumAvailable":1000,"currentlyAvailable":54,"restoreRate":-50}}}}`, now: ordinary, bad: true,
			want: pacehttp.BodyAdvice{Throttled: true, Message: "Throttled"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := pacehttp.ParseBody([]byte(tc.body), tc.now, tc.zone)
			assert.Equal(t, tc.want, got)
			if tc.bad {
				require.Len(t, errs, 1)
				assert.ErrorIs(t, errs[0], pacehttp.ErrBadBody)
			} else {
				assert.Empty(t, errs)
			}
		})
	}
}

// closeCounter counts Close calls on a body.
type countingBody struct {
	io.Reader
	closed int
}

func (b *countingBody) Close() error { b.closed++; return nil }

// TestPeekBody: a body longer than the bound is not taken whole, and the
// caller reads exactly the bytes sent, and closes the original.
func TestPeekBody(t *testing.T) {
	sent := make([]byte, pacehttp.BodyLimit+4096)
	rand.Read(sent)
	for _, n := range []int{len(sent) - 1, len(sent), len(sent) + 1} {
		body := &countingBody{Reader: bytes.NewReader(sent)}
		resp := &http.Response{Body: body}
		head, whole := pacehttp.PeekBody(resp, n)
		assert.Equal(t, n >= len(sent), whole, "n %d", n)
		assert.Equal(t, sent[:min(n, len(sent))], head)
		got, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(sent, got), "the caller reads the bytes sent")
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, 1, body.closed)
	}
}

// refusal answers 429 with body and headers h.
func refusal(body string, h map[string]string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for k, v := range h {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, body)
	}
}

// paused returns how long srv's host is paused on l.
func paused(t *testing.T, l *reserve.Limiter, url string) time.Duration {
	t.Helper()
	snap, err := l.Peek(context.Background(), reserve.Single(strings.TrimPrefix(url, "http://"), fast, 1))
	require.NoError(t, err)
	return snap.Paused
}

// TestBodyWaits: the pause after a refusal whose headers do not say how
// long comes from its body (a Google RetryInfo; a quota per day, till
// midnight Pacific time, though RetryInfo says 43 s; the quota OpenAI's
// error type names, of two the headers say are exhausted), and the body
// reaches the caller as it was sent. With IgnoreBodies, the headers'
// reading alone: DefaultWait, or the later reset.
func TestBodyWaits(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	require.NoError(t, err)
	openai := map[string]string{
		"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20s",
		"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "50m0s",
	}
	tests := []struct {
		name     string
		body     string
		headers  map[string]string
		min, max time.Duration // the pause, read just after the refusal (min -1: to midnight in Los Angeles, at least 43 s)
		ignored  time.Duration // the most with IgnoreBodies (its least: 1 ms)
	}{
		{name: "retryinfo", body: googleBody(perMinute, "43s"), min: 40 * time.Second, max: 43 * time.Second, ignored: time.Millisecond},
		{name: "daily", body: googleBody(perDay, "43s"), min: -1, ignored: time.Millisecond},
		{name: "retry-after wins", body: googleBody(perMinute, "43s"), headers: map[string]string{"Retry-After": "7"}, min: 5 * time.Second, max: 7 * time.Second, ignored: 7 * time.Second},
		{name: "a day beats retry-after", body: googleBody(perDay, "43s"), headers: map[string]string{"Retry-After": "7"}, min: -1, ignored: 7 * time.Second},
		{name: "openai's type", body: provider.OpenAIRefusal, headers: openai, min: 18 * time.Second, max: 20 * time.Second, ignored: 50 * time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, ignore := range []bool{false, true} {
				ls := fleet(t, 1)
				srv := newServer(t, refusal(tc.body, tc.headers))
				c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, MaxRetries: -1,
					DefaultWait: time.Millisecond, MaxWait: 25 * time.Hour, IgnoreBodies: ignore})}
				before := time.Now()
				resp, err := c.Get(srv.URL)
				require.NoError(t, err)
				after := time.Now()
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, tc.body, string(got), "the body reaches the caller")
				p := paused(t, ls[0], srv.URL)
				if ignore {
					assert.LessOrEqual(t, p, tc.ignored, "ignored")
					assert.Greater(t, p, tc.ignored-3*time.Second, "ignored")
					continue
				}
				if tc.min >= 0 {
					assert.True(t, p > tc.min && p <= tc.max, "paused %v, want (%v, %v]", p, tc.min, tc.max)
					continue
				}
				// To midnight in Los Angeles, and no less than RetryInfo's
				// 43 s (in the last 43 s of the day, those), as of when the
				// answer came: between before and after, which may lie
				// either side of midnight. The pause is counted from Redis's
				// clock when it was made, a few ms after the answer: a
				// second's slack.
				want := func(at time.Time) (lo, hi time.Duration) {
					y, m, d := at.In(la).Date()
					hi = max(time.Date(y, m, d+1, 0, 0, 0, 0, la).Sub(at), 43*time.Second) + time.Second
					return hi - time.Minute, hi
				}
				lo1, hi1 := want(before)
				lo2, hi2 := want(after)
				assert.True(t, (p > lo1 && p <= hi1) || (p > lo2 && p <= hi2), "paused %v, want (%v, %v] or (%v, %v]", p, lo1, hi1, lo2, hi2)
			}
		})
	}
}

// TestBodyDailyCapped: a quota per day's pause is cut to MaxWait (1 h by
// default), and says so in the log. The day resets in a zone where it is
// noon now, so the day's end is 12 h away whatever the hour the test runs
// at (in Pacific time it is less than MaxWait away for an hour a day).
func TestBodyDailyCapped(t *testing.T) {
	ls := fleet(t, 1)
	srv := newServer(t, refusal(googleBody(perDay, "43s"), nil))
	var logs syncbuf.Buffer
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, MaxRetries: -1,
		DailyReset: noonZone(time.Now()),
		Logger:     slog.New(slog.NewTextHandler(&logs, nil))})}
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	p := paused(t, ls[0], srv.URL)
	assert.True(t, p > 59*time.Minute && p <= time.Hour, "paused %v", p)
	assert.Contains(t, logs.String(), "longer wait than MaxWait")
}

// noonZone returns a fixed zone in which now is between noon and one
// o'clock.
func noonZone(now time.Time) *time.Location {
	u := now.UTC()
	h := 12 - u.Hour() // noon's offset from UTC's hour, -11..12
	return time.FixedZone("noon", h*3600)
}

// TestInsufficientQuota: OpenAI's insufficient_quota is no rate limit: the
// request fails with ErrInsufficientQuota at once, without a retry or a
// pause, and the slot is given back.
func TestInsufficientQuota(t *testing.T) {
	ls := fleet(t, 1)
	body := `{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}`
	srv := newServer(t, refusal(body, nil), refusal(body, nil), refusal(body, nil))
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast})}
	_, err := c.Get(srv.URL)
	require.ErrorIs(t, err, pacehttp.ErrInsufficientQuota)
	assert.Contains(t, err.Error(), "check your plan")
	arrived, _ := srv.requests()
	assert.Len(t, arrived, 1, "not retried")
	assert.Zero(t, paused(t, ls[0], srv.URL), "no pause")
}

// TestBadBodyLogged: a body signal that cannot be used is logged once a
// minute per key, and the wait falls back to DefaultWait.
func TestBadBodyLogged(t *testing.T) {
	ls := fleet(t, 1)
	var answers []func(http.ResponseWriter)
	for range 5 {
		answers = append(answers, refusal(googleBody(perMinute, "soon"), nil))
	}
	srv := newServer(t, answers...)
	var logs syncbuf.Buffer
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, MaxRetries: -1, DefaultWait: time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})}
	for range 5 {
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, googleBody(perMinute, "soon"), string(b))
		time.Sleep(2 * time.Millisecond) // past the pause
	}
	assert.Equal(t, 1, strings.Count(logs.String(), "retryDelay"), "%s", logs.String())
}

// TestLargeRefusalBody: a 429 whose body is longer than BodyLimit is not
// parsed (DefaultWait), and reaches the caller whole.
func TestLargeRefusalBody(t *testing.T) {
	ls := fleet(t, 1)
	big := googleBody(perMinute, "43s")
	big = big[:len(big)-1] + `,"padding":"` + strings.Repeat("x", pacehttp.BodyLimit) + `"}`
	srv := newServer(t, refusal(big, nil))
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, MaxRetries: -1, DefaultWait: 5 * time.Second})}
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, big, string(b))
	p := paused(t, ls[0], srv.URL)
	assert.True(t, p > 0 && p <= 5*time.Second, "paused %v: DefaultWait, not RetryInfo's 43 s", p)
}

// shopifyCall makes a POST of a query of requested points, that costs
// actual.
func shopifyCall(ctx context.Context, c *http.Client, url string, requested, actual float64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"query":"{ shop { name } }"}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("X-Query-Cost", strconv.FormatFloat(requested, 'f', -1, 64))
	req.Header.Set("X-Actual-Cost", strconv.FormatFloat(actual, 'f', -1, 64))
	return c.Do(req)
}

// shopifyRoute reserves each query's X-Query-Cost on one bucket of points.
func shopifyRoute(pol reserve.Policy) func(*http.Request) (pacehttp.Route, error) {
	return func(r *http.Request) (pacehttp.Route, error) {
		n, err := strconv.ParseFloat(r.Header.Get("X-Query-Cost"), 64)
		return pacehttp.Route{Key: "shop", Policy: pol, Cost: reserve.Cost{"points": n}}, err
	}
}

// TestShopifyThrottled: with ShopifyThrottle, a 200 THROTTLED is a
// refusal: the key pauses for (requested - available) / restoreRate, and
// the answer reaches the caller as sent. Without it the 200 passes. The
// calls accepted settle at their actualQueryCost (ShopifyCost).
func TestShopifyThrottled(t *testing.T) {
	for _, on := range []bool{true, false} {
		ls := fleet(t, 1)
		p := &provider.Shopify{Maximum: 100, RestoreRate: 50}
		srv := httptest.NewServer(p)
		defer srv.Close()
		// A policy far beyond the bucket: the provider throttles. (Its
		// slow restore leaves the settles to read in the band.)
		pol := reserve.Policy{{Name: "points", Limit: reserve.Limit{Rate: 1, Burst: 10000}}}
		c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Route: shopifyRoute(pol), MaxRetries: -1,
			ShopifyThrottle: on, Settle: pacehttp.ShopifyCost("points")})}
		var last []byte
		for range 3 {
			resp, err := shopifyCall(context.Background(), c, srv.URL, 50, 30)
			require.NoError(t, err)
			last, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		calls := p.Calls()
		require.Len(t, calls, 3)
		require.True(t, calls[2].Throttled, "the third query: %+v", calls)
		assert.Contains(t, string(last), `"THROTTLED"`, "the answer reaches the caller")
		var parsed map[string]any
		assert.NoError(t, json.Unmarshal(last, &parsed))
		snap, err := ls[0].Peek(context.Background(), reserve.Request{Key: "shop", Policy: pol, Cost: reserve.Cost{"points": 1}})
		require.NoError(t, err)
		if on {
			// (50 - 40) / 50: 0.2 s.
			assert.True(t, snap.Paused > 0 && snap.Paused <= 200*time.Millisecond, "paused %v", snap.Paused)
		} else {
			assert.Zero(t, snap.Paused)
			assert.InDelta(t, 10000-110, snap.Bands[0].Value, 5, "two queries settled at 30, the third's estimate stands (no actualQueryCost)")
		}
	}
}

// TestShopifyFleet: 2 processes of 4 goroutines reserve each query's
// requested cost on a bucket as Shopify's (100 points, 50 restored a
// second) and settle its actual cost (a third to all of it) from the
// body: no query is throttled, and the bucket's points are used. An exact
// count from the provider's log: a slow machine makes calls late, which
// only restores more points before they arrive.
func TestShopifyFleet(t *testing.T) {
	p := &provider.Shopify{Maximum: 100, RestoreRate: 50, Jitter: 5 * time.Millisecond}
	srv := httptest.NewServer(p)
	defer srv.Close()
	pol := reserve.Policy{{Name: "points", Limit: reserve.Limit{Rate: 50, Burst: 100}}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i, l := range fleet(t, 2) {
		c := &http.Client{Transport: transport(t, l, pacehttp.Options{Route: shopifyRoute(pol), MaxRetries: -1,
			ShopifyThrottle: true, Settle: pacehttp.ShopifyCost("points")})}
		for g := range 4 {
			wg.Go(func() {
				for n := 0; ctx.Err() == nil; n++ {
					requested := float64(10 + 5*((i+g+n)%3))
					resp, err := shopifyCall(ctx, c, srv.URL, requested, requested*float64(1+(i+n)%3)/3)
					if err != nil {
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
		}
	}
	wg.Wait()
	var throttled int
	var spent float64
	for _, c := range p.Calls() {
		if c.Throttled {
			throttled++
		}
		spent += c.Actual
	}
	t.Logf("%d queries, %d throttled, %.0f points spent", len(p.Calls()), throttled, spent)
	if !assert.Zero(t, throttled) {
		// The provider's log, for whoever finds the rare failure (seen
		// once, in CI on 2026-12-04: 19 queries, 1 throttled; not
		// reproduced in 260 runs). The likely cause, since mended: the
		// provider read its clock before taking its lock, so a query
		// whose goroutine lost the CPU in between was judged at an
		// earlier instant than the query served meanwhile, and the
		// bucket lost the points of the gap
		// (provider.TestShopifyTakesQueriesInOrder). Calls out of
		// order in this log would say it is back.
		calls := p.Calls()
		for _, c := range calls {
			t.Logf("at %8.3f ms: requested %2.0f, actual %5.2f, throttled %v, available after %6.2f",
				float64(c.At.Sub(calls[0].At).Microseconds())/1e3, c.Requested, c.Actual, c.Throttled, c.Available)
		}
	}
	assert.Greater(t, spent, 100.0, "more than the bucket: the settles gave points back")
}

// TestGoogleDaily: a fleet of 2 processes of 4 goroutines against a
// Google-like API whose quota per day is 20 (and its retryDelay 43 s at
// most) spends the 20, and then the first refusal pauses the key until
// midnight Pacific time for the whole fleet: no more refusals than the
// calls on their way when it came, one per goroutine. Read with
// IgnoreBodies, the same refusals pause the key for DefaultWait (a
// second) each: the fleet keeps calling into the spent quota (logged as a
// figure).
func TestGoogleDaily(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		p := &provider.Google{PerDay: 20}
		srv := httptest.NewServer(p)
		ls := fleet(t, 2)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		var wg sync.WaitGroup
		for _, l := range ls {
			c := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, MaxRetries: -1, MaxWait: 25 * time.Hour, IgnoreBodies: ignore})}
			for range 4 {
				wg.Go(func() {
					for ctx.Err() == nil {
						req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, nil)
						resp, err := c.Do(req)
						if err != nil {
							continue
						}
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				})
			}
		}
		wg.Wait()
		cancel()
		srv.Close()
		var accepted, refused int
		for _, c := range p.Calls() {
			if c.Accepted {
				accepted++
			} else {
				refused++
			}
		}
		t.Logf("ignore bodies %v: %d accepted, %d refused", ignore, accepted, refused)
		assert.Equal(t, 20, accepted)
		if ignore {
			continue // a figure (its refusals depend on the run's pace), no bound
		}
		assert.Positive(t, refused)
		assert.LessOrEqual(t, refused, 8, "one refusal per goroutine at most")
		la, err := time.LoadLocation("America/Los_Angeles")
		require.NoError(t, err)
		now := time.Now().In(la)
		y, m, d := now.Date()
		midnight := time.Date(y, m, d+1, 0, 0, 0, 0, la).Sub(now)
		got := paused(t, ls[0], srv.URL)
		assert.True(t, got > midnight-time.Minute && got <= midnight+time.Second, "paused %v, midnight in %v", got, midnight)
	}
}

// TestUnavailableRetryInfo: a 503 whose body carries Google's RetryInfo
// is a refusal, paused for its delay, as a 503 with Retry-After is; one
// without is the provider's answer, passed through.
func TestUnavailableRetryInfo(t *testing.T) {
	ls := fleet(t, 1)
	unavailable := func(body string) func(http.ResponseWriter) {
		return func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, body)
		}
	}
	srv := newServer(t, unavailable(`{"error":{"code":503,"status":"UNAVAILABLE"}}`), unavailable(googleBody(perMinute, "43s")))
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, MaxRetries: -1, DefaultWait: time.Millisecond})}
	for i, want := range []time.Duration{0, 40 * time.Second} {
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		p := paused(t, ls[0], srv.URL)
		if want == 0 {
			assert.Zero(t, p, "answer %d", i+1)
		} else {
			assert.True(t, p > want && p <= 43*time.Second, "answer %d: paused %v", i+1, p)
		}
	}
}
