package pacehttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// The provider's body: the rate-limit signals some providers send in a
// response's body rather than its headers (ParseBody), read from at most
// BodyLimit bytes, the body left whole for the caller (PeekBody).

// BodyLimit is the most bytes of a response's body pacehttp reads for a
// rate-limit signal. A body longer than it is not parsed (no signal from
// it), and reaches the caller whole all the same.
const BodyLimit = 64 << 10

// ErrInsufficientQuota is wrapped by the error a Transport returns for a
// refusal whose body says the account's quota of spending is used up
// (OpenAI's "insufficient_quota"): a billing matter, not a rate limit. No
// wait would help, so the key is not paused and the request is not retried.
var ErrInsufficientQuota = errors.New("pacehttp: the provider refused for insufficient quota (billing, not a rate limit)")

// ErrBadBody is wrapped by every error ParseBody reports.
var ErrBadBody = errors.New("pacehttp: bad rate-limit signal in a response body")

// BodyAdvice is what a response's body says of a rate limit (ParseBody).
type BodyAdvice struct {
	// Wait is how long the body asks callers to wait: Google's RetryInfo
	// retryDelay; until the reset of a quota per day that Google's
	// QuotaFailure names (Daily); Shopify's (requestedQueryCost -
	// currentlyAvailable) / restoreRate for a THROTTLED answer. 0: none.
	Wait time.Duration
	// Source names what Wait came from: "google.rpc.RetryInfo",
	// "google.rpc.QuotaFailure" (a quota per day), "shopify-throttled";
	// "" when Wait is 0.
	Source string
	// Quota names the quota the body says was hit: the quotaId of Google's
	// QuotaFailure (the daily one, if any), or OpenAI's error type
	// ("requests", "tokens"). "" when the body names none.
	Quota string
	// Daily is true when Google's QuotaFailure names a quota per day (a
	// quotaId containing "PerDay"): Wait is then at least the time to the
	// day's end in the zone given to ParseBody (midnight Pacific time by
	// default), whatever RetryInfo says.
	Daily bool
	// Throttled is true for Shopify's GraphQL refusal, an error whose
	// extensions.code is "THROTTLED" (sent with status 200).
	Throttled bool
	// Billing is true for OpenAI's "insufficient_quota": no wait helps.
	Billing bool
	// Message is the provider's message for the refusal, if any.
	Message string
	// Cost is Shopify's extensions.cost, when the body has one.
	Cost *GraphQLCost
}

// GraphQLCost is Shopify's GraphQL extensions.cost: the query's cost in
// points and the state of the caller's leaky bucket of points.
type GraphQLCost struct {
	// Requested is requestedQueryCost, the cost reserved before the query
	// ran; Actual is actualQueryCost, what it cost (HasActual false when
	// the body has none, as in a THROTTLED answer).
	Requested float64
	Actual    float64
	HasActual bool
	// The bucket (throttleStatus; HasStatus false when absent): its
	// capacity, the points available after this query, and the points
	// restored per second.
	Maximum     float64
	Available   float64
	RestoreRate float64
	HasStatus   bool
}

// Pacific is the zone whose midnight Google's quotas per day reset at
// ("Requests per day reset at midnight Pacific time", Gemini API's rate
// limits; Google Cloud's quotas per day likewise), the default of
// Options.DailyReset. It is America/Los_Angeles from the system's zone
// database; where none can be loaded (import time/tzdata to embed one), a
// fixed UTC-8, whose midnight is 1 am in summer: an hour after the reset,
// never before it.
func Pacific() *time.Location {
	pacificOnce.Do(func() {
		loc, err := time.LoadLocation("America/Los_Angeles")
		if err != nil {
			loc = time.FixedZone("PST", -8*60*60)
		}
		pacific = loc
	})
	return pacific
}

var (
	pacificOnce sync.Once
	pacific     *time.Location
)

// nextMidnight returns the first midnight in loc after now: the day's end,
// 23 or 25 hours after its start on the days the clocks change.
func nextMidnight(now time.Time, loc *time.Location) time.Time {
	y, m, d := now.In(loc).Date()
	return time.Date(y, m, d+1, 0, 0, 0, 0, loc)
}

// ParseBody reads body, the start of a response's body, received at now,
// for the rate-limit signals providers send there:
//
//   - Google (Gemini, Google Cloud APIs): an "error" whose "details" hold a
//     google.rpc.RetryInfo, whose retryDelay ("43s", "0.5s") gives Wait,
//     and a google.rpc.QuotaFailure, whose violations name the quotas hit
//     (quotaId). A quota per day (a quotaId containing "PerDay") resets at
//     the next midnight in daily (nil: Pacific()), so Wait is at least the
//     time to it (Daily, Source "google.rpc.QuotaFailure"): computed in
//     that zone's calendar, right on the days its clocks change.
//   - OpenAI: an "error" whose type is "requests" or "tokens" (Quota: the
//     quota hit), or whose code or type is "insufficient_quota" (Billing).
//   - Shopify's GraphQL: extensions.cost (Cost), and an error whose
//     extensions.code is "THROTTLED" (Throttled), whose Wait is
//     (requestedQueryCost - currentlyAvailable) / restoreRate.
//
// A body that is not a JSON object (an HTML page, text, a body cut at
// BodyLimit) says nothing, and is no error. A signal whose values cannot be
// used (a retryDelay that is not a duration, a negative restoreRate) is
// ignored and reported in errs, each wrapping ErrBadBody; the rest of the
// body is still read. ParseBody never fails as a whole.
func ParseBody(body []byte, now time.Time, daily *time.Location) (a BodyAdvice, errs []error) {
	body = bytes.TrimSpace(body)
	if len(body) == 0 || body[0] != '{' {
		return a, nil
	}
	var top struct {
		Error      json.RawMessage `json:"error"`
		Errors     json.RawMessage `json:"errors"`
		Extensions json.RawMessage `json:"extensions"`
	}
	if err := json.Unmarshal(body, &top); err != nil {
		return a, nil // not JSON, or cut short: no signal
	}
	bad := func(what string, err error) {
		errs = append(errs, fmt.Errorf("%w: %s: %v", ErrBadBody, what, err))
	}
	if len(top.Error) > 0 && top.Error[0] == '{' {
		if err := a.readError(top.Error, now, daily); err != nil {
			bad("error", err)
		}
	}
	if len(top.Extensions) > 0 && top.Extensions[0] == '{' {
		if err := a.readCost(top.Extensions); err != nil {
			bad("extensions.cost", err)
		}
	}
	if len(top.Errors) > 0 && top.Errors[0] == '[' {
		var list []struct {
			Message    string `json:"message"`
			Extensions struct {
				Code string `json:"code"`
			} `json:"extensions"`
		}
		if json.Unmarshal(top.Errors, &list) == nil {
			for _, e := range list {
				if e.Extensions.Code == "THROTTLED" {
					a.Throttled, a.Message = true, e.Message
					break
				}
			}
		}
	}
	if a.Throttled && a.Wait == 0 {
		if c := a.Cost; c != nil && c.HasStatus && c.RestoreRate > 0 {
			if need := c.Requested - c.Available; need > 0 {
				a.Wait = secondsSat(need / c.RestoreRate)
			}
		}
		if a.Wait > 0 {
			a.Source = "shopify-throttled"
		}
	}
	return a, errs
}

// readError reads a Google or OpenAI "error" object.
func (a *BodyAdvice) readError(raw json.RawMessage, now time.Time, daily *time.Location) error {
	var e struct {
		Message string            `json:"message"`
		Type    json.RawMessage   `json:"type"`
		Code    json.RawMessage   `json:"code"`
		Details []json.RawMessage `json:"details"`
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return err
	}
	a.Message = e.Message
	str := func(r json.RawMessage) string {
		var s string
		if json.Unmarshal(r, &s) != nil {
			return ""
		}
		return s
	}
	typ, code := str(e.Type), str(e.Code) // OpenAI's; Google's code is a number
	switch {
	case typ == "insufficient_quota" || code == "insufficient_quota":
		a.Billing = true
	case typ == "requests" || typ == "tokens":
		a.Quota = typ
	}
	var problems []string
	for _, d := range e.Details {
		var head struct {
			Type       string `json:"@type"`
			RetryDelay string `json:"retryDelay"`
			Violations []struct {
				QuotaID string `json:"quotaId"`
			} `json:"violations"`
		}
		if json.Unmarshal(d, &head) != nil {
			continue
		}
		switch head.Type {
		case "type.googleapis.com/google.rpc.RetryInfo":
			v, ok := strings.CutSuffix(head.RetryDelay, "s")
			w, err := parseDecimal(v, time.Second)
			if !ok || err != nil {
				problems = append(problems, fmt.Sprintf("RetryInfo's retryDelay %q is not a duration in seconds such as \"43s\"", shown(head.RetryDelay)))
				continue
			}
			a.Wait = max(a.Wait, w)
			if a.Source == "" {
				a.Source = "google.rpc.RetryInfo"
			}
		case "type.googleapis.com/google.rpc.QuotaFailure":
			for _, v := range head.Violations {
				if strings.Contains(strings.ToLower(v.QuotaID), "perday") {
					a.Quota, a.Daily = v.QuotaID, true
				} else if a.Quota == "" {
					a.Quota = v.QuotaID
				}
			}
		}
	}
	if a.Daily {
		if daily == nil {
			daily = Pacific()
		}
		if d := nextMidnight(now, daily).Sub(now); d >= a.Wait {
			a.Wait, a.Source = d, "google.rpc.QuotaFailure"
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// readCost reads Shopify's extensions.cost, if the extensions have one.
func (a *BodyAdvice) readCost(raw json.RawMessage) error {
	var ext struct {
		Cost *struct {
			Requested      *float64 `json:"requestedQueryCost"`
			Actual         *float64 `json:"actualQueryCost"`
			ThrottleStatus *struct {
				Maximum     *float64 `json:"maximumAvailable"`
				Available   *float64 `json:"currentlyAvailable"`
				RestoreRate *float64 `json:"restoreRate"`
			} `json:"throttleStatus"`
		} `json:"cost"`
	}
	if err := json.Unmarshal(raw, &ext); err != nil {
		return err
	}
	c := ext.Cost
	if c == nil {
		return nil
	}
	if c.Requested == nil || *c.Requested < 0 {
		return errors.New("no non-negative requestedQueryCost")
	}
	gc := &GraphQLCost{Requested: *c.Requested}
	if c.Actual != nil {
		if *c.Actual < 0 {
			return errors.New("a negative actualQueryCost")
		}
		gc.Actual, gc.HasActual = *c.Actual, true
	}
	if s := c.ThrottleStatus; s != nil {
		if s.Maximum == nil || s.Available == nil || s.RestoreRate == nil {
			return errors.New("throttleStatus lacks maximumAvailable, currentlyAvailable or restoreRate")
		}
		if *s.Maximum <= 0 || *s.Available < 0 || *s.RestoreRate <= 0 {
			return fmt.Errorf("throttleStatus: maximumAvailable %v and restoreRate %v must be positive, currentlyAvailable %v not negative", *s.Maximum, *s.RestoreRate, *s.Available)
		}
		gc.Maximum, gc.Available, gc.RestoreRate, gc.HasStatus = *s.Maximum, *s.Available, *s.RestoreRate, true
	}
	a.Cost = gc
	return nil
}

// shown cuts v to shownValueLen bytes for an error.
func shown(v string) string {
	if len(v) > shownValueLen {
		return v[:shownValueLen] + "..."
	}
	return v
}

// secondsSat returns s seconds as a Duration, rounded up to the
// microsecond, the longest Duration for one too long.
func secondsSat(s float64) time.Duration {
	if s >= float64(1<<63-1)/float64(time.Second) {
		return 1<<63 - 1
	}
	return (time.Duration(s*float64(time.Second)) + time.Microsecond - 1).Truncate(time.Microsecond)
}

// PeekBody reads at most n bytes of resp's body and puts them back: the
// caller of resp then reads exactly the bytes the provider sent, and
// closing resp.Body closes the original. whole is true when the body
// ended within n bytes (head is then all of it). A read error ends head
// early (whole false); the caller meets the same error reading on.
func PeekBody(resp *http.Response, n int) (head []byte, whole bool) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil, true
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, int64(n)+1))
	whole = err == nil && len(head) <= n
	orig := resp.Body
	resp.Body = &peeked{Reader: io.MultiReader(bytes.NewReader(head), orig), Closer: orig}
	if len(head) > n {
		head = head[:n]
	}
	return head, whole
}

// peeked is a body whose start was read and put back.
type peeked struct {
	io.Reader
	io.Closer
}

// ShopifyCost returns an Options.Settle that settles each successful
// GraphQL call at its actual cost: Shopify's
// extensions.cost.actualQueryCost, in the band unit (the unit of the
// key's policy that counts points; reserve each call at its
// requestedQueryCost or an estimate). The body is read through PeekBody
// (at most BodyLimit bytes) and left whole for the caller. A body longer
// than BodyLimit, or without actualQueryCost, gives an error: the
// Transport logs it and the estimate stands (a requested cost is at least
// the actual, so the fleet errs on the safe side).
func ShopifyCost(unit string) func(*http.Response) (reserve.Cost, error) {
	return func(resp *http.Response) (reserve.Cost, error) {
		if unit == "" {
			return nil, errors.New("pacehttp: ShopifyCost needs the unit of the points' band")
		}
		head, whole := PeekBody(resp, BodyLimit)
		if !whole {
			return nil, fmt.Errorf("pacehttp: a body over %d bytes (BodyLimit): Shopify's cost not read", BodyLimit)
		}
		a, errs := ParseBody(head, time.Now(), nil)
		if len(errs) > 0 {
			return nil, errs[0]
		}
		if a.Cost == nil || !a.Cost.HasActual {
			return nil, errors.New("pacehttp: no extensions.cost.actualQueryCost in the body")
		}
		return reserve.Cost{unit: a.Cost.Actual}, nil
	}
}

// readBody reads resp's body, when it may carry a signal (Options.
// IgnoreBodies, ShopifyThrottle), logging what cannot be used once a
// minute per key and signal, and leaves it whole.
func (t *Transport) readBody(resp *http.Response, key string, now time.Time) BodyAdvice {
	if t.opts.IgnoreBodies {
		return BodyAdvice{}
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
	case resp.StatusCode == http.StatusOK && t.opts.ShopifyThrottle && isJSON(resp.Header.Get("Content-Type")):
	default:
		return BodyAdvice{}
	}
	head, whole := PeekBody(resp, BodyLimit)
	if !whole {
		return BodyAdvice{}
	}
	a, errs := ParseBody(head, now, t.opts.DailyReset)
	for _, e := range errs {
		if t.warned.due(key, "body", now) {
			t.opts.Logger.Warn("pacehttp: ignored a malformed rate-limit signal in a response body (logged once a minute per key)", "key", key, "err", e)
		}
	}
	return a
}

// isJSON reports whether the media type ct is JSON (application/json, or
// a type ending in +json).
func isJSON(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// refusalWait returns how long the key pauses after the refusal resp, from
// its headers (adv) and its body: the rule of docs/http.md, "The
// provider's body".
//
//  1. The headers' wait (Retry-After, retry-after-ms), else the reset of
//     the quota they say is exhausted.
//  2. Where the headers give no wait, OpenAI's error type names which of
//     their quotas refused (requests or tokens): its reset, if the headers
//     say it is exhausted, rather than the latest reset of all.
//     A quota of requests whose reset is when it is whole again (OpenAI's,
//     Anthropic's: Quota.Refill) is exhausted until that reset, unless
//     the fleet's count reads it as a bucket refilled continuously
//     (lua/quota.lua): a fixed window gives nothing back before its end,
//     and with the counts ignored, or before the answers tell, which it is
//     is not known. (Pausing one call's refill, reset / limit, sent a fleet
//     against a fixed window in OpenAI's dialect back into the spent
//     window: 3,012 refusals in 32 s.)
//  3. The body's wait where the headers give none (RetryInfo, Shopify's
//     THROTTLED); and a quota per day the body names exhausted (Google's
//     QuotaFailure) is more specific than any header: its reset wins when
//     it is later.
//  4. Else Options.DefaultWait.
//
// The body's wait is cut to MaxWait as the headers' is.
func (t *Transport) refusalWait(key string, resp *http.Response, adv Advice, body BodyAdvice, now time.Time) time.Duration {
	wait, source := adv.Wait, adv.Source
	if wait == 0 && adv.Exhausted {
		wait, source = adv.Reset, adv.ResetSource
	}
	if adv.Wait == 0 && (body.Quota == "requests" || body.Quota == "tokens") {
		named := http.Header{}
		for _, name := range []string{"x-ratelimit-remaining-", "x-ratelimit-reset-", "x-ratelimit-limit-"} {
			if v := resp.Header.Values(name + body.Quota); len(v) > 0 {
				named[http.CanonicalHeaderKey(name+body.Quota)] = v
			}
		}
		if n, _ := ParseAdvice(named, resp.StatusCode, now, t.opts.MaxWait); n.Exhausted && n.ResetSource != "" {
			wait, source = n.Reset, n.ResetSource
		}
	}
	if c := adv.Calls; adv.Wait == 0 && c.Refill && c.Source != "" && c.Remaining == 0 && !t.buckets.has(key) {
		if full := min(c.Reset, t.opts.MaxWait); full > wait {
			wait, source = full, c.Source
		}
	}
	if body.Wait > 0 && (wait == 0 || body.Daily && body.Wait > wait) {
		wait, source = body.Wait, body.Source
		if wait > t.opts.MaxWait {
			t.opts.Logger.Warn("pacehttp: the provider asked for a longer wait than MaxWait; waiting MaxWait",
				"key", key, "asked", wait, "max_wait", t.opts.MaxWait, "source", source)
			wait = t.opts.MaxWait
		}
	}
	if wait == 0 {
		wait, source = t.opts.DefaultWait, "default"
	}
	if body.Quota != "" || body.Source != "" {
		t.opts.Logger.Debug("pacehttp: refused", "key", key, "status", resp.StatusCode, "wait", wait, "source", source, "quota", body.Quota)
	}
	return wait
}
