package pacehttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/internal/syncbuf"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var quiet = slog.New(slog.DiscardHandler)

// fleet returns n Limiters sharing one Redis and key prefix: n processes.
func fleet(t *testing.T, n int) []*reserve.Limiter {
	t.Helper()
	ls, _ := fleetOn(t, n)
	return ls
}

// fleetOn is fleet, with the Redis client the Limiters share.
func fleetOn(t *testing.T, n int) ([]*reserve.Limiter, redis.UniversalClient) {
	t.Helper()
	s := redistest.New(t)
	prefix := redistest.Prefix(t)
	var ls []*reserve.Limiter
	for range n {
		l, err := reserve.New(s.Client, reserve.Options{KeyPrefix: prefix, Logger: quiet})
		require.NoError(t, err)
		t.Cleanup(func() { l.Close() })
		ls = append(ls, l)
	}
	return ls, s.Client
}

func transport(t *testing.T, l *reserve.Limiter, opts pacehttp.Options) *pacehttp.Transport {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	tr, err := pacehttp.New(l, opts)
	require.NoError(t, err)
	return tr
}

// server answers with the responses in order (then 200s), recording each
// request's arrival and body.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	answers []func(http.ResponseWriter)
	arrived []time.Time
	bodies  []string
}

func newServer(t *testing.T, answers ...func(http.ResponseWriter)) *server {
	s := &server{answers: answers}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.arrived = append(s.arrived, time.Now())
		s.bodies = append(s.bodies, string(b))
		var answer func(http.ResponseWriter)
		if len(s.answers) > 0 {
			answer, s.answers = s.answers[0], s.answers[1:]
		}
		s.mu.Unlock()
		if answer != nil {
			answer(w)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() ([]time.Time, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.arrived...), append([]string(nil), s.bodies...)
}

func tooMany(retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(http.StatusTooManyRequests)
	}
}

var fast = reserve.Limit{Rate: 1000, Burst: 10}

// TestRetryAfter429: a 429 with Retry-After pauses the key for the whole
// fleet and the request is sent again after the pause, body replayed; no
// request of any process reaches the provider inside the pause.
func TestRetryAfter429(t *testing.T) {
	ls := fleet(t, 2)
	srv := newServer(t, tooMany("1"))
	a := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast})}
	b := &http.Client{Transport: transport(t, ls[1], pacehttp.Options{Limit: fast})}

	done := make(chan *http.Response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/doc", strings.NewReader("the body"))
		resp, err := a.Do(req)
		if assert.NoError(t, err) {
			resp.Body.Close()
		}
		done <- resp
	}()
	// The other process calls once the first got its 429 and paused the key.
	host := strings.TrimPrefix(srv.URL, "http://")
	require.Eventually(t, func() bool {
		snap, err := ls[1].Peek(context.Background(), reserve.Single(host, fast, 1))
		return err == nil && snap.Paused > 0
	}, 5*time.Second, time.Millisecond, "the key was never paused")
	resp, err := b.Get(srv.URL + "/other")
	require.NoError(t, err)
	resp.Body.Close()
	if r := <-done; r != nil {
		assert.Equal(t, http.StatusOK, r.StatusCode, "retried after the pause")
	}

	arrived, bodies := srv.requests()
	require.Len(t, arrived, 3)
	assert.ElementsMatch(t, []string{"the body", "the body", ""}, bodies, "the PUT's body was replayed")
	pauseEnd := arrived[0].Add(time.Second)
	for i, at := range arrived[1:] {
		assert.False(t, at.Before(pauseEnd), "request %d arrived %v into the 1 s pause", i+2, pauseEnd.Sub(at))
	}
}

// TestNoRetry: a POST (not idempotent), a body that cannot be replayed, a
// pause that ends after the deadline and MaxRetries -1 each return the 429
// as it came, after one request; an Idempotency-Key makes a POST
// retryable.
func TestNoRetry(t *testing.T) {
	ls := fleet(t, 1)
	for name, tt := range map[string]struct {
		opts pacehttp.Options
		req  func(url string) *http.Request
		want int // requests the provider sees
	}{
		"POST": {pacehttp.Options{}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
			return r
		}, 1},
		"POST with Idempotency-Key": {pacehttp.Options{}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
			r.Header.Set("Idempotency-Key", "k1")
			return r
		}, 2},
		"POST, RetryUnsafe": {pacehttp.Options{RetryUnsafe: true}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader("x"))
			return r
		}, 2},
		"body not replayable": {pacehttp.Options{}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodPut, u, io.MultiReader(strings.NewReader("x")))
			return r
		}, 1},
		"MaxRetries -1": {pacehttp.Options{MaxRetries: -1}, func(u string) *http.Request {
			r, _ := http.NewRequest(http.MethodGet, u, nil)
			return r
		}, 1},
		"pause past the deadline": {pacehttp.Options{}, func(u string) *http.Request {
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			t.Cleanup(cancel)
			r, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			return r
		}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			srv := newServer(t, tooMany("1"))
			tt.opts.Limit = fast
			c := &http.Client{Transport: transport(t, ls[0], tt.opts)}
			resp, err := c.Do(tt.req(srv.URL + "/" + url.PathEscape(name)))
			require.NoError(t, err)
			resp.Body.Close()
			arrived, _ := srv.requests()
			assert.Len(t, arrived, tt.want)
			if tt.want == 1 {
				assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "the 429 as it came")
			} else {
				assert.Equal(t, http.StatusOK, resp.StatusCode)
			}
		})
	}
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestDeadline: a slot after the request's deadline fails at once with a
// *reserve.WaitTooLongError, reserves nothing and closes the body; the
// request is not modified; a context cancelled during the sleep gives the
// slot back.
func TestDeadline(t *testing.T) {
	ls := fleet(t, 1)
	srv := newServer(t)
	slow := reserve.Limit{Rate: 0.5, Burst: 1} // a slot every 2 s
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: slow})}
	host := strings.TrimPrefix(srv.URL, "http://")

	resp, err := c.Get(srv.URL) // takes the burst
	require.NoError(t, err)
	resp.Body.Close()
	t0 := time.Now()
	before, err := ls[0].Peek(context.Background(), reserve.Single(host, slow, 1))
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	body := &closeCounter{Reader: strings.NewReader("payload")}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/x", body)
	req.Header.Set("X-Mine", "1")
	header := req.Header.Clone()
	_, err = c.Do(req)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "a slot 2 s away, a deadline 200 ms away")
	assert.True(t, tooLong.Deadline, "the maximum was the deadline")
	assert.EqualValues(t, 1, body.closed.Load(), "the body was closed")
	assert.Equal(t, header, req.Header, "the request was modified")
	after, err := ls[0].Peek(context.Background(), reserve.Single(host, slow, 1))
	require.NoError(t, err)
	refill := 0.5*time.Since(t0).Seconds() + 1e-6
	assert.GreaterOrEqual(t, after.Bands[0].Value, before.Bands[0].Value-1e-6, "a refusal reserved nothing")
	assert.LessOrEqual(t, after.Bands[0].Value, before.Bands[0].Value+refill, "the balance only refilled")
	arrived, _ := srv.requests()
	assert.Len(t, arrived, 1)

	// Cancelled while asleep: the slot goes back.
	ctx2, cancel2 := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel2)
	req, _ = http.NewRequestWithContext(ctx2, http.MethodGet, srv.URL, nil)
	_, err = c.Do(req)
	require.ErrorIs(t, err, context.Canceled)
	snap, err := ls[0].Peek(context.Background(), reserve.Single(host, slow, 1))
	require.NoError(t, err)
	assert.Greater(t, snap.Bands[0].Value, -0.5, "the cancelled request's permit went back")
}

// TestClientTimeout: under http.Client's Timeout the transport refuses a
// slot past it at once, as with a context deadline.
func TestClientTimeout(t *testing.T) {
	ls := fleet(t, 1)
	srv := newServer(t)
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: reserve.Limit{Rate: 0.5, Burst: 1}}), Timeout: 300 * time.Millisecond}
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	resp.Body.Close()
	_, err = c.Get(srv.URL)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
}

// TestExhausted: a success that says the quota is used up holds every
// process's calls until its reset, before any 429: by the fleet's count of
// the calls (the other process's next call waits for the window's end), or,
// with the counts ignored, by a pause of the key.
func TestExhausted(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		t.Run(fmt.Sprintf("IgnoreCounts=%v", ignore), func(t *testing.T) {
			ls := fleet(t, 2)
			srv := newServer(t, func(w http.ResponseWriter) {
				w.Header().Set("x-ratelimit-remaining-requests", "0")
				w.Header().Set("x-ratelimit-reset-requests", "1s")
				io.WriteString(w, "last one")
			})
			a := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast, IgnoreCounts: ignore})}
			resp, err := a.Get(srv.URL)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusOK, resp.StatusCode)
			if ignore {
				snap, err := ls[1].Peek(context.Background(), reserve.Single(strings.TrimPrefix(srv.URL, "http://"), fast, 1))
				require.NoError(t, err)
				assert.Greater(t, snap.Paused, 500*time.Millisecond, "the other process sees the pause")
				return
			}
			b := &http.Client{Transport: transport(t, ls[1], pacehttp.Options{Limit: fast})}
			resp, err = b.Get(srv.URL)
			require.NoError(t, err)
			resp.Body.Close()
			arrived, _ := srv.requests()
			require.Len(t, arrived, 2)
			// The reset is 1 s from the first answer, read after it:
			// the second call cannot arrive sooner.
			assert.GreaterOrEqual(t, arrived[1].Sub(arrived[0]), 999*time.Millisecond, "the other process's call was not held")
		})
	}
}

// TestSettle: the Settle hook's cost settles each call's reservation.
func TestSettle(t *testing.T) {
	ls := fleet(t, 1)
	srv := newServer(t, func(w http.ResponseWriter) {
		w.Header().Set("X-Tokens-Used", "700")
		io.WriteString(w, "done")
	})
	pol := reserve.Policy{{Name: "tokens", Limit: reserve.Limit{Rate: 1, Burst: 1000}}}
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{
		Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: "llm", Policy: pol, Cost: reserve.Cost{"tokens": 100}}, nil
		},
		Settle: func(resp *http.Response) (reserve.Cost, error) {
			var used float64
			_, err := fmtSscan(resp.Header.Get("X-Tokens-Used"), &used)
			return reserve.Cost{"tokens": used}, err
		},
	})}
	resp, err := c.Get(srv.URL)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "done", string(b), "the body reaches the caller")
	snap, err := ls[0].Peek(context.Background(), reserve.Request{Key: "llm", Policy: pol, Cost: reserve.Cost{"tokens": 1}})
	require.NoError(t, err)
	assert.InDelta(t, 300, snap.Bands[0].Value, 2, "1000 - 700 settled")
}

// TestBadOptions: New refuses a transport with no way to pace, or a bad
// limit; a route error fails the request and closes its body.
func TestBadOptions(t *testing.T) {
	ls := fleet(t, 1)
	_, err := pacehttp.New(ls[0], pacehttp.Options{})
	assert.ErrorIs(t, err, pacehttp.ErrNoLimit)
	_, err = pacehttp.New(ls[0], pacehttp.Options{Limit: reserve.Limit{Rate: -1, Burst: 1}})
	assert.ErrorIs(t, err, reserve.ErrInvalidRate)
	_, err = pacehttp.New(ls[0], pacehttp.Options{Adaptive: &adaptive.Config{Start: 10}})
	assert.ErrorIs(t, err, reserve.ErrInvalidRate)
	_, err = pacehttp.New(nil, pacehttp.Options{Limit: fast})
	assert.Error(t, err)

	boom := errors.New("no route")
	tr := transport(t, ls[0], pacehttp.Options{Route: func(*http.Request) (pacehttp.Route, error) { return pacehttp.Route{}, boom }})
	body := &closeCounter{Reader: bytes.NewReader(nil)}
	req, _ := http.NewRequest(http.MethodPut, "http://example.invalid/", body)
	_, err = tr.RoundTrip(req)
	assert.ErrorIs(t, err, boom)
	assert.EqualValues(t, 1, body.closed.Load())
}

// TestReservedKey: a request whose key is the fleet's name ("limiters",
// the default route's for a host so named) fails with
// reserve.ErrReservedKey before anything reaches Redis, with an adaptive
// rate too (its record would sit beside the fleet's); its body is closed.
func TestReservedKey(t *testing.T) {
	ls, rdb := fleetOn(t, 1)
	ctx := context.Background()
	a := adaptive.Config{Start: 10, Min: 1, Max: 100}
	for name, opts := range map[string]pacehttp.Options{
		"limit":    {Limit: fast},
		"adaptive": {Adaptive: &a},
	} {
		tr := transport(t, ls[0], opts)
		body := &closeCounter{Reader: bytes.NewReader(nil)}
		req, _ := http.NewRequest(http.MethodPut, "http://limiters/", body)
		_, err := tr.RoundTrip(req)
		assert.ErrorIs(t, err, reserve.ErrReservedKey, name)
		assert.EqualValues(t, 1, body.closed.Load(), name)
	}
	// The fleet's own records are there (the heartbeat's); a key named
	// "limiters" would have added its rate and quota records beside them.
	base := ls[0].RedisKey("limiters")
	n, err := rdb.Exists(ctx, base+":rate", base+":quota", base+":quota:flight").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "a refused request wrote a record beside the fleet's")
}

// TestAdaptiveAcrossProcesses: 429s seen by two processes at once cut the
// fleet's learned rate once, and both pace at the cut rate on their next
// request.
func TestAdaptiveAcrossProcesses(t *testing.T) {
	ls := fleet(t, 2)
	// Both calls are sent before either 429 comes back, so both were paced
	// at the rate before the cut. (A call paced after the cut, at its rate,
	// and refused cuts again, adaptive's fresh refusal: on a loaded machine
	// the second process's reservation could come after the first 429.)
	var arrived atomic.Int32
	both := make(chan struct{})
	refuse := func(w http.ResponseWriter) {
		if arrived.Add(1) == 2 {
			close(both)
		}
		<-both
		tooMany("1")(w)
	}
	srv := newServer(t, refuse, refuse)
	// (The learned rate exactly, not its steps.)
	a := adaptive.Config{Start: 100, Min: 1, Max: 1000, Double: 1000 * time.Hour, Recover: 1000 * time.Hour, Episode: time.Minute, Steps: -1}
	var wg sync.WaitGroup
	for _, l := range ls {
		c := &http.Client{Transport: transport(t, l, pacehttp.Options{Adaptive: &a, MaxRetries: -1})}
		wg.Go(func() {
			resp, err := c.Get(srv.URL)
			if assert.NoError(t, err) {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	host := strings.TrimPrefix(srv.URL, "http://")
	for i, l := range ls {
		rate, err := adaptive.New(l, host, a)
		require.NoError(t, err)
		lim, err := rate.Limit(context.Background())
		require.NoError(t, err)
		assert.InDelta(t, 75, lim.Rate, 0.01, "process %d: one cut of 0.75 from 100, however many 429s", i)
	}
}

func fmtSscan(s string, v *float64) (int, error) { return fmt.Sscan(s, v) }

// TestRouteTenants: a Route's tenant and lane make requests fair. Two
// processes flood a host for one tenant; a request for another tenant,
// sent once the flood queues, reaches the provider before most of it (it
// waits about two slot intervals, the flood 2.5 s), and every request is
// sent.
func TestRouteTenants(t *testing.T) {
	ls := fleet(t, 2)
	srv := newServer(t)
	lim := reserve.Limit{Rate: 20, Burst: 1}
	route := func(req *http.Request) (pacehttp.Route, error) {
		return pacehttp.Route{Key: req.Host, Policy: lim.Policy(), Cost: reserve.Permits(1), Tenant: req.Header.Get("X-Tenant")}, nil
	}
	var clients []*http.Client
	for _, l := range ls {
		clients = append(clients, &http.Client{Transport: transport(t, l, pacehttp.Options{Route: route})})
	}
	send := func(c *http.Client, tenant string) error {
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(tenant))
		if err != nil {
			return err
		}
		req.Header.Set("X-Tenant", tenant)
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { assert.NoError(t, send(clients[i%2], "flood")) })
	}
	require.Eventually(t, func() bool { arrived, _ := srv.requests(); return len(arrived) >= 2 }, 10*time.Second, time.Millisecond)
	require.NoError(t, send(clients[0], "light"))
	wg.Wait()
	_, bodies := srv.requests()
	require.Len(t, bodies, 51)
	// First come, first served, it would come last; in its turn, third or
	// so (the bound leaves room for a loaded machine: 1.25 s late).
	i := slices.Index(bodies, "light")
	require.Less(t, i, 26, "the light tenant's request came %d-th, behind the flood", i+1)
}

// TestMalformedHeaderWarnedOnce: a provider that sends a header pacehttp
// cannot read on every response gets one warning a minute per key and
// header, not one per response (a fleet logged about 630 in 25 s), and each
// header its own.
func TestMalformedHeaderWarnedOnce(t *testing.T) {
	ls := fleet(t, 1)
	var answers []func(http.ResponseWriter)
	for range 20 {
		answers = append(answers, func(w http.ResponseWriter) {
			w.Header().Set("RateLimit-Policy", `"burst";w=60`) // no q
			io.WriteString(w, "ok")
		})
	}
	answers = append(answers, func(w http.ResponseWriter) {
		w.Header().Set("Retry-After", "soon")
		io.WriteString(w, "ok")
	})
	srv := newServer(t, answers...)
	var logs syncbuf.Buffer
	c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})}
	for range 21 {
		resp, err := c.Get(srv.URL)
		require.NoError(t, err)
		resp.Body.Close()
	}
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "ratelimit-policy"), "warnings of the policy header:\n%s", out)
	assert.Equal(t, 1, strings.Count(out, "retry-after"), "warnings of the retry-after header:\n%s", out)
}

// TestForbidden: a 403 is a rate limit only on the signals providers
// document. GitHub's "Resource not accessible by integration" carries its
// rate-limit headers with quota left and a request id: it passes through
// untouched, at once, and pauses nobody (before, it paused the host
// fleet-wide for a minute). A 403 whose body carries GitHub's secondary
// limit message pauses the key a minute and keeps the body for the
// caller. A 403 with the quota exhausted until a reset (GitHub's primary
// limit) is retried after the reset, as a 429 would be.
func TestForbidden(t *testing.T) {
	ghHeaders := func(w http.ResponseWriter, remaining string, reset time.Duration) {
		w.Header().Set("x-ratelimit-remaining", remaining)
		w.Header().Set("x-ratelimit-reset", strconv.FormatInt(time.Now().Add(reset).Unix(), 10))
		w.Header().Set("x-github-request-id", "CAFE:1234")
	}
	get := func(t *testing.T, c *http.Client, url string) (*http.Response, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		require.NoError(t, err)
		resp, err := c.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(b)
	}
	paused := func(t *testing.T, l *reserve.Limiter, srv *server) time.Duration {
		snap, err := l.Peek(context.Background(), reserve.Single(strings.TrimPrefix(srv.URL, "http://"), fast, 1))
		require.NoError(t, err)
		return snap.Paused
	}

	t.Run("not a rate limit", func(t *testing.T) {
		ls := fleet(t, 2)
		srv := newServer(t, func(w http.ResponseWriter) {
			ghHeaders(w, "4999", time.Hour)
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"message":"Resource not accessible by integration"}`)
		})
		c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast})}
		resp, body := get(t, c, srv.URL)
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, body, "Resource not accessible")
		assert.Zero(t, paused(t, ls[1], srv), "a 403 for a missing permission paused the key")
		resp, _ = get(t, c, srv.URL)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		arrived, _ := srv.requests()
		assert.Len(t, arrived, 2, "the 403 was sent again")
	})
	t.Run("secondary limit", func(t *testing.T) {
		ls := fleet(t, 2)
		srv := newServer(t, func(w http.ResponseWriter) {
			ghHeaders(w, "4990", time.Hour)
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"message":"You have exceeded a secondary rate limit. Please wait a few minutes before you try again."}`)
		})
		c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast})}
		resp, body := get(t, c, srv.URL) // the retry would come after the context's end
		assert.Equal(t, http.StatusForbidden, resp.StatusCode)
		assert.Contains(t, body, "secondary rate limit", "the caller reads the whole body")
		assert.Greater(t, paused(t, ls[1], srv), 50*time.Second, "GitHub asks for a minute")
	})
	t.Run("primary limit", func(t *testing.T) {
		ls := fleet(t, 1)
		srv := newServer(t, func(w http.ResponseWriter) {
			ghHeaders(w, "0", time.Second)
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `{"message":"API rate limit exceeded"}`)
		})
		c := &http.Client{Transport: transport(t, ls[0], pacehttp.Options{Limit: fast})}
		resp, _ := get(t, c, srv.URL)
		assert.Equal(t, http.StatusOK, resp.StatusCode, "sent again after the reset")
		arrived, _ := srv.requests()
		require.Len(t, arrived, 2)
		// The reset is a whole Unix second: at least a few ms away.
		assert.Greater(t, arrived[1].Sub(arrived[0]), time.Duration(0))
	})
}
