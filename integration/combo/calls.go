package combo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/granted"
	"github.com/pacer-go/pacer/reserve"
)

// The calls a goroutine draws, and their weights per key.
var callMix = map[string][]struct {
	kind   string
	weight int
}{
	KeySliding:  {{"wait", 20}, {"reserve", 35}, {"try", 25}, {"allow", 10}, {"cancel", 10}},
	KeyPolicy:   {{"waitp", 15}, {"reservep", 40}, {"tryp", 25}, {"allowp", 10}, {"cancelp", 10}},
	KeyHot:      {{"reserve", 70}, {"wait", 10}, {"try", 10}, {"allow", 10}},
	KeyHTTP:     {{kindHTTP, 100}},
	KeyAdaptive: {{kindAdaptive, 100}},
}

// kindHTTP is a call through pacehttp's Transport, kindAdaptive one through
// the Transport that learns its rate (Options.Adaptive); fireHeader
// carries the time it was sent (its slot lies between the call and then).
const (
	kindHTTP     = "http"
	kindAdaptive = "adaptive"
	fireHeader   = "X-Combo-Fire"
	// idHeader carries the call's ID, slotHeader the slot pacehttp sent
	// it on (see sending).
	idHeader   = "X-Combo-ID"
	slotHeader = "X-Combo-Slot"
)

// One adaptive call in adaptiveDeadlineOdds carries a context deadline
// drawn from [adaptiveMinDeadline, adaptiveMaxDeadline]: pacehttp refuses
// it at once (a *reserve.WaitTooLongError) when its slot cannot come
// before it.
const (
	adaptiveDeadlineOdds = 3
	adaptiveMinDeadline  = 100 * time.Millisecond
	adaptiveMaxDeadline  = 3 * time.Second
)

// caller is one goroutine calling one key.
type caller struct {
	c   *child
	key keyDef
	rng *rand.Rand
	// pacedPause: the last 429 paused the key through pacehttp alone (the
	// google body variant), noted; the caller makes no pause of its own.
	pacedPause bool
}

func (c *child) caller(key string, g int) *caller {
	return &caller{c: c, key: keyDefs[key], rng: c.rng(g)}
}

// loop makes calls until ctx ends.
func (cl *caller) loop(ctx context.Context) {
	for ctx.Err() == nil {
		cl.one(ctx, cl.draw())
	}
}

func (cl *caller) draw() string {
	mix := callMix[cl.key.name]
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	x := cl.rng.IntN(total)
	for _, m := range mix {
		if x < m.weight {
			return m.kind
		}
		x -= m.weight
	}
	return mix[0].kind
}

// one makes one call of kind, and tries it again with a fresh reservation
// after each 429 (the key paused first), up to maxAttempts.
func (cl *caller) one(ctx context.Context, kind string) {
	est := float64(minTokens + cl.rng.IntN(maxTokens-minTokens+1))
	for attempt := range maxAttempts {
		if ctx.Err() != nil {
			return
		}
		retry := cl.attempt(ctx, kind, attempt, est)
		if retry <= 0 {
			return
		}
		cl.c.count("429")
		if cl.pacedPause {
			cl.pacedPause = false
			continue
		}
		cl.pause(ctx, retry)
	}
}

// attempt makes one attempt and returns the provider's Retry-After if it
// answered 429, else 0.
func (cl *caller) attempt(ctx context.Context, kind string, attempt int, est float64) time.Duration {
	c, key := cl.c, cl.key
	call := Call{ID: fmt.Sprintf("%s-%d", c.spec.ID, c.seq.Add(1)), Key: key.name, Child: c.spec.ID, Kind: kind, Attempt: attempt}
	switch {
	case key.single:
		call.Cost = map[string]float64{reserve.PermitsUnit: 1}
	case key.fleet != nil:
		call.Cost = map[string]float64{unitRequests: 1}
	default:
		call.Cost = map[string]float64{unitRequests: 1, unitTokens: est}
	}
	if kind == kindHTTP {
		c.count(kind)
		call.Grant = time.Now().UnixNano()
		return cl.sendHTTP(ctx, call)
	}
	if kind == kindAdaptive {
		c.count(kind)
		call.Grant = time.Now().UnixNano()
		return cl.sendAdaptive(ctx, call)
	}
	req := cl.request(&call)
	short := key.single && req.Tenant == "" && req.Lane == reserve.Normal // the short forms
	c.count(kind)
	if req.Tenant != "" {
		c.count(kind + "-fair")
	}
	call.Grant = time.Now().UnixNano()
	var (
		r   *reserve.Reservation
		err error
	)
	switch kind {
	case "wait", "waitp":
		if short {
			err = c.l.Wait(ctx, key.name, key.limit)
		} else {
			err = c.l.WaitN(ctx, req)
		}
		if c.failed(ctx, kind, key.name, err) {
			return 0
		}
		fire := time.Now()
		// A Wait tells no slot: it lies between the call and MaxEarly
		// after its return.
		call.Lo, call.Hi, call.Fire = call.Grant, fire.Add(reserve.MaxEarly).UnixNano(), fire.UnixNano()
		return cl.send(ctx, call, nil)
	case "allow", "allowp":
		var ok bool
		if short {
			ok, err = c.l.Allow(ctx, key.name, key.limit)
		} else {
			ok, err = c.l.AllowN(ctx, req)
		}
		if c.failed(ctx, kind, key.name, err) {
			return 0
		}
		if !ok {
			c.count(kind + "-refused")
			sleepCtx(ctx, time.Duration(5+cl.rng.IntN(40))*time.Millisecond)
			return 0
		}
		// An Allow tells no slot either: it was free when the script ran,
		// between the call and MaxEarly after its return. Its cost is
		// not settled (there is no Reservation to settle).
		fire := time.Now()
		call.Lo, call.Hi, call.Fire = call.Grant, fire.Add(reserve.MaxEarly).UnixNano(), fire.UnixNano()
		return cl.send(ctx, call, nil)
	case "reserve", "cancel", "reservep", "cancelp":
		if short {
			r, err = c.l.Reserve(ctx, key.name, key.limit)
		} else {
			r, err = c.l.ReserveN(ctx, req)
		}
	case "try", "tryp":
		maxWait := time.Duration(cl.rng.IntN(600)) * time.Millisecond
		r, err = c.l.TryReserveN(ctx, req, maxWait)
		if tl, ok := errors.AsType[*reserve.WaitTooLongError](err); ok {
			c.checkBand(kind, key, tl.Band, true)
			c.count(kind + "-refused")
			sleepCtx(ctx, time.Duration(5+cl.rng.IntN(40))*time.Millisecond)
			return 0
		}
	}
	if c.failed(ctx, kind, key.name, err) {
		return 0
	}
	c.checkBand(kind, key, r.Band(), false)
	if kind == "cancel" || kind == "cancelp" {
		// Give it back before the slot, some time after the grant.
		sleepCtx(ctx, time.Duration(cl.rng.Float64()*0.8*float64(r.Delay())))
		cl.cancel(r)
		return 0
	}
	call.First = r.Time().UnixNano()
	err = r.Sleep(ctx)
	if c.failed(ctx, kind, key.name, err) {
		return 0
	}
	fire := time.Now()
	call.Seq = seqOf(r)
	call.Slot, call.Exact = granted.Slot(r)
	call.Ran, call.Share = granted.Booked(r)
	call.Lo, call.Hi = call.Slot, call.Slot
	call.Placed, call.Fire, call.Local = r.Time().UnixNano(), fire.UnixNano(), r.Local()
	call.Settle = !key.single
	return cl.send(ctx, call, r)
}

// checkBand checks the binding band a grant (or, refused, a refusal) of
// key names (issue 27): one of the key's bands (the fleet's code's, or the
// true limit's, whose names the stored limits use), the pause, or for a
// grant none; a refusal always names what made its wait (a fair request's
// turn, an outage that left the process no share). Each band named
// is counted ("band:<name>").
func (c *child) checkBand(kind string, key keyDef, band string, refused bool) {
	ok := band == reserve.PauseBinding || ((band == reserve.TurnBinding || band == reserve.OutageBinding) && refused) || (band == "" && !refused)
	for _, pol := range []reserve.Policy{key.pol, key.fleetPol()} {
		for _, b := range pol {
			ok = ok || band == b.Name
		}
	}
	if !ok {
		c.errNote(kind, key.name, fmt.Errorf("binding band %q (refused %v) is none of the key's bands %s, the pause or none", band, refused, key.pol))
		return
	}
	if band == "" {
		band = "none"
	}
	c.count("band:" + band)
}

// The tenants of fair calls, and their weights.
var fairTenants = []struct {
	name   string
	weight float64
}{{"t0", 1}, {"t1", 1}, {"t2", 2}}

// request returns call's Request. On the sliding and policy keys, three
// calls in ten are fair: a tenant and a lane (Urgent 1 in 10, Batch 2 in
// 10) drawn, recorded in call.
func (cl *caller) request(call *Call) reserve.Request {
	key := cl.key
	req := reserve.Request{Key: key.name, Policy: key.pol, Cost: reserve.Cost(call.Cost)}
	if key.throughput && cl.rng.IntN(10) < 3 {
		tn := fairTenants[cl.rng.IntN(len(fairTenants))]
		req.Tenant, req.Weight = tn.name, tn.weight
		switch x := cl.rng.IntN(10); {
		case x == 0:
			req.Lane = reserve.Urgent
		case x < 3:
			req.Lane = reserve.Batch
		}
		call.Tenant, call.Lane = req.Tenant, int(req.Lane)
	}
	return req
}

// send makes the call to the provider; r, if a policy reservation, is then
// settled to the tokens the provider reports.
func (cl *caller) send(ctx context.Context, call Call, r *reserve.Reservation) time.Duration {
	c := cl.c
	body, _ := json.Marshal(call)
	req, err := http.NewRequestWithContext(c.after, http.MethodPost, c.spec.Provider+"/call", bytes.NewReader(body))
	if err != nil {
		c.errNote("provider", call.Key, err)
		return 0
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// A close command (or the run's end) cancels c.after: the call
		// was cut by it, not failed (the combination runner's seed 87).
		if !ended(c.after) {
			c.errNote("provider", call.Key, err)
		}
		return 0
	}
	rep, ok := c.reply(resp, call.Key)
	if !ok {
		return 0
	}
	if rep.Status == http.StatusTooManyRequests {
		return max(time.Duration(rep.Retry), time.Millisecond)
	}
	if r != nil && call.Settle {
		c.bg.Go(func() { cl.settle(call.ID, r, rep.Actual) })
	}
	return 0
}

// sendHTTP makes the call through the child's pacehttp Transport, which
// reserves its slot, keeps the provider's count and pauses the key on a
// 429 (it retries nothing: one does, as for the other keys).
func (cl *caller) sendHTTP(ctx context.Context, call Call) time.Duration {
	c := cl.c
	call.Lo = call.Grant
	body, _ := json.Marshal(call)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.spec.Provider+"/call", bytes.NewReader(body))
	if err != nil {
		c.errNote("provider", call.Key, err)
		return 0
	}
	req.Header.Set(idHeader, call.ID)
	resp, err := c.paced.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && strings.HasPrefix(ue.Err.Error(), "pacehttp:") {
			if _, ok := errors.AsType[*reserve.WaitTooLongError](ue.Err); ok {
				// Near the end: a slot, or the count's next call, after
				// the deadline. As a refused TryReserveN, try later.
				c.count(call.Kind + "-refused")
				sleepCtx(ctx, time.Duration(5+cl.rng.IntN(40))*time.Millisecond)
			}
			c.failed(ctx, call.Kind, call.Key, ue.Err)
			return 0
		}
		if !ended(ctx) {
			c.errNote("provider", call.Key, err)
		}
		return 0
	}
	rep, ok := c.httpReply(resp, call.Key)
	if ok && rep.Status == http.StatusTooManyRequests {
		if c.spec.Body == bodyGoogle {
			// The wait was in the body alone, and only pacehttp paused
			// the key for it: noted as a pause from the provider's
			// arrival (pacehttp's starts after it) for the provider's
			// wait (pacehttp's is RetryInfo's, rounded up to the ms),
			// so the pause judge holds the Transport to it.
			c.note(Note{Type: notePause, Key: call.Key, At: rep.Arrive, End: time.Now().UnixNano(), D: rep.Retry, Op: "pacehttp"})
			cl.pacedPause = true
		}
		return max(time.Duration(rep.Retry), time.Millisecond)
	}
	return 0
}

// sendAdaptive makes the call through the child's adaptive Transport,
// which learns the key's rate, holds the call in its process's gate until
// its slot is near, pauses the key and cuts the rate on a 429 (it retries
// nothing: one does, as for the other keys). One call in
// adaptiveDeadlineOdds carries a deadline of its own. A call pacehttp
// fails before sending it is noted (noteUnsent): the verdict checks that
// the provider never saw it. A refusal for its deadline (a
// *reserve.WaitTooLongError, or the deadline passing while it waited) is
// counted, not an error.
func (cl *caller) sendAdaptive(ctx context.Context, call Call) time.Duration {
	c := cl.c
	call.Lo = call.Grant
	callCtx := ctx
	if cl.rng.IntN(adaptiveDeadlineOdds) == 0 {
		d := adaptiveMinDeadline + time.Duration(cl.rng.Int64N(int64(adaptiveMaxDeadline-adaptiveMinDeadline)+1))
		call.Within = int64(d)
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	body, _ := json.Marshal(call)
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, c.spec.Provider+"/call", bytes.NewReader(body))
	if err != nil {
		c.errNote("provider", call.Key, err)
		return 0
	}
	req.Header.Set(idHeader, call.ID)
	resp, err := c.adaptive.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && strings.HasPrefix(ue.Err.Error(), "pacehttp:") {
			// Failed before it was sent (RoundTrip wraps only the
			// errors of reserving so).
			why := "err"
			tl, tooLong := errors.AsType[*reserve.WaitTooLongError](ue.Err)
			switch {
			case tooLong && tl.Deadline:
				why = "too-long"
			case errors.Is(ue.Err, context.DeadlineExceeded) && ended(callCtx):
				why = "deadline"
			case errors.Is(ue.Err, reserve.ErrUnavailable) && documentedUnavailable(ue.Err) && call.Within > 0:
				// With a deadline of its own it asked for errors; without
				// one, failed notes it (an outage is not its error).
				why = "unavailable"
			}
			c.note(Note{Type: noteUnsent, Key: call.Key, ID: call.ID, At: time.Now().UnixNano(), Op: why})
			switch {
			case why == "err":
				c.failed(ctx, call.Kind, call.Key, ue.Err)
			case why == "unavailable":
				c.count("unavailable")
				sleepCtx(ctx, 50*time.Millisecond)
			case why == "too-long" && call.Within == 0:
				// Refused for the run's end: its slot comes after it.
				c.count(call.Kind + "-" + why)
				sleepCtx(ctx, tl.Wait)
			default:
				c.count(call.Kind + "-" + why)
				sleepCtx(ctx, time.Duration(5+cl.rng.IntN(40))*time.Millisecond)
			}
			return 0
		}
		if ended(callCtx) {
			// Its deadline passed on the way: the provider may have seen
			// it, and its answer is lost.
			c.count(call.Kind + "-lost")
			return 0
		}
		c.errNote("provider", call.Key, err)
		return 0
	}
	defer resp.Body.Close()
	var rep Reply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		if ended(callCtx) {
			c.count(call.Kind + "-lost")
		} else {
			c.errNote("provider", call.Key, fmt.Errorf("%s: %w", resp.Status, err))
		}
		return 0
	}
	if rep.Status == http.StatusTooManyRequests {
		return max(time.Duration(rep.Retry), time.Millisecond)
	}
	return 0
}

// reply reads the provider's Reply from resp and closes its body; an
// unreadable one is noted as an error.
func (c *child) reply(resp *http.Response, key string) (Reply, bool) {
	defer resp.Body.Close()
	var rep Reply
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		c.errNote("provider", key, fmt.Errorf("%s: %w", resp.Status, err))
		return Reply{}, false
	}
	return rep, true
}

// httpReply reads the provider's Reply to a call on KeyHTTP: from
// replyHeader when its body is a provider's refusal (body.go), else as
// reply does; it closes the body.
func (c *child) httpReply(resp *http.Response, key string) (Reply, bool) {
	h := resp.Header.Get(replyHeader)
	if h == "" {
		return c.reply(resp, key)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var rep Reply
	if err := json.Unmarshal([]byte(h), &rep); err != nil {
		c.errNote("provider", key, fmt.Errorf("%s: %s: %w", resp.Status, replyHeader, err))
		return Reply{}, false
	}
	return rep, true
}

// stampFire sends each request through base with the time it is sent in
// fireHeader, and the slot pacehttp sent it on in slotHeader (on a clone: a
// RoundTripper must not change its request).
type stampFire struct {
	base  http.RoundTripper
	slots *sync.Map // call ID -> its slot's slotHeader, from sending
}

func (s stampFire) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	if v, ok := s.slots.LoadAndDelete(req.Header.Get(idHeader)); ok {
		r.Header.Set(slotHeader, v.(string))
	}
	r.Header.Set(fireHeader, strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.base.RoundTrip(r)
}

// sending is the child's hook.Sending: pacehttp is about to send req on
// r's slot, which stampFire then sends in slotHeader ("slot exact placed
// local seq", as a reservation's call records them), so that the verdict
// judges the calls through pacehttp on their slots, not on the span from
// the call to its send.
func sending(slots *sync.Map) func(req *http.Request, r any) {
	return func(req *http.Request, r any) {
		res, ok := r.(*reserve.Reservation)
		id := req.Header.Get(idHeader)
		if !ok || id == "" {
			return
		}
		slot, exact := granted.Slot(res)
		slots.Store(id, fmt.Sprintf("%d %t %d %t %d", slot, exact, res.Time().UnixNano(), res.Local(), seqOf(res)))
	}
}

// readSlot fills c's slot from a request's slotHeader, if it has one.
func readSlot(c *Call, h string) bool {
	if h == "" {
		return false
	}
	var d Call
	if n, err := fmt.Sscanf(h, "%d %t %d %t %d", &d.Slot, &d.Exact, &d.Placed, &d.Local, &d.Seq); err != nil || n != 5 || d.Slot == 0 {
		return false
	}
	c.Slot, c.Exact, c.Placed, c.Local, c.Seq = d.Slot, d.Exact, d.Placed, d.Local, d.Seq
	c.First, c.Lo, c.Hi = d.Placed, d.Slot, d.Slot
	return true
}

// settle settles r to actual tokens. A settle that cannot reach Redis may
// be made again (Reservation.Settle's doc): it is, until it works or the
// run is over.
func (cl *caller) settle(id string, r *reserve.Reservation, actual float64) {
	c := cl.c
	start := time.Now().UnixNano()
	for {
		err := r.Settle(c.after, reserve.Cost{unitTokens: actual})
		switch {
		case err == nil:
			c.note(Note{Type: noteSettle, Key: cl.key.name, ID: id, At: start, End: time.Now().UnixNano()})
			return
		case errors.Is(err, reserve.ErrUnavailable) && !ended(c.after):
			c.count("settle-retry")
			sleepCtx(c.after, 100*time.Millisecond)
		case ended(c.after):
			c.count("unsettled")
			return
		default:
			c.errNote("settle", cl.key.name, err)
			return
		}
	}
}

// cancel cancels r, again while Redis cannot be reached (Cancel's doc).
func (cl *caller) cancel(r *reserve.Reservation) {
	c := cl.c
	for {
		err := r.Cancel(c.after)
		switch {
		case err == nil:
			c.count("canceled")
			return
		case errors.Is(err, reserve.ErrUnavailable) && !ended(c.after):
			c.count("cancel-retry")
			sleepCtx(c.after, 100*time.Millisecond)
		case ended(c.after):
			return
		default:
			c.errNote("cancel", cl.key.name, err)
			return
		}
	}
}

// pause tells the limiter the provider's 429: no slot on the key for d.
func (cl *caller) pause(ctx context.Context, d time.Duration) {
	c, key := cl.c, cl.key
	if ctx.Err() != nil {
		return
	}
	start := time.Now()
	var err error
	if key.single {
		err = c.l.Pause(c.after, key.name, d)
	} else {
		err = c.l.Pause(c.after, key.name, d)
	}
	n := Note{Type: notePause, Key: key.name, At: start.UnixNano(), End: time.Now().UnixNano(), D: int64(d)}
	if err != nil {
		n.Err = err.Error()
		// (A process with no local share refuses the pause as it refuses
		// its calls: it sends none until Redis answers.)
		if !ended(c.after) && !(errors.Is(err, reserve.ErrUnavailable) && documentedUnavailable(err)) {
			c.errNote("pause", key.name, err)
		}
	}
	c.note(n)
}

// failed reports whether err ends the call, and notes err unless the run's
// end explains it: its context ended, or a slot would have come after it.
func (c *child) failed(ctx context.Context, kind, key string, err error) bool {
	if err == nil {
		return false
	}
	tl, tooLong := errors.AsType[*reserve.WaitTooLongError](err)
	ctxErr := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	if errors.Is(err, reserve.ErrUnavailable) && documentedUnavailable(err) {
		// The refusals reserve documents for local pacing: a process that
		// has never reached Redis (it does not know its share), one that
		// joined after members that pace locally without it, or a cost
		// above its share of a window band while others pace locally.
		// Counted for a caller that asked for errors (a maximum wait, a
		// deadline of its own); for one who can wait, noted: an outage is
		// never an error to it (DESIGN.md, "Redis down"), and the verdict
		// says so (outage.go).
		c.count("unavailable")
		if canWait(kind) {
			c.note(Note{Type: noteUnavail, Key: key, Op: kind, At: time.Now().UnixNano(), Err: strings.ReplaceAll(err.Error(), "\n", " ")})
		}
		sleepCtx(ctx, 50*time.Millisecond)
		return true
	}
	if tooLong && !nearEnd(ctx) && !ended(ctx) {
		// Refused for the run's end, seconds away: a wait that long is
		// right only while the key is paused (the runner's long pauses),
		// which the verdict knows and this process may not (waits.go).
		c.count(kind + "-too-long")
		c.note(Note{Type: noteTooLong, Key: key, Op: kind, At: time.Now().UnixNano(), D: int64(tl.Wait),
			Err: strings.ReplaceAll(err.Error(), "\n", " ")})
		sleepCtx(ctx, 10*time.Millisecond)
		return true
	}
	switch {
	case tooLong && nearEnd(ctx):
		// Refused for the run's end, seconds away, with the key's queue
		// that long. Asked again at once, the crowd tenants' callers (12 a
		// process) made up to 6,400 calls in one process in a run's last
		// seconds (seed 6), each refused the same way: CPU the machine's
		// other work needed. Again a little later.
		c.count(kind + "-near-end")
		sleepCtx(ctx, 100*time.Millisecond)
	case !(ctxErr && ended(ctx)):
		c.errNote(kind, key, err)
		sleepCtx(ctx, 10*time.Millisecond)
	default:
		// The run's end: counted, and a millisecond's pause, so that a
		// loop that finds its deadline passed before its context's timer
		// has fired does not spin. (The Cluster's seed 45 once counted 3.1
		// million crowd calls in each of two processes, none of which
		// reached the provider, and the machine stalled for 5.5 s; which
		// way they went round was not recorded.)
		c.count(kind + "-ended")
		time.Sleep(time.Millisecond)
	}
	return true
}

// canWait reports whether a call of kind can wait: it has no maximum wait
// and no deadline of its own (only the run's end, seconds away), so an
// outage must not fail it. TryReserveN and Allow ask for a maximum wait,
// and a third of the adaptive calls and half the light fair ones carry a
// deadline (their refusals go elsewhere: sendAdaptive, fairRefused).
func canWait(kind string) bool {
	switch kind {
	case "wait", "waitp", "reserve", "reservep", "cancel", "cancelp", kindHTTP, kindAdaptive, kindFairReserve, kindFairWait,
		kindSeatAcquire, kindSeatReserve, kindSeatCancel:
		return true
	}
	return false
}

// documentedUnavailable reports whether err is one of the refusals
// reserve documents for local pacing (see Options.FleetSize).
func documentedUnavailable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "Redis has never answered this Limiter") || strings.Contains(s, "share of a window band is below the cost") ||
		strings.Contains(s, "joined the fleet")
}

// ended reports whether ctx has ended, or its deadline has passed (its
// timer may not have fired yet when a call finds the deadline passed).
func ended(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(d)
}

// nearEnd reports whether ctx's deadline is close enough that a slot after
// it is what a queue of a few seconds gives.
func nearEnd(ctx context.Context) bool {
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < 5*time.Second
}

// seqOf returns r's number on its key (0 for a local one), read from the
// unexported field, for the dump: two slots at one instant with numbers
// from one state cannot be, and tell a bug of the state from one of the
// shares.
func seqOf(r *reserve.Reservation) int64 {
	f := reflect.ValueOf(r).Elem().FieldByName("seq")
	if !f.IsValid() || f.Kind() != reflect.Int64 {
		return 0
	}
	return f.Int()
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// fair reports whether c was a fair request (a tenant or a lane of its
// own): booked only in its turn, within its horizon.
func (c Call) fair() bool { return c.Tenant != "" || c.Lane != int(reserve.Normal) }
