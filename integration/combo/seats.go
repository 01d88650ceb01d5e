package combo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/granted"
	"github.com/pacer-go/pacer/reserve"
)

// KeySeats is the key with an in-flight band (issue 41): "at most N calls
// open at once", fleet-wide, in some seeds beside a bucket or a window on
// the same unit. Its calls hold the provider for a while (10 ms to a few
// seconds, now and then up to 30 s, cut by the run's end), so that the
// band binds: the Go processes' seatGoroutines each call one call after
// the other, several times N in all.
//
// The provider judges the calls open from their arrival to the end of its
// response (or to the moment the caller's connection closed: a process
// killed mid-call), and refuses any call beyond N open (Why "seats"): the
// verdict counts every such refusal, and the sweep of its records, as a
// violation (seatjudge.go). The key is not in Keys: its policy is the
// seed's (SeatsDraw), and the judges of the other keys (pauses, stalls,
// throughput) do not apply to it; its rate band, when it has one, is
// judged on the slots as every key's band is.
const KeySeats = "seats.example"

// seatBand is the in-flight band's name, seatRate the rate band's.
const (
	seatBand = "open"
	seatRate = "rate"
)

// SeatsDraw is a seed's policy of KeySeats, drawn from a stream of its own
// (so that the rest of a seed's timeline is as it was before it joined).
type SeatsDraw struct {
	N int // the in-flight band's N
	// Rate: the band beside it, on the same unit: "" (none), "bucket"
	// (Rate per second, Burst) or "window" (Window per WindowLength).
	Rate   string        `json:",omitempty"`
	PerSec float64       `json:",omitempty"`
	Burst  int           `json:",omitempty"`
	Window float64       `json:",omitempty"`
	Length time.Duration `json:",omitempty"`
}

// Policy is the policy the fleet passes and the provider enforces.
func (d SeatsDraw) Policy() reserve.Policy {
	pol := reserve.Policy{{Name: seatBand, Unit: unitRequests, InFlight: d.N}}
	switch d.Rate {
	case "bucket":
		pol = append(pol, reserve.Band{Name: seatRate, Unit: unitRequests, Limit: reserve.Limit{Rate: d.PerSec, Burst: d.Burst}})
	case "window":
		pol = append(pol, reserve.Band{Name: seatRate, Unit: unitRequests, Window: reserve.Window{N: d.Window, Length: d.Length}})
	}
	return pol
}

// maxCost is the most seats one call may take: the rate band's burst when
// it is a bucket (a cost above it is refused as bad input), else 2.
func (d SeatsDraw) maxCost() int {
	if d.Rate == "bucket" && d.Burst < 2 {
		return max(d.Burst, 1)
	}
	return 2
}

// ratePolicy is the policy without its in-flight band: what the provider's
// rate check and the window judge see.
func (d SeatsDraw) ratePolicy() reserve.Policy { return d.Policy()[1:] }

func (d SeatsDraw) String() string {
	switch d.Rate {
	case "bucket":
		return fmt.Sprintf("N=%d beside a bucket %g/s burst %d", d.N, d.PerSec, d.Burst)
	case "window":
		return fmt.Sprintf("N=%d beside a window %g per %v", d.N, d.Window, d.Length)
	}
	return fmt.Sprintf("N=%d alone", d.N)
}

// drawSeats draws seed's KeySeats policy, and a kill of a process that
// calls it (a Go slot, when the seed draws Python slots), which sc adds if
// it fits the timeline's rules. Its streams are its own.
func (sc *Scenario) drawSeats() {
	rng := rand.New(rand.NewPCG(sc.Seed, 0x5ea75))
	d := SeatsDraw{N: 3 + rng.IntN(4)}
	switch x := rng.IntN(10); {
	case x < 4:
		d.Rate, d.PerSec, d.Burst = "bucket", float64(3+rng.IntN(8)), 1+rng.IntN(3)
	case x < 7:
		d.Rate, d.Length = "window", time.Duration(1+rng.IntN(2))*time.Second
		d.Window = float64(int(d.Length.Seconds()) * (3 + rng.IntN(8)))
	}
	sc.Seats = d
	// A holder killed mid-call, and started again 1-3 s later: the seats
	// it held must come back to the waiters (the fleet forgets it), and
	// the provider ends its open calls when its connections close.
	krng := rand.New(rand.NewPCG(sc.Seed, 0x5ea76))
	if krng.Float64() < 0.6 {
		var slots []int
		for s := range sc.Procs {
			if !sc.isPython(s) {
				slots = append(slots, s)
			}
		}
		last := sc.Length - settle
		for range 6 {
			d := between2(krng, time.Second, 3*time.Second)
			e := Event{At: between2(krng, warmup, last-d), Kind: FaultKill, For: d, Child: slots[krng.IntN(len(slots))]}
			if sc.addFitting(e) {
				break
			}
		}
	}
	// A holder stopped with SIGSTOP for 1.5-3.5 s, past the fleet's
	// silence window (two heartbeats): its connections stay open, so the
	// fleet holds it and its seats (the provider keeps its calls open
	// too), and it comes back to end its calls.
	//
	// Only in a seed with two Go slots or more: the one Go process of a
	// seed stopped, nothing calls the keys only Go processes call (the
	// pacehttp ones), which the liveness and throughput judges do not
	// excuse (seed 1, its one Go process stopped 2.5 s while it paced
	// locally: no call on them for 4 s).
	srng := rand.New(rand.NewPCG(sc.Seed, 0x5ea77))
	var goSlots []int
	for s := range sc.Procs {
		if !sc.isPython(s) {
			goSlots = append(goSlots, s)
		}
	}
	if srng.Float64() < 0.5 && len(goSlots) >= 2 {
		slots := goSlots
		last := sc.Length - settle
		for range 6 {
			d := between2(srng, 1500*time.Millisecond, 3500*time.Millisecond)
			e := Event{At: between2(srng, warmup, last-d), Kind: FaultStall, For: d, Child: slots[srng.IntN(len(slots))]}
			if sc.addFitting(e) {
				break
			}
		}
	}
}

// The seat callers' demand and draws.
const (
	seatGoroutines = 3
	// The Go processes' seat callers are at least seatDemand times N.
	seatDemand = 3
	// A call takes 2 seats one time in seatTwoOdds.
	seatTwoOdds = 8
	// A TryReserveN waits at most up to seatMaxTry.
	seatMaxTry = 800 * time.Millisecond
)

// The kinds of KeySeats's calls.
const (
	kindSeatAcquire = "acquire"  // Acquire, the provider, Done
	kindSeatReserve = "reserves" // ReserveN, Sleep, the provider, Settle (Done deferred)
	kindSeatTry     = "trys"     // TryReserveN with a maximum wait, Sleep, the provider, Done
	kindSeatCancel  = "cancels"  // ReserveN, then Sleep's ctx cancelled before the slot, or Cancel
)

var seatMix = []struct {
	kind   string
	weight int
}{{kindSeatAcquire, 50}, {kindSeatReserve, 20}, {kindSeatTry, 20}, {kindSeatCancel, 10}}

// seatHold draws how long a call holds the provider: mostly 10-300 ms,
// often up to 3 s, now and then up to 10 s, rarely up to 30 s (cut by the
// run's end), log-uniform within each range.
func seatHold(rng *rand.Rand) time.Duration {
	logUniform := func(a, b time.Duration) time.Duration {
		return time.Duration(math.Exp(math.Log(float64(a)) + rng.Float64()*(math.Log(float64(b))-math.Log(float64(a)))))
	}
	switch x := rng.Float64(); {
	case x < 0.6:
		return logUniform(10*time.Millisecond, 300*time.Millisecond)
	case x < 0.94:
		return logUniform(300*time.Millisecond, 3*time.Second)
	case x < 0.985:
		return logUniform(3*time.Second, 10*time.Second)
	default:
		return logUniform(10*time.Second, 30*time.Second)
	}
}

// seatCallers starts KeySeats's goroutines of this process on goFn. Their
// streams (5000 and up) are their own.
func (c *child) seatCallers(ctx context.Context, goFn func(func())) {
	if c.spec.Seats.N == 0 {
		return
	}
	for g := range max(c.spec.SeatCallers, 1) {
		goFn(func() { c.seatLoop(ctx, 5000+g) })
	}
}

func (c *child) seatLoop(ctx context.Context, g int) {
	cl := &caller{c: c, key: keyDef{name: KeySeats, pol: c.spec.Seats.Policy()}, rng: c.rng(g)}
	total := 0
	for _, m := range seatMix {
		total += m.weight
	}
	for ctx.Err() == nil {
		x, kind := cl.rng.IntN(total), seatMix[0].kind
		for _, m := range seatMix {
			if x < m.weight {
				kind = m.kind
				break
			}
			x -= m.weight
		}
		c.seatOne(ctx, cl, kind)
	}
}

// seatOne makes one call on KeySeats.
func (c *child) seatOne(ctx context.Context, cl *caller, kind string) {
	seats := 1
	if cl.rng.IntN(seatTwoOdds) == 0 {
		seats = 2
	}
	// No more than the rate band's burst: a cost above it is bad input,
	// refused with ErrExceedsBurst (seeds 56 and 60 drew a bucket of
	// burst 1 beside calls of 2 seats, and their verdicts counted the
	// refusals as errors). The draw stays, so that the stream is as before.
	seats = min(seats, c.spec.Seats.maxCost())
	hold := seatHold(cl.rng)
	call := Call{ID: fmt.Sprintf("%s-%d", c.spec.ID, c.seq.Add(1)), Key: KeySeats, Child: c.spec.ID, Kind: kind,
		Cost: map[string]float64{unitRequests: float64(seats)}, Hold: int64(hold)}
	req := reserve.Request{Key: KeySeats, Policy: cl.key.pol, Cost: reserve.Cost{unitRequests: float64(seats)}}
	c.count(kind)
	call.Grant = time.Now().UnixNano()
	var (
		r   *reserve.Reservation
		err error
	)
	switch kind {
	case kindSeatAcquire:
		r, err = c.l.Acquire(ctx, req)
		if c.failed(ctx, kind, KeySeats, err) {
			return
		}
		defer r.Done()
		c.checkBand(kind, cl.key, r.Band(), false)
		c.seatSend(ctx, call, r)
		return
	case kindSeatTry:
		r, err = c.l.TryReserveN(ctx, req, time.Duration(cl.rng.Int64N(int64(seatMaxTry)+1)))
		// Refused for its maximum wait: counted, never an error (also
		// when the run's end or a close ended ctx meanwhile).
		if tl, ok := errors.AsType[*reserve.WaitTooLongError](err); ok {
			c.count(kind + "-refused")
			c.count("refused-band:" + tl.Band)
			sleepCtx(ctx, time.Duration(5+cl.rng.IntN(40))*time.Millisecond)
			return
		}
	default:
		r, err = c.l.ReserveN(ctx, req)
	}
	if c.failed(ctx, kind, KeySeats, err) {
		return
	}
	defer r.Done()
	c.checkBand(kind, cl.key, r.Band(), false)
	if kind == kindSeatCancel {
		// Given back before the slot: Sleep's context cancelled some time
		// after the grant, or (a slot that is now) Cancel after a moment.
		if d := r.Delay(); d > time.Millisecond {
			sctx, cancel := context.WithTimeout(ctx, time.Duration(cl.rng.Float64()*0.8*float64(d)))
			err := r.Sleep(sctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				c.count("cancels-ctx")
				return
			}
			if c.failed(ctx, kind, KeySeats, err) {
				return
			}
			// Its slot came first: the call is made.
		} else {
			sleepCtx(ctx, time.Duration(cl.rng.IntN(20))*time.Millisecond)
			cl.cancel(r)
			return
		}
	} else if c.failed(ctx, kind, KeySeats, r.Sleep(ctx)) {
		return
	}
	c.seatSend(ctx, call, r)
	if kind == kindSeatReserve {
		if err := r.Settle(c.after, reserve.Cost{unitRequests: float64(seats)}); err != nil && !ended(c.after) {
			c.errNote("settle", KeySeats, err)
		}
	}
}

// seatSend makes r's call to the provider, which holds it call.Hold (or
// until ctx, the run's end, closes its connection).
func (c *child) seatSend(ctx context.Context, call Call, r *reserve.Reservation) {
	fire := time.Now()
	call.Seq = seqOf(r)
	call.Slot, call.Exact = granted.Slot(r)
	call.Ran, call.Share = granted.Booked(r)
	call.Lo, call.Hi = call.Slot, call.Slot
	// Local: the slot, or for a policy of the in-flight band alone the
	// seats, granted by the local fallback.
	call.Placed, call.First, call.Fire = r.Time().UnixNano(), r.Time().UnixNano(), fire.UnixNano()
	call.Local = r.Local() || r.Source() == reserve.SourceLocal
	body, _ := json.Marshal(call)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.spec.Provider+"/call", bytes.NewReader(body))
	if err != nil {
		c.errNote("provider", call.Key, err)
		return
	}
	resp, err := c.seatHTTP.Do(req)
	if err != nil {
		if ended(ctx) {
			c.count(call.Kind + "-cut") // the run's end closed it
		} else {
			c.errNote("provider", call.Key, err)
		}
		return
	}
	defer resp.Body.Close()
	var rep Reply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		if ended(ctx) {
			c.count(call.Kind + "-cut")
		} else {
			c.errNote("provider", call.Key, fmt.Errorf("%s: %w", resp.Status, err))
		}
		return
	}
	if rep.Status == http.StatusTooManyRequests {
		c.count("429-" + rep.Why)
	}
}

// seatMetrics is a fleet process's Options.Metrics: it counts the seats its
// Limiter holds and the calls waiting for seats, per key (SeatMetrics),
// which must both be 0 once its calls have returned (the verdict checks),
// and how its seats were taken.
type seatMetrics struct {
	mu      sync.Mutex
	held    map[string]int
	waiters map[string]int
	counts  map[string]int64
	waits   []time.Duration // the waits of seats handed off
}

func newSeatMetrics() *seatMetrics {
	return &seatMetrics{held: map[string]int{}, waiters: map[string]int{}, counts: map[string]int64{}}
}

func (m *seatMetrics) Reserved(string, []string, []float64, time.Duration, bool) {}
func (m *seatMetrics) Moved(string, string)                                      {}
func (m *seatMetrics) RedisCall(string, time.Duration, error)                    {}
func (m *seatMetrics) Fallback(bool)                                             {}
func (m *seatMetrics) Paused(string, time.Duration)                              {}
func (m *seatMetrics) Evictable(string)                                          {}

func (m *seatMetrics) SeatsTaken(key, band string, seats int, waited time.Duration, handedOff, local bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case handedOff:
		m.counts["seats-handed"]++
		m.waits = append(m.waits, waited)
	default:
		m.counts["seats-free"]++
	}
	if local {
		m.counts["seats-local"]++
	}
}

func (m *seatMetrics) SeatsHeld(key, band string, delta int) {
	m.mu.Lock()
	m.held[key] += delta
	m.mu.Unlock()
}

func (m *seatMetrics) SeatWaiters(key, band string, delta int) {
	m.mu.Lock()
	m.waiters[key] += delta
	m.mu.Unlock()
}

// final adds the end's figures to counts: seats still held and calls
// still waiting (per key, when not 0), and how seats were taken.
func (m *seatMetrics) final(counts map[string]int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k, n := range m.counts {
		counts[k] += n
	}
	for k, n := range m.held {
		if n != 0 {
			counts[countSeatsHeld+k] = int64(n)
		}
	}
	for k, n := range m.waiters {
		if n != 0 {
			counts[countSeatWaiters+k] = int64(n)
		}
	}
}

// The done note's counts of seats left at the end (by key): a leak.
const (
	countSeatsHeld   = "end-seats-held:"
	countSeatWaiters = "end-seat-waiters:"
)

// limiterID returns l's id in the fleet (its seat tickets start with it),
// read from the unexported field, for the verdict to tell whose tickets
// Redis holds.
func limiterID(l *reserve.Limiter) string {
	f := reflect.ValueOf(l).Elem().FieldByName("id")
	if !f.IsValid() || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}
