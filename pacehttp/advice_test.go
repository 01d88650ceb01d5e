package pacehttp

import (
	"errors"
	"math"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testNow is the time every test response is received at: a Friday.
var testNow = time.Date(2025, time.March, 14, 12, 0, 0, 0, time.UTC)

// Values relative to testNow, in each dialect's format.
func httpDate(d time.Duration) string { return testNow.Add(d).Format(http.TimeFormat) }
func unixTime(d time.Duration) string { return strconv.FormatInt(testNow.Add(d).Unix(), 10) }
func rfc3339(d time.Duration) string  { return testNow.Add(d).Format(time.RFC3339) }

const (
	testMaxWait = time.Hour
	year        = 365 * 24 * time.Hour
)

type adviceCase struct {
	name    string
	status  int           // 200 when 0
	headers []string      // name, value, name, value, ...; added in order
	maxWait time.Duration // testMaxWait when 0; no cap when negative
	want    Advice
	errs    []string // the header each error names, in order
}

func adviceCases() []adviceCase {
	return []adviceCase{
		{name: "no headers"},
		{name: "unrelated headers", headers: []string{"Content-Type", "application/json", "X-Request-Id", "abc"}},

		// Retry-After.
		{name: "retry-after seconds", status: 429, headers: []string{"Retry-After", "120"},
			want: Advice{Wait: 2 * time.Minute, Source: "retry-after"}},
		{name: "retry-after decimal", status: 429, headers: []string{"Retry-After", "1.5"},
			want: Advice{Wait: 1500 * time.Millisecond, Source: "retry-after"}},
		{name: "retry-after zero", status: 429, headers: []string{"Retry-After", "0"}},
		{name: "retry-after spaces", status: 503, headers: []string{"Retry-After", " 7\t"},
			want: Advice{Wait: 7 * time.Second, Source: "retry-after"}},
		{name: "retry-after IMF-fixdate", status: 503, headers: []string{"Retry-After", httpDate(90 * time.Second)},
			want: Advice{Wait: 90 * time.Second, Source: "retry-after"}},
		{name: "retry-after RFC 850 date", status: 503, headers: []string{"Retry-After", "Friday, 14-Mar-25 12:01:30 GMT"},
			want: Advice{Wait: 90 * time.Second, Source: "retry-after"}},
		{name: "retry-after asctime date", status: 503, headers: []string{"Retry-After", "Fri Mar 14 12:01:30 2025"},
			want: Advice{Wait: 90 * time.Second, Source: "retry-after"}},
		{name: "retry-after date past", status: 503, headers: []string{"Retry-After", httpDate(-time.Hour)}},
		{name: "retry-after date now", status: 503, headers: []string{"Retry-After", httpDate(0)}},
		{name: "retry-after negative", status: 429, headers: []string{"Retry-After", "-5"},
			errs: []string{"retry-after"}},
		{name: "retry-after words", status: 429, headers: []string{"Retry-After", "soon"},
			errs: []string{"retry-after"}},
		{name: "retry-after exponent", status: 429, headers: []string{"Retry-After", "1e3"},
			errs: []string{"retry-after"}},
		{name: "retry-after plus sign", status: 429, headers: []string{"Retry-After", "+5"},
			errs: []string{"retry-after"}},
		{name: "retry-after hex", status: 429, headers: []string{"Retry-After", "0x10"},
			errs: []string{"retry-after"}},
		{name: "retry-after bare point", status: 429, headers: []string{"Retry-After", "5."},
			errs: []string{"retry-after"}},
		{name: "retry-after empty", status: 429, headers: []string{"Retry-After", ""},
			errs: []string{"retry-after"}},
		{name: "retry-after date without zone", status: 429, headers: []string{"Retry-After", "2025-03-14 12:01:30"},
			errs: []string{"retry-after"}},
		{name: "retry-after a year, capped", status: 429, headers: []string{"Retry-After", "31536000"},
			want: Advice{Wait: testMaxWait, Source: "retry-after", Capped: true, Asked: year}},
		{name: "retry-after date a year ahead, capped", status: 503, headers: []string{"Retry-After", httpDate(year)},
			want: Advice{Wait: testMaxWait, Source: "retry-after", Capped: true, Asked: year}},
		{name: "retry-after a year, no cap", status: 429, maxWait: -1, headers: []string{"Retry-After", "31536000"},
			want: Advice{Wait: year, Source: "retry-after"}},
		{name: "retry-after at the cap", status: 429, headers: []string{"Retry-After", "3600"},
			want: Advice{Wait: time.Hour, Source: "retry-after"}},
		{name: "retry-after beyond a Duration", status: 429, headers: []string{"Retry-After", "99999999999999999999999"},
			want: Advice{Wait: testMaxWait, Source: "retry-after", Capped: true, Asked: math.MaxInt64}},
		{name: "retry-after sent twice reads the first", status: 429, headers: []string{"Retry-After", "3", "Retry-After", "9"},
			want: Advice{Wait: 3 * time.Second, Source: "retry-after"}},

		// retry-after-ms.
		{name: "retry-after-ms", status: 429, headers: []string{"retry-after-ms", "1500"},
			want: Advice{Wait: 1500 * time.Millisecond, Source: "retry-after-ms"}},
		{name: "retry-after-ms fractional", status: 429, headers: []string{"retry-after-ms", "20.5"},
			want: Advice{Wait: 20500 * time.Microsecond, Source: "retry-after-ms"}},
		{name: "retry-after-ms beside retry-after", status: 429, headers: []string{"Retry-After", "2", "retry-after-ms", "1500"},
			want: Advice{Wait: 1500 * time.Millisecond, Source: "retry-after-ms"}},
		{name: "retry-after-ms bad, retry-after used", status: 429, headers: []string{"Retry-After", "2", "retry-after-ms", "abc"},
			want: Advice{Wait: 2 * time.Second, Source: "retry-after"}, errs: []string{"retry-after-ms"}},
		{name: "retry-after bad, retry-after-ms used", status: 429, headers: []string{"Retry-After", "later", "retry-after-ms", "250"},
			want: Advice{Wait: 250 * time.Millisecond, Source: "retry-after-ms"}, errs: []string{"retry-after"}},
		{name: "retry-after-ms negative", status: 429, headers: []string{"retry-after-ms", "-1"},
			errs: []string{"retry-after-ms"}},
		{name: "both bad", status: 429, headers: []string{"Retry-After", "-3", "retry-after-ms", "1,5"},
			errs: []string{"retry-after", "retry-after-ms"}},
		{name: "names in any case", status: 429, headers: []string{"RETRY-AFTER", "2", "Retry-After-Ms", "1800"},
			want: Advice{Wait: 1800 * time.Millisecond, Source: "retry-after-ms"}},

		// OpenAI.
		{name: "openai quota left", headers: []string{
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "59", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-limit-tokens", "150000", "x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s"},
			want: Advice{Calls: Quota{Remaining: 59, Limit: 60, Reset: time.Second, Refill: true, Source: "x-ratelimit-remaining-requests"}}},
		{name: "openai requests exhausted", headers: []string{
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "1s",
			"x-ratelimit-remaining-tokens", "149984", "x-ratelimit-reset-tokens", "6m0s"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: time.Second, Source: "x-ratelimit-remaining-requests"}, Exhausted: true, Reset: time.Second, ResetSource: "x-ratelimit-reset-requests"}},
		{name: "openai both exhausted, longest reset", maxWait: 2 * time.Hour, headers: []string{
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1h2m3.5s"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 12 * time.Millisecond, Source: "x-ratelimit-remaining-requests"}, Exhausted: true, Reset: time.Hour + 2*time.Minute + 3500*time.Millisecond, ResetSource: "x-ratelimit-reset-tokens"}},
		{name: "openai exhausted, reset capped", headers: []string{
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "1h2m3.5s"},
			want: Advice{Exhausted: true, Reset: testMaxWait, ResetSource: "x-ratelimit-reset-tokens",
				Capped: true, Asked: time.Hour + 2*time.Minute + 3500*time.Millisecond}},
		{name: "openai requests exhausted, limit known: one call's refill", headers: []string{
			"x-ratelimit-limit-requests", "60", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "59s"},
			want: Advice{Exhausted: true, Reset: 59 * time.Second / 60, ResetSource: "x-ratelimit-reset-requests",
				Calls: Quota{Remaining: 0, Limit: 60, Reset: 59 * time.Second, Refill: true, Source: "x-ratelimit-remaining-requests"}}},
		{name: "openai tokens exhausted, limit known: until full", headers: []string{
			"x-ratelimit-limit-tokens", "90000", "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "20s"},
			want: Advice{Exhausted: true, Reset: 20 * time.Second, ResetSource: "x-ratelimit-reset-tokens"}},
		{name: "openai bad limit", headers: []string{
			"x-ratelimit-limit-requests", "sixty", "x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "2s"},
			want: Advice{Calls: Quota{Remaining: 5, Reset: 2 * time.Second, Source: "x-ratelimit-remaining-requests"}},
			errs: []string{"x-ratelimit-limit-requests"}},
		{name: "openai count without a reset is no quota", headers: []string{
			"x-ratelimit-remaining-requests", "5"}},
		{name: "fractional count", headers: []string{
			"x-ratelimit-remaining", "7.9", "x-ratelimit-reset", "3"},
			want: Advice{Calls: Quota{Remaining: 7, Reset: 3 * time.Second, Source: "x-ratelimit-remaining"}}},
		{name: "the fewest calls left counts", headers: []string{
			"x-ratelimit-remaining", "30", "x-ratelimit-reset", "60", "RateLimit-Remaining", "4", "RateLimit-Reset", "2"},
			want: Advice{Calls: Quota{Remaining: 4, Reset: 2 * time.Second, Source: "ratelimit-remaining"}}},
		{name: "ietf count of another unit is not calls", headers: []string{
			"RateLimit-Policy", `"bytes";q=1000;qu="content-bytes";w=10, "calls";q=50;w=10`,
			"RateLimit", `"bytes";r=3;t=9, "calls";r=20;t=9`},
			want: Advice{Calls: Quota{Remaining: 20, Limit: 50, Reset: 9 * time.Second, Source: "ratelimit"}}},
		{name: "ietf policy of requests counts", headers: []string{
			"RateLimit-Policy", `"calls";q=50;qu="requests";w=10`, "RateLimit", `"calls";r=2;t=4`},
			want: Advice{Calls: Quota{Remaining: 2, Limit: 50, Reset: 4 * time.Second, Source: "ratelimit"}}},
		{name: "openai 429", status: 429, headers: []string{
			"retry-after", "1", "retry-after-ms", "480",
			"x-ratelimit-remaining-requests", "12", "x-ratelimit-reset-requests", "0.5s",
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "480ms"},
			want: Advice{Calls: Quota{Remaining: 12, Reset: 500 * time.Millisecond, Source: "x-ratelimit-remaining-requests"}, Wait: 480 * time.Millisecond, Source: "retry-after-ms",
				Exhausted: true, Reset: 480 * time.Millisecond, ResetSource: "x-ratelimit-reset-tokens"}},
		{name: "openai exhausted, no reset header", headers: []string{"x-ratelimit-remaining-requests", "0"},
			want: Advice{Exhausted: true}},
		{name: "openai exhausted, zero written as a decimal", headers: []string{
			"x-ratelimit-remaining-tokens", "0.0", "x-ratelimit-reset-tokens", "2s"},
			want: Advice{Exhausted: true, Reset: 2 * time.Second, ResetSource: "x-ratelimit-reset-tokens"}},
		{name: "openai exhausted, bad reset", headers: []string{
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "-1s"},
			want: Advice{Exhausted: true}, errs: []string{"x-ratelimit-reset-requests"}},
		{name: "openai bad values", headers: []string{
			"x-ratelimit-remaining-requests", "lots", "x-ratelimit-reset-requests", "1x",
			"x-ratelimit-remaining-tokens", "-3", "x-ratelimit-reset-tokens", "10"},
			errs: []string{"x-ratelimit-remaining-requests", "x-ratelimit-reset-requests",
				"x-ratelimit-remaining-tokens", "x-ratelimit-reset-tokens"}},
		{name: "openai reset beyond a Duration", headers: []string{
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "9999999999h"},
			want: Advice{Exhausted: true, Reset: testMaxWait, ResetSource: "x-ratelimit-reset-tokens", Capped: true, Asked: math.MaxInt64}},

		// Anthropic.
		{name: "anthropic quota left", headers: []string{
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", rfc3339(time.Second),
			"anthropic-ratelimit-tokens-remaining", "39000", "anthropic-ratelimit-tokens-reset", rfc3339(2 * time.Second)},
			want: Advice{Calls: Quota{Remaining: 49, Limit: 50, Reset: time.Second, Refill: true, Source: "anthropic-ratelimit-requests-remaining"}}},
		{name: "anthropic tokens exhausted", headers: []string{
			"anthropic-ratelimit-requests-remaining", "49", "anthropic-ratelimit-requests-reset", rfc3339(time.Second),
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", rfc3339(45 * time.Second)},
			want: Advice{Calls: Quota{Remaining: 49, Reset: time.Second, Source: "anthropic-ratelimit-requests-remaining"}, Exhausted: true, Reset: 45 * time.Second, ResetSource: "anthropic-ratelimit-tokens-reset"}},
		{name: "anthropic input and output exhausted", headers: []string{
			"anthropic-ratelimit-input-tokens-remaining", "0", "anthropic-ratelimit-input-tokens-reset", rfc3339(20 * time.Second),
			"anthropic-ratelimit-output-tokens-remaining", "0", "anthropic-ratelimit-output-tokens-reset", "2025-03-14T13:00:50+01:00"},
			want: Advice{Exhausted: true, Reset: 50 * time.Second, ResetSource: "anthropic-ratelimit-output-tokens-reset"}},
		{name: "anthropic fractional seconds", headers: []string{
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", "2025-03-14T12:00:00.250Z"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 250 * time.Millisecond, Source: "anthropic-ratelimit-requests-remaining"}, Exhausted: true, Reset: 250 * time.Millisecond, ResetSource: "anthropic-ratelimit-requests-reset"}},
		{name: "anthropic reset past", headers: []string{
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", rfc3339(-time.Minute)},
			want: Advice{Exhausted: true, ResetSource: "anthropic-ratelimit-tokens-reset"}},
		{name: "anthropic 429", status: 429, headers: []string{
			"retry-after", "45",
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", rfc3339(45 * time.Second)},
			want: Advice{Wait: 45 * time.Second, Source: "retry-after",
				Exhausted: true, Reset: 45 * time.Second, ResetSource: "anthropic-ratelimit-tokens-reset"}},
		{name: "anthropic bad values", headers: []string{
			"anthropic-ratelimit-requests-remaining", "-1", "anthropic-ratelimit-requests-reset", "tomorrow",
			"anthropic-ratelimit-tokens-remaining", "0", "anthropic-ratelimit-tokens-reset", "1741953600"},
			want: Advice{Exhausted: true},
			errs: []string{"anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-requests-reset", "anthropic-ratelimit-tokens-reset"}},

		// GitHub.
		{name: "github quota left", headers: []string{
			"x-ratelimit-limit", "5000", "x-ratelimit-remaining", "4999", "x-ratelimit-reset", unixTime(time.Hour),
			"x-github-request-id", "CAFE:1234"},
			want: Advice{Calls: Quota{Remaining: 4999, Limit: 5000, Reset: time.Hour, Source: "x-ratelimit-remaining"}}},
		{name: "github primary limit, 403 is not secondary", status: 403, headers: []string{
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", unixTime(15 * time.Minute), "x-github-request-id", "CAFE:1234"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 900 * time.Second, Source: "x-ratelimit-remaining"}, Exhausted: true, Reset: 15 * time.Minute, ResetSource: "x-ratelimit-reset"}},
		{name: "github primary limit, 429", status: 429, headers: []string{
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", unixTime(15 * time.Minute)},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 900 * time.Second, Source: "x-ratelimit-remaining"}, Exhausted: true, Reset: 15 * time.Minute, ResetSource: "x-ratelimit-reset"}},
		{name: "github reset past", status: 403, headers: []string{
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", unixTime(-time.Minute)},
			want: Advice{Calls: Quota{Remaining: 0, Source: "x-ratelimit-remaining"}, Exhausted: true, ResetSource: "x-ratelimit-reset"}},
		{name: "github secondary, 429", status: 429, headers: []string{
			"x-ratelimit-remaining", "4990", "x-ratelimit-reset", unixTime(time.Hour)},
			want: Advice{Calls: Quota{Remaining: 4990, Reset: time.Hour, Source: "x-ratelimit-remaining"}, Wait: time.Minute, Source: "github-secondary"}},
		// A 403 is a rate limit by its headers only with Retry-After or an
		// exhausted quota: "Resource not accessible by integration" carries
		// the same headers (the Transport reads the body for the secondary
		// limit's message).
		{name: "github 403 with quota left is not a rate limit", status: 403, headers: []string{
			"x-ratelimit-remaining", "4990", "x-ratelimit-reset", unixTime(time.Hour), "x-github-request-id", "CAFE:1234"},
			want: Advice{Calls: Quota{Remaining: 4990, Reset: time.Hour, Source: "x-ratelimit-remaining"}}},
		{name: "github 403 with request id only", status: 403, headers: []string{"x-github-request-id", "CAFE:1234"}},
		{name: "github secondary, 429 with request id only", status: 429, headers: []string{"x-github-request-id", "CAFE:1234"},
			want: Advice{Wait: time.Minute, Source: "github-secondary"}},
		{name: "github secondary, retry-after wins", status: 403, headers: []string{
			"retry-after", "30", "x-ratelimit-remaining", "4990", "x-github-request-id", "CAFE:1234"},
			want: Advice{Wait: 30 * time.Second, Source: "retry-after"}},
		{name: "github secondary, retry-after 0 wins", status: 403, headers: []string{
			"retry-after", "0", "x-ratelimit-remaining", "4990"}},
		{name: "github secondary, bad retry-after", status: 429, headers: []string{
			"retry-after", "soon", "x-ratelimit-remaining", "4990"},
			want: Advice{Wait: time.Minute, Source: "github-secondary"}, errs: []string{"retry-after"}},
		{name: "github secondary, bad remaining", status: 429, headers: []string{"x-ratelimit-remaining", "many"},
			want: Advice{Wait: time.Minute, Source: "github-secondary"}, errs: []string{"x-ratelimit-remaining"}},
		{name: "github secondary, capped", status: 429, maxWait: 30 * time.Second, headers: []string{
			"x-ratelimit-remaining", "4990"},
			want: Advice{Wait: 30 * time.Second, Source: "github-secondary", Capped: true, Asked: time.Minute}},
		{name: "github 200 is never secondary", headers: []string{"x-ratelimit-remaining", "4990", "x-github-request-id", "CAFE:1234"}},
		{name: "github 404 is never secondary", status: 404, headers: []string{"x-github-request-id", "CAFE:1234"}},
		{name: "403 without github's headers", status: 403, headers: []string{"Content-Type", "text/plain"}},
		{name: "github bad reset", status: 403, headers: []string{
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", "-1"},
			want: Advice{Exhausted: true}, errs: []string{"x-ratelimit-reset"}},
		{name: "github reset not a number", headers: []string{
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", httpDate(time.Minute)},
			want: Advice{Exhausted: true}, errs: []string{"x-ratelimit-reset"}},
		{name: "x-ratelimit-reset as a delay", headers: []string{"x-ratelimit-remaining", "0", "x-ratelimit-reset", "30"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 30 * time.Second, Source: "x-ratelimit-remaining"}, Exhausted: true, Reset: 30 * time.Second, ResetSource: "x-ratelimit-reset"}},
		{name: "x-ratelimit-reset as a Unix time with a fraction", headers: []string{
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", unixTime(time.Minute) + ".25"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 60250 * time.Millisecond, Source: "x-ratelimit-remaining"}, Exhausted: true, Reset: time.Minute + 250*time.Millisecond, ResetSource: "x-ratelimit-reset"}},

		// IETF draft, structured fields.
		{name: "ietf quota left", headers: []string{
			"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=50;t=30, "daily";r=999;t=86000`},
			want: Advice{Calls: Quota{Remaining: 50, Limit: 100, Reset: 30 * time.Second, Source: "ratelimit"}}},
		{name: "ietf one of two exhausted", headers: []string{
			"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`,
			"RateLimit", `"burst";r=0;t=30, "daily";r=500;t=3600`},
			want: Advice{Calls: Quota{Remaining: 0, Limit: 100, Reset: 30 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 30 * time.Second, ResetSource: "ratelimit"}},
		{name: "ietf several exhausted, tokens and parameters", headers: []string{
			"RateLimit", `"a";r=0;t=30, b;r=0;t=90;pk=:dHJpYWwxMjEzMjM=:, "c";r=5;t=1;acme-x="y";acme-on`},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 90 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 90 * time.Second, ResetSource: "ratelimit"}},
		{name: "ietf field on two lines", headers: []string{
			"RateLimit", `"a";r=0;t=10`, "RateLimit", `"b";r=0;t=20`},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 20 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 20 * time.Second, ResetSource: "ratelimit"}},
		{name: "ietf exhausted without t", headers: []string{"RateLimit", `"default";r=0;pk=:QXBwLTk5OQ==:`},
			want: Advice{Exhausted: true}},
		{name: "ietf whitespace", headers: []string{"RateLimit", "\"a\";r=1;t=1 ,\t\"b\";  r=0;t=5"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 5 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 5 * time.Second, ResetSource: "ratelimit"}},
		{name: "ietf repeated parameter, last wins", headers: []string{"RateLimit", `"a";r=0;t=5;t=7`},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 7 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 7 * time.Second, ResetSource: "ratelimit"}},
		{name: "ietf t beyond the cap", headers: []string{"RateLimit", `"daily";r=0;t=86400`},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 24 * time.Hour, Source: "ratelimit"}, Exhausted: true, Reset: testMaxWait, ResetSource: "ratelimit", Capped: true, Asked: 24 * time.Hour}},
		{name: "ietf malformed: trailing comma", headers: []string{"RateLimit", `"default";r=0;t=30,`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: negative t", headers: []string{"RateLimit", `"default";r=0;t=-5`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: no r", headers: []string{"RateLimit", `"default";t=30`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: decimal r", headers: []string{"RateLimit", `"default";r=0.5;t=30`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: string t", headers: []string{"RateLimit", `"default";r=0;t="30"`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: open string", headers: []string{"RateLimit", `"default;r=0;t=30`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: inner list", headers: []string{"RateLimit", `("a" "b");r=0;t=30`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: integer name", headers: []string{"RateLimit", `10;r=0;t=30`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed: upper-case key", headers: []string{"RateLimit", `"a";R=0;t=30`},
			errs: []string{"ratelimit"}},
		// IETF draft -07 and earlier: one RateLimit Dictionary, quotas in
		// RateLimit-Policy (express-rate-limit's draft-7).
		{name: "draft-07 exhausted", headers: []string{"RateLimit", `limit=100, remaining=0, reset=30`, "RateLimit-Policy", "100;w=60"},
			want: Advice{Calls: Quota{Remaining: 0, Limit: 100, Reset: 30 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 30 * time.Second, ResetSource: "ratelimit"}},
		{name: "draft-07 quota left", headers: []string{"RateLimit", `limit=50, remaining=7, reset=3`, "RateLimit-Policy", "50;w=5"},
			want: Advice{Calls: Quota{Remaining: 7, Limit: 50, Reset: 3 * time.Second, Source: "ratelimit"}}},
		{name: "draft-07 exhausted without reset", headers: []string{"RateLimit", `limit=50, remaining=0`},
			want: Advice{Exhausted: true}},
		{name: "draft-07 members in any order", headers: []string{"RateLimit", `reset=4,remaining=0 , limit=9`},
			want: Advice{Calls: Quota{Remaining: 0, Limit: 9, Reset: 4 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 4 * time.Second, ResetSource: "ratelimit"}},
		{name: "draft-07 policies", headers: []string{"RateLimit-Policy", "10, 10;w=1, 50;w=60;comment=\"sliding window\""}},
		{name: "draft-07 malformed: negative remaining", headers: []string{"RateLimit", `limit=100, remaining=-1, reset=30`},
			errs: []string{"ratelimit"}},
		{name: "draft-07 malformed: string reset", headers: []string{"RateLimit", `limit=100, remaining=0, reset="30"`},
			errs: []string{"ratelimit"}},
		{name: "draft-07 malformed: no remaining", headers: []string{"RateLimit", `limit=100, reset=30`},
			errs: []string{"ratelimit"}},
		{name: "draft-07 malformed policy: w=0", headers: []string{"RateLimit-Policy", "50;w=0"},
			errs: []string{"ratelimit-policy"}},
		{name: "draft-07 malformed policy: negative quota", headers: []string{"RateLimit-Policy", "-5;w=1"},
			errs: []string{"ratelimit-policy"}},
		{name: "ietf malformed item ignores the whole field", headers: []string{
			"RateLimit", `"burst";r=0;t=30, "daily";r=-1;t=3600`},
			errs: []string{"ratelimit"}},
		{name: "ietf malformed policy, limits still read", headers: []string{
			"RateLimit-Policy", `"burst";q=`, "RateLimit", `"burst";r=0;t=30`},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 30 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 30 * time.Second, ResetSource: "ratelimit"},
			errs: []string{"ratelimit-policy"}},
		{name: "ietf policy without q", headers: []string{"RateLimit-Policy", `"burst";w=60`},
			errs: []string{"ratelimit-policy"}},
		{name: "ietf policy with w=0", headers: []string{"RateLimit-Policy", `"burst";q=10;w=0`},
			errs: []string{"ratelimit-policy"}},

		// IETF draft, older separate fields.
		{name: "old draft quota left", headers: []string{
			"RateLimit-Limit", "100", "RateLimit-Remaining", "42", "RateLimit-Reset", "30"},
			want: Advice{Calls: Quota{Remaining: 42, Limit: 100, Reset: 30 * time.Second, Source: "ratelimit-remaining"}}},
		{name: "old draft exhausted", headers: []string{
			"RateLimit-Limit", "10, 10;w=1, 50;w=60", "RateLimit-Remaining", "0", "RateLimit-Reset", "30"},
			want: Advice{Calls: Quota{Remaining: 0, Limit: 10, Reset: 30 * time.Second, Source: "ratelimit-remaining"}, Exhausted: true, Reset: 30 * time.Second, ResetSource: "ratelimit-reset"}},
		{name: "old draft reset as a Unix time (GitLab)", headers: []string{
			"RateLimit-Remaining", "0", "RateLimit-Reset", unixTime(time.Minute)},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 60 * time.Second, Source: "ratelimit-remaining"}, Exhausted: true, Reset: time.Minute, ResetSource: "ratelimit-reset"}},
		{name: "old draft bad values", headers: []string{
			"RateLimit-Limit", "ten", "RateLimit-Remaining", "-1", "RateLimit-Reset", "x"},
			errs: []string{"ratelimit-limit", "ratelimit-remaining", "ratelimit-reset"}},

		// Several dialects at once.
		{name: "longest reset across dialects", maxWait: 2 * time.Hour, headers: []string{
			"x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "20s",
			"anthropic-ratelimit-requests-remaining", "0", "anthropic-ratelimit-requests-reset", rfc3339(40 * time.Second),
			"x-ratelimit-remaining", "0", "x-ratelimit-reset", unixTime(10 * time.Second),
			"RateLimit", `"a";r=0;t=35`, "RateLimit-Remaining", "0", "RateLimit-Reset", "5"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 40 * time.Second, Source: "anthropic-ratelimit-requests-remaining"}, Exhausted: true, Reset: 40 * time.Second, ResetSource: "anthropic-ratelimit-requests-reset"}},
		{name: "equal resets, the first read names the source", headers: []string{
			"RateLimit", `"a";r=0;t=20`, "x-ratelimit-remaining-tokens", "0", "x-ratelimit-reset-tokens", "20s"},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 20 * time.Second, Source: "ratelimit"}, Exhausted: true, Reset: 20 * time.Second, ResetSource: "x-ratelimit-reset-tokens"}},
		{name: "wait and reset both capped", status: 429, headers: []string{
			"Retry-After", "7200", "RateLimit", `"daily";r=0;t=86400`},
			want: Advice{Calls: Quota{Remaining: 0, Reset: 24 * time.Hour, Source: "ratelimit"}, Wait: testMaxWait, Source: "retry-after",
				Exhausted: true, Reset: testMaxWait, ResetSource: "ratelimit", Capped: true, Asked: 24 * time.Hour}},
		{name: "an exhausted quota with a known reset beats an unknown one", headers: []string{
			"x-ratelimit-remaining-requests", "0", "RateLimit", `"a";r=0;t=0`},
			want: Advice{Calls: Quota{Remaining: 0, Source: "ratelimit"}, Exhausted: true, ResetSource: "ratelimit"}},
	}
}

// header builds an http.Header from name, value pairs with Header.Add, which
// canonicalizes the names as net/http does for a response.
func header(kv []string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

func TestParseAdvice(t *testing.T) {
	for _, c := range adviceCases() {
		t.Run(c.name, func(t *testing.T) {
			status, maxWait := c.status, c.maxWait
			if status == 0 {
				status = http.StatusOK
			}
			if maxWait == 0 {
				maxWait = testMaxWait
			}
			got, errs := ParseAdvice(header(c.headers), status, testNow, maxWait)
			if got != c.want {
				t.Errorf("ParseAdvice(%q, %d) = %+v, want %+v", c.headers, status, got, c.want)
			}
			if len(errs) != len(c.errs) {
				t.Errorf("ParseAdvice(%q, %d) gave %d errors %v, want %d naming %q", c.headers, status, len(errs), errs, len(c.errs), c.errs)
			}
			for i, err := range errs {
				if !errors.Is(err, ErrBadHeader) {
					t.Errorf("error %v does not match ErrBadHeader", err)
				}
				if i < len(c.errs) && !strings.Contains(err.Error(), ": "+c.errs[i]+` "`) {
					t.Errorf("error %d is %q, want it to name %s", i, err, c.errs[i])
				}
			}
		})
	}
}

// TestParseAdviceErrorText checks the whole text of an error: the header's
// name, its value quoted, and the reason.
func TestParseAdviceErrorText(t *testing.T) {
	for _, c := range []struct {
		name, value, want string
	}{
		{"Retry-After", "-5", `pacehttp: bad rate-limit header: retry-after "-5": negative`},
		{"Retry-After", "soon", `pacehttp: bad rate-limit header: retry-after "soon": neither delta-seconds nor an HTTP-date`},
		{"x-ratelimit-remaining-tokens", "lots", `pacehttp: bad rate-limit header: x-ratelimit-remaining-tokens "lots": not a non-negative decimal number`},
		{"x-ratelimit-reset-tokens", "1x", `pacehttp: bad rate-limit header: x-ratelimit-reset-tokens "1x": not a duration such as 1s, 6m0s or 12ms`},
		{"anthropic-ratelimit-tokens-reset", "soon", `pacehttp: bad rate-limit header: anthropic-ratelimit-tokens-reset "soon": not an RFC 3339 time`},
		{"RateLimit", `"a";r=0,`, `pacehttp: bad rate-limit header: ratelimit "\"a\";r=0,": at byte 9: nothing after ','`},
		{"RateLimit", `"a";r=-1`, `pacehttp: bad rate-limit header: ratelimit "\"a\";r=-1": item 1: r is not a non-negative integer`},
		{"Retry-After", "\x1b[31m" + strings.Repeat("9", 200),
			`pacehttp: bad rate-limit header: retry-after "\x1b[31m` + strings.Repeat("9", 95) + `...": neither delta-seconds nor an HTTP-date`},
	} {
		h := http.Header{}
		h.Set(c.name, c.value)
		_, errs := ParseAdvice(h, http.StatusTooManyRequests, testNow, time.Hour)
		if len(errs) != 1 || errs[0].Error() != c.want {
			t.Errorf("ParseAdvice(%s: %q) errors = %q, want [%q]", c.name, c.value, errs, c.want)
		}
	}
}

func TestParseList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []sfItem // nil with ok false: must fail
		ok   bool
	}{
		{``, nil, true},
		{`"a"`, []sfItem{{value: sfBare{kind: sfString, str: "a"}}}, true},
		{`a;b=1;c=-2;d=1.5;e="x\"y\\";f=?0;g;h=:YWI=:;i=*t/k:n`, []sfItem{{
			value: sfBare{kind: sfToken, str: "a"},
			params: []sfParam{
				{"b", sfBare{kind: sfInteger, num: 1}},
				{"c", sfBare{kind: sfInteger, num: -2}},
				{"d", sfBare{kind: sfDecimal, str: "1.5"}},
				{"e", sfBare{kind: sfString, str: `x"y\`}},
				{"f", sfBare{kind: sfBoolean, num: 0}},
				{"g", sfBare{kind: sfBoolean, num: 1}},
				{"h", sfBare{kind: sfBinary, str: "YWI="}},
				{"i", sfBare{kind: sfToken, str: "*t/k:n"}},
			}}}, true},
		{`1, 2 ,3`, []sfItem{
			{value: sfBare{kind: sfInteger, num: 1}},
			{value: sfBare{kind: sfInteger, num: 2}},
			{value: sfBare{kind: sfInteger, num: 3}}}, true},
		{`a;x=1;y=2;x=3`, []sfItem{{value: sfBare{kind: sfToken, str: "a"}, params: []sfParam{
			{"x", sfBare{kind: sfInteger, num: 3}}, {"y", sfBare{kind: sfInteger, num: 2}}}}}, true},
		{`999999999999999`, []sfItem{{value: sfBare{kind: sfInteger, num: 999999999999999}}}, true},
		{`-999999999999.999`, []sfItem{{value: sfBare{kind: sfDecimal, str: "-999999999999.999"}}}, true},
		{`1000000000000000`, nil, false}, // 16 digits
		{`1000000000000.0`, nil, false},  // 13 digits before the point
		{`1.0000`, nil, false},           // 4 after
		{`1.`, nil, false},               // none after
		{`-`, nil, false},                // a sign alone
		{`a,`, nil, false},               // trailing comma
		{`,a`, nil, false},               // leading comma
		{`a,,b`, nil, false},             // empty member
		{`a b`, nil, false},              // no comma
		{`"a`, nil, false},               // open string
		{`"a\b"`, nil, false},            // bad escape
		{"\"a\tb\"", nil, false},         // control character in a string
		{`"é"`, nil, false},              // not ASCII
		{`a;`, nil, false},               // no key
		{`a;B=1`, nil, false},            // upper-case key
		{`a;b=`, nil, false},             // no value
		{`a;b=?2`, nil, false},           // bad boolean
		{`a;b=:YW-I:`, nil, false},       // bad base64
		{`a;b=:YWI=`, nil, false},        // open byte sequence
		{`(a b)`, nil, false},            // inner list
		{`@1659578233`, nil, false},      // RFC 9651 date
		{`%"x"`, nil, false},             // RFC 9651 display string
		{"\ta", nil, false},              // leading tab
		{`a;b=1 ;c=2`, nil, false},       // space before ';'
		{`a=1`, nil, false},              // dictionary member
		{`a ;b=1`, nil, false},           // space between item and parameters
		{`a; b=1`, []sfItem{{value: sfBare{kind: sfToken, str: "a"}, params: []sfParam{{"b", sfBare{kind: sfInteger, num: 1}}}}}, true},
	} {
		got, err := parseList(c.in)
		if (err == nil) != c.ok {
			t.Errorf("parseList(%q) error = %v, want ok %v", c.in, err, c.ok)
			continue
		}
		if c.ok && !equalItems(got, c.want) {
			t.Errorf("parseList(%q) = %+v, want %+v", c.in, got, c.want)
		}
	}
}

func equalItems(a, b []sfItem) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].value != b[i].value || len(a[i].params) != len(b[i].params) {
			return false
		}
		for j := range a[i].params {
			if a[i].params[j] != b[i].params[j] {
				return false
			}
		}
	}
	return true
}

// TestDurationSyntax checks that durationSyntax accepts what
// time.ParseDuration reads and refuses what it cannot, so that
// parseGoDuration's "too long" reading applies only to overflows.
func TestDurationSyntax(t *testing.T) {
	for _, s := range []string{"0", "1s", "6m0s", "12ms", "1h2m3.5s", "0.5s", ".5s", "1.s", "+1s", "-1s", "1µs", "1μs", "1us", "1ns",
		"9999999999h", "99999999999999999999s", "1.99999999999999999999999s"} {
		if !durationSyntax(s) {
			t.Errorf("durationSyntax(%q) = false, want true", s)
		}
	}
	for _, s := range []string{"", "1", "s", ".s", "1x", "1s2", "1 s", "1.5.5s", "--1s", "0.", "1S", "1e3s"} {
		if durationSyntax(s) {
			t.Errorf("durationSyntax(%q) = true, want false", s)
		}
	}
}

// FuzzDurationSyntax checks durationSyntax against time.ParseDuration:
// whatever ParseDuration reads has the syntax, and whatever has the syntax
// but ParseDuration refuses is too long for a Duration, by exact arithmetic.
func FuzzDurationSyntax(f *testing.F) {
	for _, s := range []string{"0", "1s", "6m0s", "1h2m3.5s", "9999999999h", ".5s", "1x", "-0", "+.1µs", "2562047h47m16.854775807s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, err := time.ParseDuration(s)
		if err == nil && !durationSyntax(s) {
			t.Fatalf("time.ParseDuration(%q) succeeds but durationSyntax refuses it", s)
		}
		if err != nil && durationSyntax(s) {
			if v := exactNanoseconds(s); v.Cmp(big.NewRat(1<<62, 1)) < 0 {
				t.Fatalf("durationSyntax(%q) accepts it, %v ns, but time.ParseDuration says %v", s, v.FloatString(3), err)
			}
		}
	})
}

// exactNanoseconds returns the size of s, which has durationSyntax, in
// nanoseconds, ignoring its sign.
func exactNanoseconds(s string) *big.Rat {
	units := map[string]int64{"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9}
	s = strings.TrimLeft(s, "+-")
	sum := new(big.Rat)
	for s != "" && s != "0" {
		i := strings.IndexFunc(s, func(r rune) bool { return r != '.' && (r < '0' || r > '9') })
		j := i + strings.IndexFunc(s[i:], func(r rune) bool { return r == '.' || '0' <= r && r <= '9' })
		if j < i {
			j = len(s)
		}
		whole, frac, _ := strings.Cut(s[:i], ".")
		v := new(big.Rat)
		if whole != "" {
			n, _ := new(big.Int).SetString(whole, 10)
			v.SetInt(n)
		}
		if frac != "" {
			n, _ := new(big.Int).SetString(frac, 10)
			v.Add(v, new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(len(frac))), nil)))
		}
		sum.Add(sum, v.Mul(v, big.NewRat(units[s[i:j]], 1)))
		s = s[j:]
	}
	return sum
}

// fuzzHeaders turns text of "Name: value" lines into a header.
func fuzzHeaders(raw string) http.Header {
	h := http.Header{}
	for line := range strings.SplitSeq(raw, "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok {
			h.Add(name, value)
		}
	}
	return h
}

func FuzzParseAdvice(f *testing.F) {
	for _, c := range adviceCases() {
		var b strings.Builder
		for i := 0; i+1 < len(c.headers); i += 2 {
			b.WriteString(c.headers[i] + ":" + c.headers[i+1] + "\n")
		}
		status := c.status
		if status == 0 {
			status = http.StatusOK
		}
		maxWait := c.maxWait
		if maxWait == 0 {
			maxWait = testMaxWait
		}
		f.Add(b.String(), status, int64(maxWait), int64(0))
	}
	f.Fuzz(func(t *testing.T, raw string, status int, maxWait, nowOffset int64) {
		h := fuzzHeaders(raw)
		now := testNow.Add(time.Duration(nowOffset))
		a, errs := ParseAdvice(h, status, now, time.Duration(maxWait))
		if a.Wait < 0 || a.Reset < 0 || a.Asked < 0 {
			t.Fatalf("ParseAdvice(%q) = %+v: negative duration", raw, a)
		}
		if m := time.Duration(maxWait); m > 0 {
			if a.Wait > m || a.Reset > m {
				t.Fatalf("ParseAdvice(%q, maxWait %v) = %+v: above maxWait", raw, m, a)
			}
			if a.Capped != (a.Asked > m) || a.Capped && a.Wait != m && a.Reset != m {
				t.Fatalf("ParseAdvice(%q, maxWait %v) = %+v: Capped and Asked disagree", raw, m, a)
			}
		} else if a.Capped || a.Asked != 0 {
			t.Fatalf("ParseAdvice(%q, no cap) = %+v: capped", raw, a)
		}
		if (a.Wait == 0) != (a.Source == "") {
			t.Fatalf("ParseAdvice(%q) = %+v: Wait and Source disagree", raw, a)
		}
		if !a.Exhausted && (a.Reset != 0 || a.ResetSource != "") {
			t.Fatalf("ParseAdvice(%q) = %+v: a reset without an exhausted quota", raw, a)
		}
		if a.ResetSource == "" && a.Reset != 0 {
			t.Fatalf("ParseAdvice(%q) = %+v: a reset without its source", raw, a)
		}
		if c := a.Calls; c.Remaining < 0 || c.Limit < 0 || c.Reset < 0 || c.Source == "" && c != (Quota{}) || c.Refill && c.Limit == 0 {
			t.Fatalf("ParseAdvice(%q) = %+v: a bad count of calls", raw, a)
		}
		for _, err := range errs {
			if !errors.Is(err, ErrBadHeader) {
				t.Fatalf("ParseAdvice(%q) error %v does not match ErrBadHeader", raw, err)
			}
		}
	})
}
