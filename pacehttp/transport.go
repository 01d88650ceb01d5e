// Package pacehttp paces HTTP calls to rate-limited providers across a
// fleet: Transport is an http.RoundTripper that reserves each request's slot
// on a reserve.Limiter before sending it, and acts on what the provider
// answers, in whatever dialect it speaks (ParseAdvice, and ParseBody for
// the signals some providers send in a body: Google's RetryInfo and quotas
// per day, OpenAI's error type, Shopify's THROTTLED): a 429 pauses the key
// fleet-wide for as long as the provider asked and the request is retried;
// the calls a quota has left are spread over the time until it refills,
// so that none is refused at its end (Options.IgnoreCounts), and any other
// quota reported exhausted pauses the key until it refills, before any
// 429 comes. A cost known only from the response (tokens, points) settles
// the reservation, and a limit the provider does not publish is learned by
// the fleet (package adaptive). Options.InFlight (or an in-flight band in
// a Route's policy) also bounds the requests open at once on each host,
// fleet-wide: a request holds its seat until its response's body is closed
// or read to the end.
//
//	host, err := reserve.Sliding(10, time.Second) // each host: at most 10 calls in any second
//	if err != nil {
//		log.Fatal(err)
//	}
//	transport, err := pacehttp.New(limiter, pacehttp.Options{Limit: host})
//	if err != nil {
//		log.Fatal(err)
//	}
//	client := &http.Client{Transport: transport}
package pacehttp

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/inflight"
	"github.com/pacer-go/pacer/reserve"
)

// A Route is how one request is paced: the key it reserves on (requests
// with the same key share a limit across the fleet), the policy and the
// cost, and for fair share the tenant it is made for, its weight and its
// lane (see reserve.Request: a backlog of one tenant, or of the Batch
// lane, does not hold the others' requests behind it).
type Route struct {
	Key    string
	Policy reserve.Policy
	Cost   reserve.Cost

	Tenant string
	Lane   reserve.Lane
	Weight float64
}

// request is rt as a reserve.Request.
func (rt Route) request() reserve.Request {
	return reserve.Request{Key: rt.Key, Policy: rt.Policy, Cost: rt.Cost, Tenant: rt.Tenant, Lane: rt.Lane, Weight: rt.Weight}
}

// Options configure a Transport. Limit (or Route, or Adaptive) is required.
type Options struct {
	// Base sends the requests. Default: http.DefaultTransport.
	Base http.RoundTripper

	// Limit paces each key: by default the host the request is for
	// (req.Host if set, else URL.Host), one permit per request.
	Limit reserve.Limit

	// Route, if set, chooses each request's key, policy and cost instead.
	// An error fails the request before anything is reserved. A policy
	// may hold an in-flight band (reserve.Band.InFlight): the request
	// takes its seats, its Cost's amount for the band's unit, and holds
	// them while it is open (see InFlight).
	Route func(*http.Request) (Route, error)

	// InFlight, if positive, allows at most InFlight requests open at
	// once on each key (each host, or each Route's key), fleet-wide: it
	// adds an in-flight band (InFlightBand, one InFlightUnit per request)
	// to each key's policy, unless a Route's policy has one of its own,
	// which then stands. A request waits for its seat in the key's queue,
	// in order, before its slot, and holds it while it is open: until its
	// response's Body is closed or read to io.EOF, whichever comes first,
	// so a body never closed holds its seat until the Limiter is closed.
	// A request that fails, or whose response has no body, gives its seat
	// back at once, and so does a refusal (429): a retry takes a seat
	// again after its wait. A seat that cannot come before the request's
	// context's deadline fails it with a *reserve.WaitTooLongError whose
	// Band is InFlightBand. Seats are held by the Limiter's membership of
	// the fleet: a process killed with requests open gives them back
	// within about two heartbeats (reserve.Options.HeartbeatInterval).
	// Default 0: no in-flight limit. Negative, or above reserve's bound
	// for an in-flight band, New refuses.
	InFlight int

	// Adaptive, if set, learns each key's rate from the provider's 429s
	// instead of Limit (see package adaptive): every 429 episode cuts the
	// fleet's rate once, and the rate climbs back while none comes. With
	// Route set, Adaptive replaces the Route's policy by a single bucket.
	// A key's requests wait their turn in the process and reserve only
	// when their slot is within 200 ms, at the rate then, so that a cut or
	// a rise reaches every request not yet sent, in order; a request whose
	// slot cannot come before its context's deadline fails at once with a
	// *reserve.WaitTooLongError.
	Adaptive *adaptive.Config

	// Settle, if set, reads a successful response and returns the call's
	// actual cost (tokens used, points), which settles its reservation
	// (reserve.Reservation.Settle). It may read the headers; to read the
	// body it must leave resp.Body readable (read it and put back a copy).
	// An error is logged and the estimate stands.
	Settle func(*http.Response) (reserve.Cost, error)

	// MaxRetries is how many times a request refused with 429 (or 503
	// with a Retry-After) is sent again, each after the pause the provider
	// asked for. Default 2; negative: never. A request is retried only if
	// its method is idempotent (or Idempotency-Key is set, or RetryUnsafe),
	// its body can be replayed (GetBody), and the pause ends before its
	// context's deadline; otherwise the 429 is returned as it came.
	MaxRetries int
	// RetryUnsafe retries POST, PATCH and other non-idempotent methods too.
	RetryUnsafe bool

	// MaxWait caps the wait a provider may ask for (Retry-After, a reset):
	// a longer one is cut to it and logged. Default 1 h.
	MaxWait time.Duration
	// DefaultWait is the pause after a 429 that does not say how long.
	// Default 1 s.
	DefaultWait time.Duration

	// IgnoreCounts turns off pacing by the provider's counts. By default,
	// once a key's answers report a quota of calls (Advice.Calls: GitHub's
	// x-ratelimit-remaining, the IETF drafts' RateLimit fields, OpenAI's
	// and Anthropic's request counts), the fleet keeps that count in Redis:
	// the calls left, less those in flight, spread evenly over the time to
	// the reset, a tenth of them at once; when none are left, calls wait for
	// the reset, and the first one after it goes alone, to learn the new
	// window. OpenAI's and Anthropic's quotas, whose reset is when they are
	// whole again, are counted as such windows until their answers show a
	// bucket refilled continuously (one refill rate for all of them), which
	// is then paced at that rate, each call in its turn (docs/http.md). A
	// call waits for the count first, then for its slot of the
	// Limit, so the count never sends a call off the Limit's schedule or
	// into a pause. This costs two more Redis calls per
	// request on such a key. The count is of calls: a quota of tokens still
	// only pauses the key when it is exhausted.
	IgnoreCounts bool

	// IgnoreBodies turns off reading the provider's body. By default the
	// body of a 429 or a 503 (and of a JSON 200 with ShopifyThrottle) is
	// read, at most BodyLimit bytes, for the signals ParseBody knows
	// (Google's RetryInfo and QuotaFailure, OpenAI's error type, Shopify's
	// THROTTLED), and left whole for the caller. The headers win: a wait
	// from the body counts only where the headers give none, but for what
	// the body says more precisely (docs/http.md, "The provider's body").
	IgnoreBodies bool
	// ShopifyThrottle reads the body of a JSON 200 as well, for Shopify's
	// GraphQL refusal: an error THROTTLED, sent with status 200. It is
	// then a refusal as a 429 is: the key pauses for
	// (requestedQueryCost - currentlyAvailable) / restoreRate and the
	// request is retried as a 429's is (GraphQL's POST: with RetryUnsafe or
	// an Idempotency-Key). Settle with ShopifyCost for the points a call
	// actually cost.
	ShopifyThrottle bool
	// DailyReset is the zone whose midnight a quota per day resets at, for
	// a body that names one exhausted (Google's QuotaFailure with a quotaId
	// containing "PerDay"): the key pauses until that midnight, cut to
	// MaxWait like any wait (so raise MaxWait to 24 h or more to pause
	// the whole day). Default Pacific() (America/Los_Angeles), as Google
	// documents for Gemini's and Cloud APIs' quotas per day.
	DailyReset *time.Location

	// Logger receives capped waits, malformed headers and bodies (once a
	// minute per key and header, or key and body signal) and failed
	// settles.
	// Default slog.Default().
	Logger *slog.Logger

	// Tracer, if set, follows each request's wait for its slot as
	// reserve.Options.Tracer follows a Wait: the Transport reserves and
	// sleeps rather than Waits, which the Limiter's Tracer does not see.
	// Pass the Limiter's own (package otelpacer's Telemetry). StartWait gets
	// the request's context, so the wait's span is a child of the HTTP
	// client span; then Reserved, Sleeping and End, once per try (a retry
	// after a 429 waits again). A move while the request slept (a pause
	// covered its slot) shows in the slot and band at the end, not as a
	// Moved. Default: none.
	Tracer reserve.Tracer
}

// Transport is an http.RoundTripper that paces requests on a
// reserve.Limiter. It is safe for concurrent use.
type Transport struct {
	lim     *reserve.Limiter
	opts    Options
	rates   rateCache // with Options.Adaptive: each key's learned rate
	warned  warnings  // malformed headers logged, per key and header
	counted counted   // keys whose answers report a quota of calls
	buckets counted   // keys whose quota of calls the count reads as a bucket refilled continuously
	gates   gates     // with Options.Adaptive: each key's requests in turn
	turns   takeTurns // the counts a caller asks again for the others (take)
}

// warnEvery is how often a malformed header is logged per key and header
// name: a provider that sends one on every response would bury the rest.
const warnEvery = time.Minute

// warnings remembers when a malformed header was last logged, per key and
// header name (at most maxRates entries; past it they start afresh).
type warnings struct {
	mu sync.Mutex
	m  map[[2]string]time.Time
}

// due reports whether header name on key is to be logged at now, and
// records it if so.
func (w *warnings) due(key, name string, now time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := [2]string{key, name}
	if last, ok := w.m[k]; ok && now.Sub(last) < warnEvery {
		return false
	}
	if w.m == nil || len(w.m) >= maxRates {
		w.m = map[[2]string]time.Time{}
	}
	w.m[k] = now
	return true
}

// maxRates bounds the adaptive rates a Transport keeps: a crawler's hosts
// come and go (issue 21, finding 18). Past it the cache starts afresh; a key
// dropped reads the fleet's rate from Redis again as before, and only its
// fallback while Redis cannot be reached (the last rate read) starts again
// from Adaptive.Start.
const maxRates = 10_000

// rateCache keeps one adaptive.Rate per key.
type rateCache struct {
	mu sync.Mutex
	m  map[string]*adaptive.Rate
}

// rate returns key's adaptive rate, made on first use.
func (t *Transport) rate(key string) (*adaptive.Rate, error) {
	c := &t.rates
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.m[key]; r != nil {
		return r, nil
	}
	r, err := adaptive.New(t.lim, key, *t.opts.Adaptive)
	if err != nil {
		return nil, fmt.Errorf("pacehttp: %w", err)
	}
	if c.m == nil || len(c.m) >= maxRates {
		c.m = make(map[string]*adaptive.Rate)
	}
	c.m[key] = r
	return r, nil
}

// ErrNoLimit is returned by New when Options gives no way to pace.
var ErrNoLimit = errors.New("pacehttp: Options needs a Limit, a Route or Adaptive")

// New returns a Transport pacing on lim.
func New(lim *reserve.Limiter, opts Options) (*Transport, error) {
	if lim == nil {
		return nil, errors.New("pacehttp: nil Limiter")
	}
	if opts.Route == nil && opts.Adaptive == nil {
		if opts.Limit == (reserve.Limit{}) {
			return nil, ErrNoLimit
		}
		if err := opts.Limit.Validate(); err != nil {
			return nil, fmt.Errorf("pacehttp: Limit: %w", err)
		}
	}
	if opts.Adaptive != nil {
		if err := opts.Adaptive.Validate(); err != nil {
			return nil, fmt.Errorf("pacehttp: Adaptive: %w", err)
		}
	}
	if err := checkInFlight(lim, opts.InFlight); err != nil {
		return nil, err
	}
	if opts.Base == nil {
		opts.Base = http.DefaultTransport
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 2
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = time.Hour
	}
	if opts.DefaultWait <= 0 {
		opts.DefaultWait = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.DailyReset == nil {
		opts.DailyReset = Pacific()
	}
	return &Transport{lim: lim, opts: opts}, nil
}

// RoundTrip reserves req's slot, sleeps until it, sends req and acts on the
// answer (see Options). It does not modify req, and closes its body on
// every error. A slot that would come after req's context deadline fails
// the request at once, reserving nothing, with an error wrapping a
// *reserve.WaitTooLongError. With an in-flight limit (Options.InFlight, or
// a Route's in-flight band) it takes the request's seat first, and the
// response's Body holds it until it is closed or read to io.EOF.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	rt, seats, err := t.route(req)
	if err != nil {
		closeBody(req)
		return nil, err
	}
	send := req
	for try := 0; ; try++ {
		// The call's seats first (an in-flight band), held until it ends;
		// then its slot.
		seat, err := t.takeSeats(ctx, seats)
		if err != nil {
			closeBody(send)
			return nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		r, take, err := t.admit(ctx, &rt, try > 0)
		if err != nil {
			inflight.Done(seat)
			closeBody(send)
			return nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		// The seats' last check before the request goes: seats the fleet
		// handed on while the slot came (this process's calls on the key
		// went unanswered) are waited for again. On an error Sleep gives
		// them back.
		if seat != nil {
			if err := seat.Sleep(ctx); err != nil {
				if r != nil {
					_ = r.Cancel(context.WithoutCancel(ctx))
				}
				closeBody(send)
				return nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
			}
			// A wait for seats again may end past the rate slot r slept
			// to, later than it may be used: r sleeps again, on a fresh
			// slot (once), as a sleeper that woke that late does.
			if r != nil && hook.LateForSlot(r) {
				if err := r.Sleep(ctx); err != nil {
					inflight.Done(seat)
					closeBody(send)
					return nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
				}
			}
		}
		// end ends the call: its seats go back (a Reservation holds them
		// when its policy's in-flight band is its only band).
		end := done(seat, r)
		if hook.Sending != nil {
			hook.Sending(send, r)
		}
		sent := time.Now()
		resp, err := t.opts.Base.RoundTrip(send)
		if err != nil {
			// The request may have reached the provider: the slot stays
			// spent, and the call taken from the count stays in flight
			// until it lapses. The call has ended: its seats go back.
			end()
			return nil, err
		}
		now := time.Now()
		adv, bad := ParseAdvice(resp.Header, resp.StatusCode, now, t.opts.MaxWait)
		if !t.opts.IgnoreCounts && (take > 0 || adv.Calls.Source != "") {
			if adv.Calls.Source != "" {
				t.counted.set(rt.Key, true)
			}
			if adv.Calls.Source == "" && resp.StatusCode == http.StatusTooManyRequests {
				// A refusal that counts nothing (a body's RetryInfo, a
				// proxy's 429) says nothing of the count: the provider
				// charged nothing, so the take is given back as one not
				// sent (a probe so refused lets the next call probe). As
				// an answer it would end the count after a window's end.
				t.drop(ctx, rt.Key, take)
			} else {
				t.answer(ctx, rt.Key, take, adv.Calls, now.Sub(sent), relativeReset(resp.Header, adv.Calls))
			}
		}
		for _, e := range bad {
			var he *headerError
			if errors.As(e, &he) && !t.warned.due(rt.Key, he.name, now) {
				continue
			}
			t.opts.Logger.Warn("pacehttp: ignored a malformed rate-limit header (logged once a minute per key and header)", "key", rt.Key, "err", e)
		}
		if adv.Capped {
			t.opts.Logger.Warn("pacehttp: the provider asked for a longer wait than MaxWait; waiting MaxWait",
				"key", rt.Key, "asked", adv.Asked, "max_wait", t.opts.MaxWait)
		}
		body := t.readBody(resp, rt.Key, now)
		if body.Billing && resp.StatusCode == http.StatusTooManyRequests {
			// Not a rate limit: no pause, no retry; nothing was charged.
			_ = r.Cancel(context.WithoutCancel(ctx))
			resp.Body.Close()
			end()
			return nil, fmt.Errorf("pacehttp: %s %s: %w: %q", req.Method, req.URL.Redacted(), ErrInsufficientQuota, shown(body.Message))
		}
		if resp.StatusCode == http.StatusForbidden && adv.Wait == 0 && !adv.Exhausted && secondaryLimit(resp) {
			adv.Wait, adv.Source = min(githubSecondaryWait, t.opts.MaxWait), "github-secondary"
		}
		// A refusal: a 429; a 503 or 403 that asks for a wait (Retry-After,
		// GitHub's secondary limit) or says a quota is exhausted until a
		// reset. Any other 403 is the provider's answer, passed through.
		// Or a body that says so: Shopify's THROTTLED (status 200), a 503
		// with Google's RetryInfo.
		limited := resp.StatusCode == http.StatusTooManyRequests ||
			((resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusForbidden) && adv.Wait > 0) ||
			(resp.StatusCode == http.StatusForbidden && adv.Exhausted && adv.ResetSource != "") ||
			(resp.StatusCode == http.StatusServiceUnavailable && body.Wait > 0) ||
			(resp.StatusCode == http.StatusOK && body.Throttled)
		if !limited {
			if adv.Exhausted && adv.Reset > 0 && !t.countCovers(rt.Key, adv) {
				// Nothing left until the reset: stop the fleet before a 429.
				t.pause(ctx, rt, adv.Reset)
			}
			if t.opts.Settle != nil && resp.StatusCode < 400 {
				t.settle(ctx, rt, seats, r, resp)
			}
			holdSeats(resp, end)
			return resp, nil
		}

		// Refused: the provider charged nothing (give the cost back where
		// nobody built on it), the call has ended (its seats go back before
		// a retry waits, and the retry takes seats again), the fleet
		// pauses, the rate is cut.
		wait := t.refusalWait(rt.Key, resp, adv, body, now)
		detached := context.WithoutCancel(ctx)
		_ = r.Cancel(detached)
		end()
		t.pause(ctx, rt, wait)
		if t.opts.Adaptive != nil {
			rate, err := t.rate(rt.Key)
			if err == nil {
				_, _, err = rate.Cut(detached, rt.Policy[0].Limit.Rate)
			}
			if err != nil {
				t.opts.Logger.Warn("pacehttp: could not cut the adaptive rate", "key", rt.Key, "err", err)
			}
		}
		next, ok := t.retryable(req, try, wait)
		if !ok {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		send = next
		if t.opts.Adaptive != nil {
			// The retry is another call, at the rate after the cut.
			lim, err := t.adaptiveLimit(ctx, rt.Key)
			if err != nil {
				closeBody(send)
				return nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
			}
			rt.Policy = lim.Policy()
		}
	}
}

// admit waits until the call on rt may be sent: the provider's count of
// the key's calls (if kept) lets it go, and it is on a slot of the key's
// schedule, reserved and slept to, with every pause honoured. It returns
// the slot and the take from the count (0: none).
//
// The count comes first: a call takes its turn from the count and sleeps to
// it, and only then reserves its slot of the Limit (or the adaptive rate)
// and sleeps to that. So a call the count held (until its window ends, or
// its turn in the spread) is sent on a slot taken after the wait, never on
// one that passed meanwhile: the count adds a constraint to the Limit and
// the pauses, and never goes around them. (Before, the slot came first and
// the count's wait after it: the calls a window's end released went
// together, and into a pause made while they waited.)
//
// A turn taken from the count is in flight for the count until answered or
// dropped, and a probe is alone only for a while. When the slot comes long
// after the turn (quotaStale: a pause, a long queue on the Limit), the call
// gives its turn back and takes from the count again: it is sent on this
// slot if the count still has a call for it (a number: a call left in the
// window, or the probe), even if the count's spread would place it later
// (the Limit has held it past its turn already; giving up the slot for
// the spread's turn would only meet the same queue again). If the count
// has nothing (the window spent, a probe out), the call gives the slot up
// and waits for the count again.
//
// A call that could not reach the count (Redis unreachable: it took
// nothing) asks it again the same way once it has its slot, however soon:
// that slot may come from Redis, back again, or Redis may be back by then
// (a process that starts during an outage waits for Redis to grant its
// first slots). Only a call that still cannot reach the count at its slot
// is sent without it, paced by the Limit alone. (Before, a call went on
// uncounted from the take that failed: in the combination runner, the
// processes restarted during an OOM sent their first calls on slots Redis
// granted 8 s later, after the OOM, into a window the fleet counted
// without them: 28 calls reached the provider in a window of 24,
// TestCountsAfterOutage.)
func (t *Transport) admit(ctx context.Context, rt *Route, retry bool) (*reserve.Reservation, int64, error) {
	var (
		take  int64
		turn  time.Time // when take's turn came
		blind bool      // the count could not be reached: nothing taken
	)
	for {
		if take == 0 && t.takes(rt.Key) {
			var err error
			if take, blind, err = t.take(ctx, rt.Key); err != nil {
				return nil, 0, err
			}
			turn = time.Now()
		}
		var (
			r   *reserve.Reservation
			err error
		)
		wctx, tr := t.startWait(ctx, rt.Key)
		if t.opts.Adaptive != nil {
			r, err = t.reserveAdaptive(wctx, rt, retry, tr)
		} else {
			r, err = t.reserve(wctx, *rt, tr)
		}
		t.endWait(tr, r, err)
		if err != nil {
			if take > 0 {
				t.drop(ctx, rt.Key, take)
			}
			return nil, 0, err
		}
		switch {
		case take > 0 && time.Since(turn) <= quotaStale, take == 0 && !blind:
			return r, take, nil
		case take > 0:
			// The slot came long after the count's turn: ask the count
			// again.
			t.drop(ctx, rt.Key, take)
		}
		// Or the count could not be reached: ask it again, now that the
		// call has its slot.
		tk, err := t.takeOnce(ctx, rt.Key)
		if err != nil {
			_ = r.Cancel(context.WithoutCancel(ctx))
			return nil, 0, err
		}
		if !tk.known || tk.id > 0 {
			return r, tk.id, nil
		}
		// The count has nothing now: the slot is given up, and the call
		// waits for the count, then for a fresh slot.
		_ = r.Cancel(context.WithoutCancel(ctx))
		if err := t.waitCount(ctx, rt.Key, 0, tk.wait); err != nil {
			return nil, 0, err
		}
		take, blind = 0, false
	}
}

// takes reports whether a call on key takes from the fleet's count of its
// calls: it is counted, or not known to be uncounted yet.
func (t *Transport) takes(key string) bool {
	if t.opts.IgnoreCounts {
		return false
	}
	counted, known := t.counted.get(key)
	return counted || !known
}

// countCovers reports whether the fleet's count of key's calls paces what
// adv says is exhausted: the count of calls is 0 and no other quota
// refills later. The count then holds the calls until the window's end,
// and a pause would add nothing but a
// reset rounded up.
func (t *Transport) countCovers(key string, adv Advice) bool {
	c := adv.Calls
	return !t.opts.IgnoreCounts && c.Source != "" && c.Remaining == 0 && adv.Reset <= c.Reset && t.counted.has(key)
}

// secondaryLimit reports whether the start of resp's body (4 KiB) carries
// GitHub's message for its secondary rate limit ("You have exceeded a
// secondary rate limit"), and leaves the body whole for the caller.
func secondaryLimit(resp *http.Response) bool {
	head, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	return bytes.Contains(bytes.ToLower(head), []byte("secondary rate limit"))
}

// adaptiveLimit returns key's learned Limit, counting one call of demand.
func (t *Transport) adaptiveLimit(ctx context.Context, key string) (reserve.Limit, error) {
	rate, err := t.rate(key)
	if err != nil {
		return reserve.Limit{}, err
	}
	return rate.Limit(ctx)
}

// route returns req's Route, with the adaptive rate if set, and the
// request for its seats (nil: none taken apart; see seatsFor).
func (t *Transport) route(req *http.Request) (Route, *reserve.Request, error) {
	var rt Route
	if t.opts.Route != nil {
		var err error
		if rt, err = t.opts.Route(req); err != nil {
			return Route{}, nil, fmt.Errorf("pacehttp: route %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
	} else {
		rt = Route{Key: cmp.Or(req.Host, req.URL.Host), Policy: t.opts.Limit.Policy(), Cost: reserve.Permits(1)}
	}
	if err := hook.CheckKey(rt.Key); err != nil {
		return Route{}, nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	seats, rt, err := t.seatsFor(rt)
	if err != nil {
		return Route{}, nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	if t.opts.Adaptive != nil {
		lim, err := t.adaptiveLimit(req.Context(), rt.Key)
		if err != nil {
			return Route{}, nil, fmt.Errorf("pacehttp: %s %s: %w", req.Method, req.URL.Redacted(), err)
		}
		rt.Policy, rt.Cost = lim.Policy(), reserve.Permits(1)
	}
	return rt, seats, nil
}

// startWait starts following a wait for key's slot (Options.Tracer): it
// returns the context to wait with, and nil without a Tracer.
func (t *Transport) startWait(ctx context.Context, key string) (context.Context, reserve.WaitTrace) {
	if t.opts.Tracer == nil {
		return ctx, nil
	}
	return t.opts.Tracer.StartWait(ctx, key)
}

// sleeping tells tr (if not nil) of r, just granted, before its sleep:
// Reserved for a wait's first reservation (reported false), and Sleeping.
func sleeping(tr reserve.WaitTrace, r *reserve.Reservation, reported bool) {
	if tr == nil {
		return
	}
	if !reported {
		tr.Reserved(r)
	}
	tr.Sleeping(r, r.Delay())
}

// endWait ends tr (if not nil): the wait for r returned err.
func (t *Transport) endWait(tr reserve.WaitTrace, r *reserve.Reservation, err error) {
	if tr == nil {
		return
	}
	var late time.Duration
	if err == nil {
		late = max(0, t.lim.Clock().Now().Sub(r.Time()))
	}
	tr.End(err, late)
}

// reserve reserves rt's slot, no later than ctx's deadline, and sleeps
// until it, telling tr (if not nil).
func (t *Transport) reserve(ctx context.Context, rt Route, tr reserve.WaitTrace) (*reserve.Reservation, error) {
	maxWait := time.Duration(-1)
	if d, ok := ctx.Deadline(); ok {
		if maxWait = time.Until(d); maxWait <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	var (
		r   *reserve.Reservation
		err error
	)
	if maxWait >= 0 {
		r, err = t.lim.TryReserveN(ctx, rt.request(), maxWait)
		if tooLong, ok := errors.AsType[*reserve.WaitTooLongError](err); ok {
			tooLong.Deadline = true // the maximum was the time left before it
		}
	} else {
		r, err = t.lim.ReserveN(ctx, rt.request())
	}
	if err != nil {
		return nil, err
	}
	sleeping(tr, r, false)
	if err := r.Sleep(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (t *Transport) pause(ctx context.Context, rt Route, d time.Duration) {
	if err := t.lim.Pause(context.WithoutCancel(ctx), rt.Key, d); err != nil {
		t.opts.Logger.Warn("pacehttp: could not pause the key", "key", rt.Key, "pause", d, "err", err)
	}
}

func (t *Transport) settle(ctx context.Context, rt Route, seats *reserve.Request, r *reserve.Reservation, resp *http.Response) {
	if len(rt.Policy) == 1 && rt.Policy[0].InFlight != 0 {
		// Seats alone: nothing to settle (seats go back whole), and a
		// settle would end the call before its body is read.
		return
	}
	cost, err := t.opts.Settle(resp)
	if err == nil && seats != nil {
		cost = inflight.SettleCost(cost, *seats, rt.Policy)
	}
	if err == nil {
		err = r.Settle(context.WithoutCancel(ctx), cost)
	}
	if err != nil {
		t.opts.Logger.Warn("pacehttp: could not settle the call's cost; the estimate stands", "key", rt.Key, "err", err)
	}
}

// retryable returns the request to send again after a refusal, if req may
// be retried: retries left, a method that may be repeated, a body that can
// be replayed, and a pause that ends before the deadline.
func (t *Transport) retryable(req *http.Request, try int, wait time.Duration) (*http.Request, bool) {
	if try >= t.opts.MaxRetries {
		return nil, false
	}
	if !t.opts.RetryUnsafe && !idempotent(req) {
		return nil, false
	}
	if d, ok := req.Context().Deadline(); ok && time.Now().Add(wait).After(d) {
		return nil, false
	}
	next := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		if req.GetBody == nil {
			return nil, false
		}
		body, err := req.GetBody()
		if err != nil {
			return nil, false
		}
		next.Body = body
	}
	return next, true
}

// idempotent reports whether req may be sent twice (RFC 9110, 9.2.2), as
// net/http's own retries decide it.
func idempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}
