package hold

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/reserve"
)

// ErrEmptyID is returned when a holder ID is empty. Nothing is reserved.
var ErrEmptyID = errors.New("hold: empty holder ID")

// errFair refuses a fair request (reserve.Request.Fair): its slot is booked
// only in its tenant's turn, so it cannot be kept ahead for a holder.
var errFair = fmt.Errorf("%w: hold: a fair request (Tenant, Lane or Weight) is booked only in its turn and cannot be held; reserve it with the Limiter when it runs", reserve.ErrInvalidFairness)

// MaxBatch is the most holders one script call of Book.Hold reserves for,
// so that no single script keeps Redis busy for long (a call of this size
// runs in about a millisecond). Hold sends larger batches as several calls
// in one pipeline.
const MaxBatch = 500

// Options configure a Book. The zero value is ready to use.
type Options struct {
	// StaleAfter is how late a held slot may be and still be redeemed. A
	// later one is dropped and a fresh slot reserved: its holder was not
	// there to use it (the workers were down, the queue was behind), and
	// handing out every missed slot at once would be a burst. A hold nobody
	// redeems expires StaleAfter after its slot. Default (0): half the slot
	// spacing of the request's fastest bucket, at least 1 ms (as
	// reserve.Options.MaxLateness), so late redemptions put at most half a
	// slot more into any window; one second when the policy has only window
	// bands.
	StaleAfter time.Duration

	// Early is how far away a held slot may be and still be handed over by
	// Claim and TryClaim when that is further than their maxWait: a holder
	// that a job queue brings back early on purpose (it delivers in coarse
	// steps) then sleeps the rest instead of leaving again. Default (0):
	// maxWait alone decides.
	Early time.Duration

	// NotBefore is how soon after now Hold may place a fresh slot: a job
	// enqueued for its slot is picked up about that late by the job queue,
	// and a slot it reaches late would be stale. Default (0): now.
	NotBefore time.Duration
}

// A Book keeps slots for holders on a Limiter's keys. It is safe for
// concurrent use; the slots are in Redis, so every process with a Book on
// the same keys (and KeyPrefix) redeems the same holds.
type Book struct {
	l    *reserve.Limiter
	opts Options
}

// New returns a Book on l, configured by opts. A negative duration fails
// with an error matching reserve.ErrInvalidDuration.
func New(l *reserve.Limiter, opts Options) (*Book, error) {
	if l == nil {
		return nil, fmt.Errorf("%w: hold: nil Limiter", reserve.ErrInvalidOptions)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"StaleAfter", opts.StaleAfter}, {"Early", opts.Early}, {"NotBefore", opts.NotBefore}} {
		if d.v < 0 {
			return nil, fmt.Errorf("%w: hold.Options.%s %v", reserve.ErrInvalidDuration, d.name, d.v)
		}
	}
	return &Book{l: l, opts: opts}, nil
}

// Limiter returns the Limiter b keeps its slots on.
func (b *Book) Limiter() *reserve.Limiter { return b.l }

// Source says where a Grant's slot came from.
type Source int

const (
	// Fresh: a slot reserved by this call.
	Fresh Source = iota
	// Redeemed: the slot kept for the holder before this call; nothing was
	// reserved.
	Redeemed
	// Stale: a fresh slot, after the holder's kept slot was dropped for
	// being more than StaleAfter in the past.
	Stale
	// Paused: a fresh slot, after the holder's kept slot was dropped for
	// lying inside a pause made after it was granted.
	Paused
)

func (s Source) String() string {
	switch s {
	case Fresh:
		return "fresh"
	case Redeemed:
		return "redeemed"
	case Stale:
		return "stale"
	case Paused:
		return "paused"
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// A Grant is the slot Claim, TryClaim or Hold gave a holder.
type Grant struct {
	// Reservation is the slot. Its Time may lie in the past when a kept
	// slot is redeemed a little late (at most StaleAfter). Its Cancel
	// also drops the hold.
	Reservation *reserve.Reservation
	// Kept reports that the slot is recorded for the holder, who should
	// come back for it (reschedule the job to Reservation.Time()) and claim
	// it then. When false, the slot is the caller's to use now: sleep
	// until it (Reservation.Sleep) and go.
	Kept bool
	// Source is where the slot came from.
	Source Source
}

// Claim hands holder id its slot on req.Key, in one atomic step: the slot
// kept for it, or a fresh one. A slot at most maxWait away is handed over
// (the hold, if any, is deleted; Kept is false). A slot further away is kept
// for id: a fresh one is reserved and recorded, an existing hold is left as
// it is, and Kept is true (unless it is within Options.Early: then it is
// handed over). A kept slot more than StaleAfter in the past, or inside a
// pause made after it was granted, is dropped and a fresh one taken.
//
// A job queue calls Claim each time a job runs, with the job's ID: it sleeps
// until a handed-over slot, and reschedules the job to a kept one.
func (b *Book) Claim(ctx context.Context, id string, req reserve.Request, maxWait time.Duration) (*Grant, error) {
	return b.claim(ctx, id, req, maxWait, true)
}

// TryClaim is Claim, except that a slot further than maxWait away is
// refused instead of kept: it returns a *reserve.WaitTooLongError, reserves
// nothing, and leaves an existing hold as it is. Use it for a holder that
// cannot come back later.
func (b *Book) TryClaim(ctx context.Context, id string, req reserve.Request, maxWait time.Duration) (*Grant, error) {
	return b.claim(ctx, id, req, maxWait, false)
}

func (b *Book) claim(ctx context.Context, id string, req reserve.Request, maxWait time.Duration, mayKeep bool) (*Grant, error) {
	if id == "" {
		return nil, ErrEmptyID
	}
	if req.Fair() {
		return nil, errFair
	}
	r, kept, source, err := hook.Claim(b.l, ctx, id, req, maxWait, b.opts.StaleAfter, b.opts.Early, mayKeep)
	if err != nil {
		return nil, err
	}
	return &Grant{Reservation: r.(*reserve.Reservation), Kept: kept, Source: Source(source)}, nil
}

// Hold's waits between tries while Redis is unavailable: doubling from
// holdRetryMin to holdRetryMax (the Limiter probes Redis meanwhile).
const (
	holdRetryMin = 50 * time.Millisecond
	holdRetryMax = time.Second
)

// A Request asks for a slot for holder ID.
type Request struct {
	ID string
	reserve.Request
}

// Hold reserves a slot for each request and keeps it for the request's ID,
// so that Claim with that ID hands the slot over later instead of reserving
// again (a job enqueued for its slot). It returns one Grant per request, in
// order, each Kept.
//
// Requests on one key and policy get slots in their order, as if reserved
// one after the other. All of them cost one Redis round trip: requests are
// grouped by key and policy, each group is sent as script calls of at most
// MaxBatch holders, and the calls go in one pipeline (plus a script load
// after Redis has lost its scripts). An ID that already holds a live slot
// on its key keeps it (Source Redeemed), so Hold may be repeated after a
// failure without reserving twice. If Hold fails, some groups may have been
// reserved; their holds expire unused. Bad input (an empty ID, a bad
// request) fails before anything is sent.
//
// The holds are Redis's alone: while Redis is unavailable (down, or slower
// than the Limiter's CallTimeout) Hold waits for it and tries again, as
// long as ctx allows (a caller who can wait gets no outage's error; the
// IDs make the repeat safe). When ctx ends first, the error matches
// ctx.Err(). A Limiter with Options.FailClosed returns
// reserve.ErrUnavailable at once.
func (b *Book) Hold(ctx context.Context, reqs []Request) ([]*Grant, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	ids := make([]string, len(reqs))
	rreqs := make([]reserve.Request, len(reqs))
	for i, r := range reqs {
		if r.ID == "" {
			return nil, fmt.Errorf("hold: request %d: %w", i, ErrEmptyID)
		}
		if r.Fair() {
			return nil, fmt.Errorf("hold: request %d: %w", i, errFair)
		}
		ids[i], rreqs[i] = r.ID, r.Request
	}
	rs, sources, err := hook.Hold(b.l, ctx, ids, rreqs, b.opts.StaleAfter, b.opts.NotBefore)
	for wait := holdRetryMin; err != nil && errors.Is(err, reserve.ErrUnavailable) && !hook.FailClosed(b.l); wait = min(2*wait, holdRetryMax) {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("hold: waiting for Redis (%v): %w", err, ctx.Err())
		case <-t.C:
		}
		rs, sources, err = hook.Hold(b.l, ctx, ids, rreqs, b.opts.StaleAfter, b.opts.NotBefore)
	}
	if err != nil {
		return nil, err
	}
	out := make([]*Grant, len(reqs))
	for i := range out {
		out[i] = &Grant{Reservation: rs[i].(*reserve.Reservation), Kept: true, Source: Source(sources[i])}
	}
	return out, nil
}
