package profile

import (
	"fmt"
	"net/http"
	"time"

	"github.com/pacer-go/pacer/reserve"
)

// GitHubLimits are a GitHub account's REST API limits. The zero values
// are those of a user's token.
type GitHubLimits struct {
	// Account names the quota: the user (or app installation) whose
	// tokens share it. The key is "api.github.com/" + Account.
	Account string
	// PerHour is the primary quota, requests per hour. Default 5,000 (a
	// user token; GitHub Enterprise Cloud's apps get 15,000).
	PerHour int
	// PointsPerMinute is the secondary limit's points per minute for the
	// REST API. Default 900.
	PointsPerMinute int
}

// githubPostPoints is what GitHub's secondary limit charges a POST,
// PATCH, PUT or DELETE; a GET, HEAD or OPTIONS costs 1.
const githubPostPoints = 5

// GitHubPoints returns a REST call's points under GitHub's secondary
// limit: 1 for GET, HEAD and OPTIONS, 5 for any other method.
func GitHubPoints(method string) int {
	switch method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions:
		return 1
	}
	return githubPostPoints
}

// GitHub returns the profile of a GitHub account's REST API quota.
//
// The rules it implements (docs.github.com, "Rate limits for the REST
// API"): the primary quota, 5,000 requests per hour for a user, whose
// answers carry x-ratelimit-limit, -remaining, -used and -reset (a Unix
// time in seconds), and a 403 or 429 with x-ratelimit-remaining 0 once it
// is spent; and secondary limits, among them "no more than 900 points per
// minute" for REST endpoints (GET, HEAD and OPTIONS 1 point; POST, PATCH,
// PUT and DELETE 5), answered with a 403 or 429 and a message, and
// retry-after when GitHub gives one. pacehttp speaks this dialect: it
// spreads the calls x-ratelimit-remaining says are left over the time to
// the reset, pauses at a spent quota and on a secondary limit.
//
// The policy: "requests", a bucket holding a minute's share of PerHour, B,
// at (PerHour-B) per hour, so that no hour, wherever it starts, gets more
// than PerHour (GitHub's hour starts at the token's first call); and
// "points", a bucket of 5 points (one POST) at (PointsPerMinute-5) per
// minute: no minute gets more than PointsPerMinute points. A Call costs 1
// request and its method's points; nothing is settled.
//
// Not enforced: the secondary limit of 100 concurrent requests needs a
// band of calls in flight, which pacer does not have yet (keep at most 100
// requests in flight yourself, as a semaphore); nor the limit of 80
// content-generating requests per minute and 500 per hour, nor GraphQL's
// points. Settings.Burst does not apply.
func GitHub(l GitHubLimits, s Settings) (*Profile, error) {
	return github(l, s, time.Hour, time.Minute)
}

// github is GitHub with the hour and the minute as given (tests shorten
// them).
func github(l GitHubLimits, s Settings, hour, minute time.Duration) (*Profile, error) {
	s, err := s.check()
	if err != nil {
		return nil, err
	}
	if l.PerHour == 0 {
		l.PerHour = 5000
	}
	if l.PointsPerMinute == 0 {
		l.PointsPerMinute = 900
	}
	if l.Account == "" || l.PerHour < 60 || l.PointsPerMinute <= githubPostPoints {
		return nil, fmt.Errorf("%w: GitHub %+v: want an Account, PerHour >= 60 and PointsPerMinute > %d", ErrInvalid, l, githubPostPoints)
	}
	b := l.PerHour / 60
	return &Profile{
		Name: "github", Key: "api.github.com/" + l.Account, Settings: s, counts: true,
		Policy: reserve.Policy{
			{Name: "requests", Limit: reserve.Limit{Rate: float64(l.PerHour-b) / hour.Seconds(), Burst: b}},
			{Name: "points", Limit: reserve.Limit{Rate: float64(l.PointsPerMinute-githubPostPoints) / minute.Seconds(), Burst: githubPostPoints}},
		},
		cost: func(c Call) reserve.Cost {
			return reserve.Cost{"requests": 1, "points": float64(GitHubPoints(c.Method))}
		},
	}, nil
}
