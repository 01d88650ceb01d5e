package pacehttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/hook"
	"github.com/pacer-go/pacer/internal/inflight"
	"github.com/pacer-go/pacer/reserve"
)

// In-flight limits (reserve.Band.InFlight): at most N requests open at
// once on a key, fleet-wide. A request takes its seat before its slot, and
// holds it while it is open: until its response's body is closed or read
// to the end (io.EOF), or at once when there is no response (an error) or
// no body. A refused request (429) gives its seat back before it waits for
// its retry, and takes one again for it.

const (
	// InFlightBand is the name of the band Options.InFlight adds to each
	// key's policy: the Band of a *reserve.WaitTooLongError for a request
	// whose seat did not come before its context's deadline.
	InFlightBand = "in-flight"
	// InFlightUnit is the unit of that band: one per request.
	InFlightUnit = "requests"
)

// inFlightBand is the band Options.InFlight n adds.
func inFlightBand(n int) reserve.Band {
	return reserve.Band{Name: InFlightBand, Unit: InFlightUnit, InFlight: n}
}

// checkInFlight reports whether n is an Options.InFlight lim takes. The
// bounds of an in-flight band are reserve's: a request that names one with
// a cost that cannot be (NaN) is refused for its policy if its band is
// bad, for its cost otherwise, before anything is taken.
func checkInFlight(lim *reserve.Limiter, n int) error {
	if n < 0 {
		return fmt.Errorf("pacehttp: InFlight %d is negative (0: no in-flight limit)", n)
	}
	if n == 0 {
		return nil
	}
	probe := reserve.Request{Key: "pacehttp", Policy: reserve.Policy{inFlightBand(n)}, Cost: reserve.Cost{InFlightUnit: math.NaN()}}
	_, err := lim.TryReserveN(context.Background(), probe, 0)
	if errors.Is(err, reserve.ErrInvalidPolicy) {
		return fmt.Errorf("pacehttp: InFlight: %w", err)
	}
	return nil
}

// seatsFor splits rt's in-flight band off (or adds Options.InFlight's, if
// rt's policy has none): it returns the request for the call's seats (nil:
// none to take apart) and rt on its other bands. A policy whose in-flight
// band is its only band (and no Adaptive rate to put beside it) is left
// whole: its Reservation holds the seats.
func (t *Transport) seatsFor(rt Route) (*reserve.Request, Route, error) {
	seats, rest, ok, err := inflight.Split(rt.request())
	if err != nil {
		return nil, rt, err
	}
	if _, has := inflight.Band(rt.Policy); !has && t.opts.InFlight > 0 {
		seats, ok = reserve.Request{Key: rt.Key, Policy: reserve.Policy{inFlightBand(t.opts.InFlight)}, Cost: reserve.Cost{InFlightUnit: 1}}, true
	}
	if !ok || (len(rest.Policy) == 0 && t.opts.Adaptive == nil) {
		return nil, rt, nil
	}
	rt.Policy, rt.Cost = rest.Policy, rest.Cost
	return &seats, rt, nil
}

// takeSeats takes the seats of sq (nil: none, and it returns nil), waiting
// in the key's queue no later than ctx's deadline: a seat that does not come
// before it fails the request with a *reserve.WaitTooLongError (Band: the
// in-flight band's name).
func (t *Transport) takeSeats(ctx context.Context, sq *reserve.Request) (*reserve.Reservation, error) {
	if sq == nil {
		return nil, nil
	}
	var (
		r   *reserve.Reservation
		err error
	)
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		if left <= 0 {
			return nil, context.DeadlineExceeded
		}
		r, err = t.lim.TryReserveN(ctx, *sq, left)
		if tooLong, ok := errors.AsType[*reserve.WaitTooLongError](err); ok {
			tooLong.Deadline = true
		} else if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			// The deadline came before the wait's own bound noticed: the
			// same refusal.
			err = fmt.Errorf("%w: %w", err, &reserve.WaitTooLongError{Wait: left, MaxWait: left, Band: sq.Policy[0].Name, Deadline: true})
		}
	} else {
		r, err = t.lim.ReserveN(ctx, *sq)
	}
	if err != nil {
		return nil, err
	}
	// Not open until the slot: RoundTrip's Sleep on it, once the slot has
	// come, checks the seats once more (the fleet may have handed them on
	// meanwhile, if this process's calls on the key went unanswered).
	hook.SeatsAsleep(r)
	return r, nil
}

// done ends the calls of rs (those not nil) when called, once.
func done(rs ...*reserve.Reservation) func() {
	return sync.OnceFunc(func() {
		for _, r := range rs {
			inflight.Done(r)
		}
	})
}

// holdSeats makes resp's body end the call when it is closed or read to
// io.EOF, whichever comes first; a response without a body ends it at once.
// A body that can be written to (a 101 Switching Protocols' connection)
// stays one.
func holdSeats(resp *http.Response, end func()) {
	if resp.Body == nil || resp.Body == http.NoBody {
		end()
		return
	}
	b := &seatBody{ReadCloser: resp.Body, end: end}
	if w, ok := resp.Body.(io.ReadWriteCloser); ok {
		resp.Body = &seatConn{seatBody: b, w: w}
		return
	}
	resp.Body = b
}

// seatBody is a response's body that ends the call's hold of its seats.
type seatBody struct {
	io.ReadCloser
	end func() // idempotent
}

func (b *seatBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.end()
	}
	return n, err
}

func (b *seatBody) Close() error {
	err := b.ReadCloser.Close()
	b.end()
	return err
}

// seatConn is a seatBody that can be written to.
type seatConn struct {
	*seatBody
	w io.Writer
}

func (c *seatConn) Write(p []byte) (int, error) { return c.w.Write(p) }
