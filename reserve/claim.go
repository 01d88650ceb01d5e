package reserve

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pacer-go/pacer/lua"
	"github.com/redis/go-redis/v9"
)

// A hold is a slot reserved for one holder (typically a queued job, named by
// its ID) and recorded in Redis under that ID, beside the bucket, so that the
// holder redeems it later instead of reserving a second slot: a job
// rescheduled to its slot, or enqueued for it ahead of time, uses the slot it
// was given. Claim redeems or creates a hold; Hold creates many at once.

// DefaultStaleAfter is how late a held slot may still be redeemed unless
// HoldOptions.StaleAfter says otherwise. A hold later than this is dropped
// and its holder gets a fresh slot: its holder was not there to use it (the
// workers were down, or the queue was behind), and handing out every missed
// slot at once would be a burst. A late holder uses its slot at once, so at
// most Rate * StaleAfter permits can ever be spent together that way: one
// second's worth. Holders that a job queue brings back early on purpose
// (see HoldOptions.Early) are late only after a hiccup.
const DefaultStaleAfter = time.Second

// ErrEmptyID is returned when a holder ID is empty.
var ErrEmptyID = errors.New("reserve: empty holder ID")

// Permits is what one use of a key costs: N permits on the bucket Key, which
// is paced at Limit.
type Permits struct {
	Key   string
	Limit Limit
	N     int // permits, 1..Limit.Burst; 0 means 1
}

func (p Permits) n() int {
	if p.N == 0 {
		return 1
	}
	return p.N
}

// HoldOptions configure how holds are kept. The zero value is ready to use.
type HoldOptions struct {
	// StaleAfter is how late a held slot may be and still be redeemed. A
	// later one is dropped and a fresh slot reserved, so a backlog drains at
	// the rate instead of spending every missed slot at once. A hold nobody
	// redeems expires StaleAfter after its slot. Default (0):
	// DefaultStaleAfter.
	StaleAfter time.Duration

	// Early is how far away a held slot may be and still be handed over
	// by Claim and TryClaim, when that is further than their maxWait: a
	// holder that a job queue brings back early on purpose (it delivers in
	// coarse steps) then sleeps the rest instead of leaving again. Default
	// (0): maxWait alone decides. Hold ignores it.
	Early time.Duration
}

func (o HoldOptions) staleUS() (int64, error) {
	d := o.StaleAfter
	if d < 0 {
		return 0, fmt.Errorf("%w: StaleAfter %v", ErrInvalidDuration, d)
	}
	if d == 0 {
		d = DefaultStaleAfter
	}
	if o.Early < 0 {
		return 0, fmt.Errorf("%w: Early %v", ErrInvalidDuration, o.Early)
	}
	return int64((d + time.Microsecond - 1) / time.Microsecond), nil
}

// A Claim is the slot a holder was handed by Claim, TryClaim or Hold.
type Claim struct {
	// Reservation is the slot. Its Time may lie in the past when a held
	// slot is redeemed a little late (at most HoldOptions.StaleAfter).
	Reservation *Reservation

	// Held reports that the slot is recorded for the holder, who should
	// come back for it (reschedule the job to Reservation.Time) and claim it
	// then. When false, the slot is the caller's to use now: sleep
	// Reservation.Delay() and go.
	Held bool

	// FromHold reports that the slot had been held for the holder before
	// this call (the holder was rescheduled or enqueued for it), so no
	// permits were reserved by this call.
	FromHold bool

	// DroppedStale reports that a hold was found too far in the past and
	// dropped, and the slot is a fresh one.
	DroppedStale bool
}

var claimScript = redis.NewScript(lua.Claim)

// Claim hands holder id the slot held for it on p.Key, or reserves a fresh
// one, in one atomic step. A slot at most maxWait away is handed over (the
// hold, if any, is deleted; Claim.Held is false). A slot further away is kept
// for id: a fresh one is reserved and recorded, an existing hold is left as
// it is, and Claim.Held is true (unless it is within HoldOptions.Early,
// then it is handed over). A hold further than
// HoldOptions.StaleAfter in the past is dropped and a fresh slot reserved.
//
// A job queue calls Claim each time a job runs, with the job's ID: it sleeps
// until a handed-over slot, and reschedules the job to a held one.
func (l *Limiter) Claim(ctx context.Context, id string, p Permits, maxWait time.Duration, opts HoldOptions) (*Claim, error) {
	return l.claim(ctx, "claim", id, p, maxWait, true, opts)
}

// TryClaim is Claim, except that a slot further than maxWait away is
// refused instead of held: it returns a *WaitTooLongError, reserves nothing,
// and leaves an existing hold as it is. Use it for a holder that cannot come
// back later.
func (l *Limiter) TryClaim(ctx context.Context, id string, p Permits, maxWait time.Duration, opts HoldOptions) (*Claim, error) {
	return l.claim(ctx, "try claim", id, p, maxWait, false, opts)
}

func (l *Limiter) claim(ctx context.Context, op, id string, p Permits, maxWait time.Duration, mayHold bool, opts HoldOptions) (*Claim, error) {
	n := p.n()
	if err := validate(p.Key, p.Limit, n); err != nil {
		return nil, err
	}
	if id == "" {
		return nil, ErrEmptyID
	}
	if maxWait < 0 {
		return nil, fmt.Errorf("%w: maxWait %v", ErrInvalidDuration, maxWait)
	}
	staleUS, err := opts.staleUS()
	if err != nil {
		return nil, err
	}
	hold := "0"
	if mayHold {
		hold = "1"
	}
	now, args := l.args(p.Limit, n, maxWait.Microseconds(), hold, staleUS, opts.Early.Microseconds())
	res, err := l.runKeys(ctx, op, claimScript, p.Key, []string{l.RedisKey(p.Key), l.holdKey(p.Key, id)}, args)
	if err != nil {
		return nil, err
	}
	reply, ok := res.([]any)
	if !ok || len(reply) < 4 {
		return nil, replyError(op, p.Key, res)
	}
	status, ok1 := reply[0].(int64)
	waitUS, ok2 := reply[1].(int64)
	from, ok3 := reply[2].(int64)
	heldN, ok4 := reply[3].(int64)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return nil, replyError(op, p.Key, res)
	}
	if status == 0 {
		return nil, &WaitTooLongError{Wait: durationUS(waitUS), MaxWait: maxWait}
	}
	if len(reply) != 7 {
		return nil, replyError(op, p.Key, res)
	}
	slotUS, ok1 := reply[4].(string)
	slotFrac, ok2 := reply[5].(string)
	seq, ok3 := reply[6].(int64)
	if !ok1 || !ok2 || !ok3 {
		return nil, replyError(op, p.Key, res)
	}
	if l.serverTime {
		now = l.clock.Now() // see reserve: never early
	}
	return &Claim{
		Reservation:  l.heldReservation(now, p, int(heldN), waitUS, slotUS, slotFrac, seq),
		Held:         status == 2,
		FromHold:     from == 1,
		DroppedStale: from == 2,
	}, nil
}

// holdKey is the Redis key of id's hold on key: in the bucket's hash tag, so
// a script may touch both on Redis Cluster.
func (l *Limiter) holdKey(key, id string) string {
	return l.RedisKey(key) + ":hold:" + id
}

// heldReservation builds the Reservation for a slot waitUS (possibly
// negative) after now, as a script returned it.
func (l *Limiter) heldReservation(now time.Time, p Permits, n int, waitUS int64, slotUS, slotFrac string, seq int64) *Reservation {
	var at time.Time
	if waitUS < 0 {
		at = now.Add(-durationUS(-waitUS))
	} else {
		at = now.Add(durationUS(waitUS))
	}
	return &Reservation{
		lim:      l,
		key:      p.Key,
		limit:    p.Limit,
		n:        n,
		at:       at,
		slotUS:   slotUS,
		slotFrac: slotFrac,
		seq:      seq,
	}
}

func scriptError(op, key string, err error) error {
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("%w (%s %q)", ErrWrongType, op, key)
	}
	return fmt.Errorf("reserve: %s %q: %w", op, key, err)
}
