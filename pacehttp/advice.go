package pacehttp

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Advice is what a response's rate-limit headers say.
type Advice struct {
	// Wait is how long the provider asks callers to wait before calling again
	// (Retry-After, retry-after-ms, GitHub's secondary limit): 0 when no header
	// asks for a wait (or the time asked is already past).
	Wait time.Duration
	// Source names the header Wait came from: "retry-after", "retry-after-ms",
	// "github-secondary"; "" when Wait is 0.
	Source string
	// Exhausted is true when a header says a quota has nothing left; Reset is
	// then how long until it refills (the longest such reset, if several
	// quotas are exhausted), and ResetSource the header it came from.
	//
	// ResetSource is the lowercase name of a reset header
	// ("x-ratelimit-reset-tokens", "anthropic-ratelimit-tokens-reset",
	// "x-ratelimit-reset", "ratelimit", "ratelimit-reset", ...). It is set
	// even when that header gives 0 (a time already past), and it is "" with
	// Reset 0 when no header says when an exhausted quota refills.
	Exhausted   bool
	Reset       time.Duration
	ResetSource string
	// Capped is true when Wait or Reset was above maxWait and was cut to it;
	// Asked is then the longest value the provider asked for, before the cut.
	Capped bool
	Asked  time.Duration

	// Calls is the quota of calls the response reports, if any (Source is
	// "" when none does, or when no header says when it refills): the
	// calls left after this one, and when the quota refills. Transport
	// spreads them over that time (see Options.IgnoreCounts).
	Calls Quota
}

// Quota is a quota of calls as a response reports it.
type Quota struct {
	// Remaining is how many calls are left, after the one answered.
	Remaining int64
	// Limit is the quota's size, 0 when the response does not say.
	Limit int64
	// Reset is how long until the quota refills (not cut to maxWait).
	Reset time.Duration
	// Refill is true for a quota that refills continuously (OpenAI's and
	// Anthropic's, whose reset is the time until it is full again), with
	// Limit known; false for a fixed window, whose whole quota comes back
	// at Reset (GitHub's and the IETF drafts').
	Refill bool
	// Source names the header the count came from ("x-ratelimit-remaining",
	// "ratelimit", ...).
	Source string
}

// ErrBadHeader is wrapped by every error ParseAdvice reports.
var ErrBadHeader = errors.New("pacehttp: bad rate-limit header")

// githubSecondaryWait is the wait GitHub's documentation asks for after a
// secondary rate limit that carries no retry-after: "wait for at least one
// minute before retrying".
const githubSecondaryWait = time.Minute

// shownValueLen is the most bytes of a header's value an error quotes.
const shownValueLen = 100

// ParseAdvice reads h, the headers of a response with the given status,
// received at now. Waits and resets above maxWait (> 0) are cut to maxWait
// and reported (Capped, Asked). A value that cannot be used (unparsable,
// negative, a remaining count that is not a number, ...) is ignored, and
// reported in errs: one error per bad header, naming it and its value, each
// wrapping ErrBadHeader. ParseAdvice never fails as a whole.
//
// It reads these headers (names are case-insensitive):
//
//   - Retry-After (RFC 9110): delta-seconds, or an HTTP-date as
//     http.ParseTime reads it (a date already past gives 0). A decimal such
//     as "1.5" is accepted too.
//   - retry-after-ms (OpenAI, Azure OpenAI): milliseconds, a decimal. It wins
//     over Retry-After when both can be read.
//   - OpenAI: x-ratelimit-remaining-{requests,tokens} with
//     x-ratelimit-reset-{requests,tokens} in time.ParseDuration's format
//     ("1s", "6m0s", "12ms").
//   - Anthropic: anthropic-ratelimit-{requests,tokens,input-tokens,
//     output-tokens}-remaining with -reset as an RFC 3339 time.
//   - GitHub: x-ratelimit-remaining with x-ratelimit-reset as a Unix time.
//     A 429 without a readable Retry-After or retry-after-ms, that carries
//     x-github-request-id or an x-ratelimit-remaining other than 0, is
//     GitHub's secondary rate limit: Wait is one minute, Source
//     "github-secondary". A 403 is not: its headers cannot tell the
//     secondary limit from a 403 for another reason (no permission), which
//     carries the same headers; the Transport reads the body for GitHub's
//     message ("secondary rate limit").
//   - The IETF draft (draft-ietf-httpapi-ratelimit-headers-08 to -11):
//     RateLimit-Policy and RateLimit, Lists of Structured Fields (RFC 9651)
//     whose Items carry the policy's name and parameters; an Item of
//     RateLimit with r=0 is an exhausted quota that refills in t seconds
//     (r and t non-negative Integers, t optional). A malformed field is
//     ignored whole, as the draft requires. RateLimit-Policy gives each
//     named policy's quota (q, for Calls.Limit) and unit (qu).
//   - The draft's -07 and earlier, as express-rate-limit sends them: a
//     single RateLimit Dictionary "limit=50, remaining=0, reset=3"
//     (remaining 0 is exhausted, refilling in reset seconds), and
//     RateLimit-Policy as quotas "50;w=5" (only checked; the Dictionary's
//     limit gives Calls.Limit).
//   - The older drafts' RateLimit-Limit (its first Item gives Calls.Limit),
//     RateLimit-Remaining and RateLimit-Reset (delta-seconds).
//
// Remaining counts are non-negative decimals; 0 means exhausted, anything
// above not. A reset header is checked whenever it is present; it gives
// Reset when its quota is exhausted (for OpenAI's and Anthropic's quotas of
// requests, with their limit sent, the time one request takes to refill:
// reset / limit), and Calls for a quota of calls: OpenAI's and Anthropic's
// requests, GitHub's x-ratelimit-remaining, the drafts' RateLimit (an Item
// whose policy's qu is not "requests" excepted) and RateLimit-Remaining;
// of several, the one with the fewest calls left. A number of seconds in
// x-ratelimit-reset or RateLimit-Reset below 10^9 (31.7 years) is read as
// a delay, and one at or
// above it as a Unix time, so that GitHub's Unix times and the delays other
// providers send under the same names both read right.
//
// Headers sent on several lines are read from the first line, except the
// Structured Fields, whose lines are joined with commas (RFC 9110, section
// 5.3). Values too long for a time.Duration (about 292 years) count as the
// longest Duration, so a cap cuts them and Asked shows math.MaxInt64.
func ParseAdvice(h http.Header, status int, now time.Time, maxWait time.Duration) (a Advice, errs []error) {
	r := reader{h: h, now: now}

	// Waits. Both headers are read, so that a bad one is reported even when
	// the other gives the wait.
	ra, raOK := r.duration("retry-after", parseRetryAfter)
	ms, msOK := r.duration("retry-after-ms", parseMillis)
	switch {
	case msOK:
		a.Wait, a.Source = ms, "retry-after-ms"
	case raOK:
		a.Wait, a.Source = ra, "retry-after"
	}

	// Quotas, in a fixed order: on equal resets the first one read names
	// ResetSource.
	r.quota("x-ratelimit-remaining-requests", "x-ratelimit-reset-requests", parseGoDuration, refillCalls, "x-ratelimit-limit-requests")
	r.quota("x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens", parseGoDuration, notCalls, "")
	for _, q := range []string{"requests", "tokens", "input-tokens", "output-tokens"} {
		kind, limit := notCalls, ""
		if q == "requests" {
			kind, limit = refillCalls, "anthropic-ratelimit-requests-limit"
		}
		r.quota("anthropic-ratelimit-"+q+"-remaining", "anthropic-ratelimit-"+q+"-reset", parseRFC3339, kind, limit)
	}
	gh := r.quota("x-ratelimit-remaining", "x-ratelimit-reset", parseDelayOrUnix, windowCalls, "x-ratelimit-limit")
	r.structured("ratelimit-policy", r.policies)
	r.rateLimit()
	r.structured("ratelimit-limit", r.limits)
	r.quota("ratelimit-remaining", "ratelimit-reset", parseDelayOrUnix, windowCalls, "")
	if r.calls.Source == "ratelimit-remaining" && r.calls.Limit == 0 {
		r.calls.Limit = r.limit
	}

	// GitHub's secondary rate limit, on a 429 (a 403 is one only when its
	// body says so: see secondaryLimit).
	if status == http.StatusTooManyRequests && !raOK && !msOK &&
		gh != remainingZero && (gh != remainingAbsent || len(h.Values("x-github-request-id")) > 0) {
		a.Wait, a.Source = githubSecondaryWait, "github-secondary"
	}
	if a.Wait == 0 {
		a.Source = ""
	}

	a.Exhausted, a.Reset, a.ResetSource = r.exhausted, r.reset, r.resetSource
	a.Calls = r.calls
	if maxWait > 0 {
		if a.Wait > maxWait {
			a.Capped, a.Asked, a.Wait = true, a.Wait, maxWait
		}
		if a.Reset > maxWait {
			a.Capped, a.Asked, a.Reset = true, max(a.Asked, a.Reset), maxWait
		}
	}
	return a, r.errs
}

// reader holds what ParseAdvice has read so far.
type reader struct {
	h    http.Header
	now  time.Time
	errs []error

	exhausted   bool
	reset       time.Duration
	resetSource string

	calls  Quota
	units  map[string]string // RateLimit-Policy: the unit of each policy not counted in requests
	quotas map[string]int64  // RateLimit-Policy: each named policy's quota (q)
	limit  int64             // RateLimit-Limit: its first item, the limit
}

// callsKind is whether a quota counts calls, and how it refills.
type callsKind int

const (
	notCalls    callsKind = iota // tokens, or another unit
	windowCalls                  // calls, all back at the reset
	refillCalls                  // calls, refilled continuously until full at the reset
)

// count records a quota of calls read from source; of several, the one
// with the fewest calls left counts (on a tie, the one that refills last).
func (r *reader) count(q Quota) {
	c := r.calls
	if c.Source == "" || q.Remaining < c.Remaining || q.Remaining == c.Remaining && q.Reset > c.Reset {
		r.calls = q
	}
}

// bad reports the header name with value v as unusable, for the reason err.
func (r *reader) bad(name, v string, err error) {
	if len(v) > shownValueLen {
		v = v[:shownValueLen] + "..."
	}
	r.errs = append(r.errs, &headerError{name, fmt.Errorf("%w: %s %q: %v", ErrBadHeader, name, v, err)})
}

// headerError is an error of ParseAdvice, with the header it names.
type headerError struct {
	name string
	err  error
}

func (e *headerError) Error() string { return e.err.Error() }
func (e *headerError) Unwrap() error { return e.err }

// value returns the first line of the header name, without surrounding
// spaces and tabs, and whether the header is present.
func (r *reader) value(name string) (string, bool) {
	vs := r.h.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	return strings.Trim(vs[0], " \t"), true
}

// exhaust records an exhausted quota; reset is how long until it refills,
// read from the header source, or source is "" when no header says.
func (r *reader) exhaust(reset time.Duration, source string) {
	r.exhausted = true
	if source != "" && (r.resetSource == "" || reset > r.reset) {
		r.reset, r.resetSource = reset, source
	}
}

// duration reads the header name with parse, and reports whether it was
// present and readable.
func (r *reader) duration(name string, parse func(string, time.Time) (time.Duration, error)) (time.Duration, bool) {
	v, ok := r.value(name)
	if !ok {
		return 0, false
	}
	d, err := parse(v, r.now)
	if err != nil {
		r.bad(name, v, err)
		return 0, false
	}
	return d, true
}

// remaining is what a remaining header says.
type remaining int

const (
	remainingAbsent remaining = iota
	remainingBad
	remainingZero
	remainingSome
)

// quota reads a pair of headers: a remaining count and its reset, parsed by
// parseReset. Both are checked when present; the reset is used as the
// quota's refill when the count is 0. A quota of calls (kind) is recorded
// for Advice.Calls, with its limit read from the header limitName if set.
// A refilling quota of calls whose limit is known, exhausted, refills its
// next call in reset/limit: it is paused that long, not until it is full.
func (r *reader) quota(remName, resetName string, parseReset func(string, time.Time) (time.Duration, error), kind callsKind, limitName string) remaining {
	rem := remainingAbsent
	var left int64
	if v, ok := r.value(remName); ok {
		switch n, err := parseCount(v); {
		case err != nil:
			r.bad(remName, v, err)
			rem = remainingBad
		case n == 0:
			rem = remainingZero
		default:
			rem, left = remainingSome, n
		}
	}
	reset, resetOK := r.duration(resetName, parseReset)
	var limit int64
	if limitName != "" {
		if v, ok := r.value(limitName); ok {
			n, err := parseCount(v)
			if err != nil {
				r.bad(limitName, v, err)
			}
			limit = n
		}
	}
	refill := kind == refillCalls && limit > 0
	if rem == remainingZero {
		switch {
		case resetOK && refill:
			r.exhaust(reset/time.Duration(limit), resetName)
		case resetOK:
			r.exhaust(reset, resetName)
		default:
			r.exhaust(0, "")
		}
	}
	if kind != notCalls && resetOK && (rem == remainingZero || rem == remainingSome) {
		r.count(Quota{Remaining: left, Limit: limit, Reset: reset, Refill: refill, Source: remName})
	}
	return rem
}

// joined returns the lines of the Structured Field name joined with commas
// (RFC 9110, section 5.3), each trimmed of spaces and tabs and empty ones
// dropped, and whether the field is present.
func (r *reader) joined(name string) (string, bool) {
	vs := r.h.Values(name)
	if len(vs) == 0 {
		return "", false
	}
	lines := make([]string, 0, len(vs))
	for _, v := range vs {
		if v = strings.Trim(v, " \t"); v != "" {
			lines = append(lines, v)
		}
	}
	return strings.Join(lines, ", "), true
}

// structured reads the Structured Field List name, joined from all its
// lines, and hands its Items to check, which returns an error when they do
// not mean what the field requires. A field that cannot be parsed, or that
// check refuses, is reported and ignored.
func (r *reader) structured(name string, check func([]sfItem) error) {
	v, ok := r.joined(name)
	if !ok {
		return
	}
	items, err := parseList(v)
	if err == nil {
		err = check(items)
	}
	if err != nil {
		r.bad(name, v, err)
	}
}

// rateLimit reads the RateLimit field: a List of the draft's service
// limits (-08 and later), or else the Dictionary of the drafts before
// (-07: "limit=50, remaining=0, reset=3", what express-rate-limit sends
// with draft-7).
func (r *reader) rateLimit() {
	v, ok := r.joined("ratelimit")
	if !ok {
		return
	}
	items, err := parseList(v)
	if err == nil {
		err = r.serviceLimits(items)
	} else if dict, derr := parseDict(v); derr == nil {
		if _, ok := dict["remaining"]; ok {
			err = r.draft7(dict)
		}
	}
	if err != nil {
		r.bad("ratelimit", v, err)
	}
}

// draft7 checks the members of an older draft's RateLimit Dictionary
// (limit, remaining and reset, non-negative Integers; reset in seconds,
// optional) and records remaining=0 as an exhausted quota.
func (r *reader) draft7(dict map[string]sfItem) error {
	num := func(key string) (int64, bool, error) {
		it, ok := dict[key]
		if !ok {
			return 0, false, nil
		}
		if it.value.kind != sfInteger || it.value.num < 0 {
			return 0, false, fmt.Errorf("%s is not a non-negative integer", key)
		}
		return it.value.num, true, nil
	}
	limit, _, err := num("limit")
	if err != nil {
		return err
	}
	rem, _, err := num("remaining")
	if err != nil {
		return err
	}
	reset, known, err := num("reset")
	if err != nil {
		return err
	}
	if rem == 0 {
		if known {
			r.exhaust(mulSat(time.Duration(reset), time.Second), "ratelimit")
		} else {
			r.exhaust(0, "")
		}
	}
	if known {
		r.count(Quota{Remaining: rem, Limit: limit, Reset: mulSat(time.Duration(reset), time.Second), Source: "ratelimit"})
	}
	return nil
}

// serviceLimits checks the Items of a RateLimit field (the draft's service
// limits: a policy name, r remaining, t seconds), and records each Item with
// r=0 as an exhausted quota, once all of them are known to be good.
func (r *reader) serviceLimits(items []sfItem) error {
	type limit struct {
		zero  bool
		left  int64
		quota int64 // its policy's, 0 if not known
		reset time.Duration
		known bool
		calls bool
	}
	limits := make([]limit, 0, len(items))
	for i, it := range items {
		if err := checkName(it); err != nil {
			return fmt.Errorf("item %d: %w", i+1, err)
		}
		rem, ok := it.param("r")
		if !ok {
			return fmt.Errorf("item %d: no r parameter", i+1)
		}
		if rem.kind != sfInteger || rem.num < 0 {
			return fmt.Errorf("item %d: r is not a non-negative integer", i+1)
		}
		l := limit{zero: rem.num == 0, left: rem.num, calls: r.units[policyName(it)] == "", quota: r.quotas[policyName(it)]}
		if t, ok := it.param("t"); ok {
			if t.kind != sfInteger || t.num < 0 {
				return fmt.Errorf("item %d: t is not a non-negative integer", i+1)
			}
			l.reset, l.known = mulSat(time.Duration(t.num), time.Second), true
		}
		limits = append(limits, l)
	}
	for _, l := range limits {
		if l.known && l.calls {
			r.count(Quota{Remaining: l.left, Limit: l.quota, Reset: l.reset, Source: "ratelimit"})
		}
		if !l.zero {
			continue
		}
		if l.known {
			r.exhaust(l.reset, "ratelimit")
		} else {
			r.exhaust(0, "")
		}
	}
	return nil
}

// policyName returns the name an Item of RateLimit or RateLimit-Policy
// gives its policy.
func policyName(it sfItem) string { return it.value.str }

// policies checks a RateLimit-Policy field's Items (checkPolicy) and
// records the unit of each named policy whose quota is not counted in
// requests (its qu parameter), so that RateLimit's counts of other units
// (content-bytes, concurrent-requests) are not taken for calls.
func (r *reader) policies(items []sfItem) error {
	if err := checkPolicy(items); err != nil {
		return err
	}
	for _, it := range items {
		if it.value.kind != sfString && it.value.kind != sfToken {
			continue
		}
		if q, ok := it.param("q"); ok {
			if r.quotas == nil {
				r.quotas = map[string]int64{}
			}
			r.quotas[policyName(it)] = q.num
		}
		if qu, ok := it.param("qu"); ok && qu.str != "requests" {
			if r.units == nil {
				r.units = map[string]string{}
			}
			r.units[policyName(it)] = cmp.Or(qu.str, "?")
		}
	}
	return nil
}

// checkPolicy checks the Items of a RateLimit-Policy field: a policy name
// each, with q a non-negative integer and w, when present, a positive one;
// or, in the drafts before -08, a quota each, a non-negative integer with
// w, when present, a positive one ("50;w=5", "10, 50;w=60"). Nothing of
// the policies goes into Advice.
func checkPolicy(items []sfItem) error {
	for i, it := range items {
		if it.value.kind == sfInteger {
			if it.value.num < 0 {
				return fmt.Errorf("item %d: the quota is negative", i+1)
			}
			if w, ok := it.param("w"); ok && (w.kind != sfInteger || w.num <= 0) {
				return fmt.Errorf("item %d: w is not a positive integer", i+1)
			}
			continue
		}
		if err := checkName(it); err != nil {
			return fmt.Errorf("item %d: %w", i+1, err)
		}
		q, ok := it.param("q")
		if !ok {
			return fmt.Errorf("item %d: no q parameter", i+1)
		}
		if q.kind != sfInteger || q.num < 0 {
			return fmt.Errorf("item %d: q is not a non-negative integer", i+1)
		}
		if w, ok := it.param("w"); ok && (w.kind != sfInteger || w.num <= 0) {
			return fmt.Errorf("item %d: w is not a positive integer", i+1)
		}
	}
	return nil
}

// checkName checks that an Item names a policy: a String or a Token.
func checkName(it sfItem) error {
	if it.value.kind != sfString && it.value.kind != sfToken {
		return errors.New("the policy name is not a string or a token")
	}
	return nil
}

// limits checks the Items of an older draft's RateLimit-Limit field:
// non-negative integers (the first is the limit; the others, with
// parameters such as w, describe policies), and records the limit.
func (r *reader) limits(items []sfItem) error {
	for i, it := range items {
		if it.value.kind != sfInteger || it.value.num < 0 {
			return fmt.Errorf("item %d is not a non-negative integer", i+1)
		}
	}
	if len(items) > 0 {
		r.limit = items[0].value.num
	}
	return nil
}
