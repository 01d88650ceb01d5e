package combo

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	iprovider "github.com/pacer-go/pacer/internal/provider"
	"github.com/pacer-go/pacer/pacehttp"
)

// TestBodyDraw: the seeds draw each body variant of KeyHTTP's refusals,
// from a stream of their own (the same seed, the same variant), OpenAI's
// in the OpenAI dialect and only there.
func TestBodyDraw(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 100; seed++ {
		sc := Generate(seed)
		if sc.Body != httpBody(seed, sc.Dialect) {
			t.Fatalf("seed %d: body %q, drawn again %q", seed, sc.Body, httpBody(seed, sc.Dialect))
		}
		if (sc.Body == bodyOpenAI) != (sc.Dialect == iprovider.DialectOpenAI) {
			t.Errorf("seed %d: the %s body in the %s dialect: OpenAI's body goes with OpenAI's dialect", seed, sc.bodyOf(), sc.Dialect)
		}
		seen[sc.bodyOf()]++
	}
	for _, b := range []string{"reply", bodyOpenAI, bodyGoogle} {
		if seen[b] == 0 {
			t.Errorf("no seed of 1-100 draws the %s body: %v", b, seen)
		}
	}
	if len(seen) != 3 {
		t.Errorf("bodies drawn %v, want only reply, openai, google", seen)
	}
}

// answered is the provider's answer to rep on KeyHTTP with the given
// dialect and body variant.
func answered(t *testing.T, dialect, body string, rep Reply) *httptest.ResponseRecorder {
	t.Helper()
	p := newProvider(dialect, body)
	w := httptest.NewRecorder()
	p.answer(w, KeyHTTP, rep)
	return w
}

// refusal is a 429 on KeyHTTP's window, with 1.4990001 s to wait.
func refusal(why string) Reply {
	now := time.Date(2026, 11, 26, 12, 0, 1, 0, time.UTC).UnixNano()
	return Reply{Status: http.StatusTooManyRequests, Retry: int64(1499000100 * time.Nanosecond), Arrive: now, Why: why,
		count: &windowCount{n: 24, left: 0, end: now + int64(time.Second), per: 2 * time.Second}}
}

// replyOf returns the Reply in w's replyHeader.
func replyOf(t *testing.T, w *httptest.ResponseRecorder) Reply {
	t.Helper()
	var rep Reply
	if err := json.Unmarshal([]byte(w.Header().Get(replyHeader)), &rep); err != nil {
		t.Fatalf("%s %q: %v", replyHeader, w.Header().Get(replyHeader), err)
	}
	return rep
}

// TestGoogleRefusal: in the google variant a 429 on KeyHTTP has Google's
// body (RetryInfo, the wait rounded up to the millisecond, and a
// QuotaFailure per minute for a refusal by the limit) and no rate-limit
// header; pacehttp reads the wait from the body.
func TestGoogleRefusal(t *testing.T) {
	for _, tc := range []struct {
		why, body, quota string
	}{
		{"limit", `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[` +
			`{"@type":"type.googleapis.com/google.rpc.QuotaFailure","violations":[{"quotaMetric":"generativelanguage.googleapis.com/generate_content_requests","quotaId":"GenerateRequestsPerMinutePerProjectPerModel-FreeTier","quotaValue":"24"}]},` +
			`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.500s"}]}}`, iprovider.GoogleMinuteQuota},
		{"announced", `{"error":{"code":429,"message":"You exceeded your current quota, please check your plan and billing details.","status":"RESOURCE_EXHAUSTED","details":[` +
			`{"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"1.500s"}]}}`, ""},
	} {
		rep := refusal(tc.why)
		w := answered(t, iprovider.DialectDraft10, bodyGoogle, rep)
		if w.Code != http.StatusTooManyRequests {
			t.Fatalf("%s: status %d", tc.why, w.Code)
		}
		if got := w.Body.String(); got != tc.body {
			t.Errorf("%s: body\n%s\nwant\n%s", tc.why, got, tc.body)
		}
		var names []string
		for h := range w.Header() {
			names = append(names, h)
		}
		slices.Sort(names)
		if want := []string{"Content-Type", replyHeader}; !slices.Equal(names, want) {
			t.Errorf("%s: headers %v, want only %v (no rate-limit header)", tc.why, names, want)
		}
		if got := replyOf(t, w); got.Status != rep.Status || got.Retry != rep.Retry || got.Arrive != rep.Arrive || got.Why != rep.Why {
			t.Errorf("%s: %s %+v, want %+v", tc.why, replyHeader, got, rep)
		}
		adv, errs := pacehttp.ParseBody(w.Body.Bytes(), time.Unix(0, rep.Arrive), nil)
		if len(errs) > 0 || adv.Wait != 1500*time.Millisecond || adv.Source != "google.rpc.RetryInfo" || adv.Quota != tc.quota || adv.Daily {
			t.Errorf("%s: pacehttp reads %+v %v, want a wait of 1.5s from RetryInfo, quota %q, not daily", tc.why, adv, errs, tc.quota)
		}
		if head, _ := pacehttp.ParseAdvice(w.Header(), w.Code, time.Unix(0, rep.Arrive), time.Hour); head.Wait != 0 || head.Exhausted {
			t.Errorf("%s: the headers advise %+v, want nothing", tc.why, head)
		}
	}
	// A 200 in the google variant reports the counts in the dialect.
	ok := refusal("")
	ok.Status, ok.Retry, ok.count.left = http.StatusOK, 0, 5
	w := answered(t, iprovider.DialectDraft10, bodyGoogle, ok)
	if w.Header().Get("RateLimit") == "" || w.Header().Get(replyHeader) != "" || w.Header().Get("Retry-After") != "" {
		t.Errorf("a 200 in the google variant: headers %v, want the draft-10 counts and no %s", w.Header(), replyHeader)
	}
}

// TestOpenAIRefusal: in the openai variant a 429 on KeyHTTP has OpenAI's
// error body (type "requests") beside OpenAI's headers and Retry-After.
func TestOpenAIRefusal(t *testing.T) {
	rep := refusal("limit")
	w := answered(t, iprovider.DialectOpenAI, bodyOpenAI, rep)
	if got := w.Body.String(); got != iprovider.OpenAIRefusal {
		t.Errorf("body %s, want %s", got, iprovider.OpenAIRefusal)
	}
	for h, want := range map[string]string{"Retry-After": "2", "X-Ratelimit-Remaining-Requests": "0", "X-Ratelimit-Limit-Requests": "24", "X-Ratelimit-Reset-Requests": "1s", "Content-Type": "application/json"} {
		if got := w.Header().Get(h); got != want {
			t.Errorf("%s: %q, want %q", h, got, want)
		}
	}
	if got := replyOf(t, w); got.Retry != rep.Retry || got.Why != "limit" {
		t.Errorf("%s %+v, want %+v", replyHeader, got, rep)
	}
	adv, errs := pacehttp.ParseBody(w.Body.Bytes(), time.Unix(0, rep.Arrive), nil)
	if len(errs) > 0 || adv.Quota != "requests" || adv.Wait != 0 || adv.Billing {
		t.Errorf("pacehttp reads %+v %v, want the requests quota and no wait", adv, errs)
	}
}

// TestReplyRefusal: without a body variant, and on the other keys, a 429
// carries the runner's Reply as ever.
func TestReplyRefusal(t *testing.T) {
	rep := refusal("limit")
	for _, tc := range []struct{ key, body string }{{KeyHTTP, ""}, {KeyHTTP + "x", bodyGoogle}, {KeySliding, bodyOpenAI}} {
		p := newProvider(iprovider.DialectGitHub, tc.body)
		w := httptest.NewRecorder()
		p.answer(w, tc.key, rep)
		var got Reply
		if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || !reflect.DeepEqual(got, Reply{Status: rep.Status, Retry: rep.Retry, Arrive: rep.Arrive, Why: rep.Why}) {
			t.Errorf("%s, %q: body %s (%v)", tc.key, tc.body, w.Body, err)
		}
		if w.Header().Get(replyHeader) != "" || w.Header().Get("Retry-After") != "2" {
			t.Errorf("%s, %q: headers %v", tc.key, tc.body, w.Header())
		}
	}
}
