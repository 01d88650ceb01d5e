package pacehttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/syncbuf"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// openServer counts the requests open at once, from each one's arrival to
// its handler's answer (the count drops before any byte of the answer is
// written, so a client cannot see the end of a response still counted),
// and keeps the most it saw. Its answers come from answer (nil: 200 "ok").
type openServer struct {
	*httptest.Server
	open, peak, total atomic.Int64
	answer            func(w http.ResponseWriter, n int64) bool // true: answered
}

func newOpenServer(t *testing.T, hold time.Duration) *openServer {
	s := &openServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.open.Add(1)
		for {
			p := s.peak.Load()
			if n <= p || s.peak.CompareAndSwap(p, n) {
				break
			}
		}
		time.Sleep(hold)
		total := s.total.Add(1)
		s.open.Add(-1)
		if s.answer != nil && s.answer(w, total) {
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

// get sends a GET to url with c, in ctx.
func get(ctx context.Context, c *http.Client, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return c.Do(req)
}

// TestInFlightAtMostN: with an in-flight band of 3, two Limiters (two
// processes) and 24 goroutines sending 72 requests never have more than 3
// open at the provider at once, judged from each request's arrival to its
// answer, and every request is answered; for each way a policy gets the
// band (Options.InFlight, a Route's band beside its rate, a Route's band
// alone, Options.InFlight with an adaptive rate).
func TestInFlightAtMostN(t *testing.T) {
	const n = 3
	rate := reserve.Limit{Rate: 2000, Burst: 100}
	cases := []struct {
		name string
		opts pacehttp.Options
	}{
		{"Options.InFlight", pacehttp.Options{Limit: rate, InFlight: n}},
		{"Route's band beside a rate", pacehttp.Options{Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: "api", Policy: reserve.Policy{
				{Name: "open", Unit: "requests", InFlight: n},
				{Name: "rate", Unit: "requests", Limit: rate},
			}, Cost: reserve.Cost{"requests": 1}}, nil
		}}},
		{"Route's band alone", pacehttp.Options{Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: "api", Policy: reserve.Policy{{Name: "open", InFlight: n}}, Cost: reserve.Cost{"open": 1}}, nil
		}}},
		{"Options.InFlight with Adaptive", pacehttp.Options{InFlight: n, Adaptive: &adaptive.Config{Start: 2000, Min: 1, Max: 4000, Burst: 100}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ls := fleet(t, 2)
			srv := newOpenServer(t, 5*time.Millisecond)
			clients := []*http.Client{
				{Transport: transport(t, ls[0], tc.opts)},
				{Transport: transport(t, ls[1], tc.opts)},
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var (
				wg   sync.WaitGroup
				errs = make(chan error, 72)
			)
			for g := range 24 {
				wg.Go(func() {
					for range 3 {
						resp, err := get(ctx, clients[g%2], srv.URL)
						if err != nil {
							errs <- err
							return
						}
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err != nil || resp.StatusCode != http.StatusOK {
							errs <- fmt.Errorf("status %d, %v", resp.StatusCode, err)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			assert.EqualValues(t, 72, srv.total.Load())
			assert.LessOrEqual(t, srv.peak.Load(), int64(n), "requests open at once at the provider")
			t.Logf("peak open: %d of %d", srv.peak.Load(), n)
		})
	}
}

// TestInFlightHeldUntilClose: a response whose body is neither closed nor
// read to the end holds its seat: the next request cannot get one before
// its deadline (a *reserve.WaitTooLongError naming the band, reaching no
// provider). Closing the body gives the seat back.
func TestInFlightHeldUntilClose(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := newOpenServer(t, 0)
	c := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, InFlight: 1})}
	first, err := get(context.Background(), c, srv.URL)
	require.NoError(t, err)

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = get(ctx, c, srv.URL)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong)
	assert.Equal(t, pacehttp.InFlightBand, tooLong.Band)
	assert.True(t, tooLong.Deadline)
	assert.EqualValues(t, 1, srv.total.Load(), "the request without a seat reached the provider")

	require.NoError(t, first.Body.Close())
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := get(ctx, c, srv.URL)
	require.NoError(t, err, "the closed body's seat did not come back")
	resp.Body.Close()
	assert.EqualValues(t, 2, srv.total.Load())
}

// TestInFlightEndsAtEOF: a body read to io.EOF gives its seat back before
// it is closed; a response without a body (HEAD) holds none.
func TestInFlightEndsAtEOF(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := newOpenServer(t, 0)
	c := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, InFlight: 1})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	first, err := get(ctx, c, srv.URL)
	require.NoError(t, err)
	defer first.Body.Close()
	b, err := io.ReadAll(first.Body)
	require.NoError(t, err)
	assert.Equal(t, "ok", string(b))

	head, err := http.NewRequestWithContext(ctx, http.MethodHead, srv.URL, nil)
	require.NoError(t, err)
	resp, err := c.Do(head)
	require.NoError(t, err, "the body read to EOF kept its seat")
	defer resp.Body.Close() // NoBody: holds nothing

	resp, err = get(ctx, c, srv.URL)
	require.NoError(t, err, "the HEAD response kept its seat")
	resp.Body.Close()
	assert.EqualValues(t, 3, srv.total.Load())
}

// TestInFlightRefusalGivesSeatBack: with one seat, a request refused with
// 429 gives its seat back before its retry waits, so the retry gets the
// seat (were it kept, the retry would wait for itself until its
// deadline); a 429 not retried gives it back at once too, body open.
func TestInFlightRefusalGivesSeatBack(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := newOpenServer(t, 0)
	srv.answer = func(w http.ResponseWriter, n int64) bool {
		if n == 1 || n == 3 {
			w.Header().Set("Retry-After-Ms", "50")
			w.WriteHeader(http.StatusTooManyRequests)
			return true
		}
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	c := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, InFlight: 1})}
	resp, err := get(ctx, c, srv.URL)
	require.NoError(t, err, "the retry did not get the refused call's seat")
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.EqualValues(t, 2, srv.total.Load(), "the 429, then its retry")

	once := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, InFlight: 1, MaxRetries: -1})}
	refused, err := get(ctx, once, srv.URL)
	require.NoError(t, err)
	defer refused.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, refused.StatusCode)
	resp, err = get(ctx, once, srv.URL)
	require.NoError(t, err, "the 429 returned kept its seat")
	resp.Body.Close()
	assert.EqualValues(t, 4, srv.total.Load())
}

// TestInFlightErrorGivesSeatBack: a request the Base transport fails
// (nothing listens) gives its seat back at once.
func TestInFlightErrorGivesSeatBack(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := newOpenServer(t, 0)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	c := &http.Client{Transport: transport(t, l, pacehttp.Options{
		Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: "api", Policy: fast.Policy(), Cost: reserve.Permits(1)}, nil
		},
		InFlight: 1,
	})}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := get(ctx, c, gone.URL)
	require.Error(t, err)
	resp, err := get(ctx, c, srv.URL)
	require.NoError(t, err, "the failed request kept its seat")
	resp.Body.Close()
}

// TestInFlightBadValues: New refuses a negative InFlight and one above
// reserve's bound; a Route's bad in-flight band or seats fail the request
// before anything is taken or sent.
func TestInFlightBadValues(t *testing.T) {
	l := fleet(t, 1)[0]
	for _, n := range []int{-1, 2_000_000} {
		_, err := pacehttp.New(l, pacehttp.Options{Limit: fast, InFlight: n, Logger: quiet})
		assert.Error(t, err, "InFlight %d", n)
	}
	_, err := pacehttp.New(l, pacehttp.Options{Limit: fast, InFlight: 2_000_000, Logger: quiet})
	assert.ErrorIs(t, err, reserve.ErrInvalidPolicy)

	srv := newOpenServer(t, 0)
	for _, tc := range []struct {
		name   string
		policy reserve.Policy
		cost   reserve.Cost
		want   error
	}{
		{"two bands", reserve.Policy{{Name: "a", Unit: "requests", InFlight: 1}, {Name: "b", Unit: "requests", InFlight: 2}}, reserve.Cost{"requests": 1}, reserve.ErrInvalidPolicy},
		{"seats not whole", reserve.Policy{{Name: "open", Unit: "requests", InFlight: 2}, {Name: "rate", Unit: "requests", Limit: fast}}, reserve.Cost{"requests": 1.5}, reserve.ErrInvalidCost},
		{"more seats than N", reserve.Policy{{Name: "open", Unit: "requests", InFlight: 2}, {Name: "rate", Unit: "calls", Limit: fast}}, reserve.Cost{"requests": 3, "calls": 1}, reserve.ErrExceedsBurst},
		{"N too large", reserve.Policy{{Name: "open", Unit: "requests", InFlight: 2_000_000}, {Name: "rate", Unit: "calls", Limit: fast}}, reserve.Cost{"requests": 1, "calls": 1}, reserve.ErrInvalidPolicy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &http.Client{Transport: transport(t, l, pacehttp.Options{Route: func(*http.Request) (pacehttp.Route, error) {
				return pacehttp.Route{Key: "api", Policy: tc.policy, Cost: tc.cost}, nil
			}})}
			_, err := get(context.Background(), c, srv.URL)
			assert.ErrorIs(t, err, tc.want)
		})
	}
	assert.Zero(t, srv.total.Load(), "a refused request reached the provider")
}

// TestInFlightRouteOwnBandStands: a Route's own in-flight band is the one
// its requests take, whatever Options.InFlight says.
func TestInFlightRouteOwnBandStands(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := newOpenServer(t, 0)
	c := &http.Client{Transport: transport(t, l, pacehttp.Options{InFlight: 5, Route: func(*http.Request) (pacehttp.Route, error) {
		return pacehttp.Route{Key: "api", Policy: reserve.Policy{
			{Name: "open", Unit: "requests", InFlight: 1},
			{Name: "rate", Unit: "requests", Limit: fast},
		}, Cost: reserve.Cost{"requests": 1}}, nil
	}})}
	first, err := get(context.Background(), c, srv.URL)
	require.NoError(t, err)
	defer first.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = get(ctx, c, srv.URL)
	var tooLong *reserve.WaitTooLongError
	require.True(t, errors.As(err, &tooLong), "got %v", err)
	assert.Equal(t, "open", tooLong.Band)
}

// TestInFlightSettle: Settle on a Route whose seats are on a unit of their
// own ("streams") settles the tokens, whatever it says of the streams, and
// does not end the call: the seat is held until the body is closed.
func TestInFlightSettle(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := newOpenServer(t, 0)
	var logs syncbuf.Buffer
	c := &http.Client{Transport: transport(t, l, pacehttp.Options{
		Route: func(*http.Request) (pacehttp.Route, error) {
			return pacehttp.Route{Key: "llm", Policy: reserve.Policy{
				{Name: "open", Unit: "streams", InFlight: 1},
				{Name: "tpm", Unit: "tokens", Limit: reserve.Limit{Rate: 1000, Burst: 10000}},
			}, Cost: reserve.Cost{"streams": 1, "tokens": 500}}, nil
		},
		Settle: func(*http.Response) (reserve.Cost, error) {
			return reserve.Cost{"streams": 1, "tokens": 120}, nil
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})}
	first, err := get(context.Background(), c, srv.URL)
	require.NoError(t, err)
	assert.NotContains(t, logs.String(), "could not settle")

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = get(ctx, c, srv.URL)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "the settled call's seat was given back before its body was closed")
	assert.Equal(t, "open", tooLong.Band)
	first.Body.Close()
}

// TestInFlightUpgrade: a 101 Switching Protocols' body stays the
// connection it is (an io.ReadWriteCloser) and holds its seat until closed.
func TestInFlightUpgrade(t *testing.T) {
	l := fleet(t, 1)[0]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			io.WriteString(w, "ok")
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		rw.Flush()
		io.Copy(conn, rw) // echo until the client closes
	}))
	t.Cleanup(srv.Close)
	c := &http.Client{Transport: transport(t, l, pacehttp.Options{Limit: fast, InFlight: 1})}
	req, err := http.NewRequest(http.MethodGet, srv.URL, nil)
	require.NoError(t, err)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "echo")
	resp, err := c.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	conn, ok := resp.Body.(io.ReadWriteCloser)
	require.True(t, ok, "the upgraded body is no longer writable")
	_, err = conn.Write([]byte("hi"))
	require.NoError(t, err)
	got := make([]byte, 2)
	_, err = io.ReadFull(conn, got)
	require.NoError(t, err)
	assert.Equal(t, "hi", string(got))

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = get(ctx, c, srv.URL)
	var tooLong *reserve.WaitTooLongError
	require.ErrorAs(t, err, &tooLong, "the open connection's seat was given back")

	require.NoError(t, conn.Close())
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ok2, err := get(ctx, c, srv.URL)
	require.NoError(t, err, "the closed connection kept its seat")
	ok2.Body.Close()
}
