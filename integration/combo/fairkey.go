package combo

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/pacer-go/pacer/internal/granted"
	"github.com/pacer-go/pacer/reserve"
)

// KeyFair's callers: fair requests only, on one tokens bucket (fairLimit).
//
//   - Two heavy tenants of weight 1, fairLow and fairHigh, each with
//     fairHeavyGoroutines goroutines per process calling one call after the
//     other (always backlogged): ReserveN, Sleep, the provider, and a
//     Settle to the tokens the provider reports. The provider draws every
//     call's actual cost from its ID in [fairActualMin, fairActualMax],
//     whoever made it; fairLow estimates fairLowEstimate, under every
//     actual, fairHigh fairHighEstimate, over every actual. The fair rule
//     shares the key by weight on what the calls cost: on actual costs the
//     two get the same tokens (fairness.go judges it).
//   - A light tenant per process ("light-" and the process's ID), one call
//     at a time with fairLightIdle between: a newcomer each time, whose turn
//     comes within two slot intervals behind any backlog (docs/fair.md).
//     Its calls are WaitN, one in two with a deadline of its own (a fair
//     caller may be refused when its turn cannot come by its deadline); its
//     refusals are noted (noteRefused), and its waits are figures.
//
// KeyCrowd's callers: crowdTenants tenants of equal weight ("c0" and on,
// the same in every process), each with a goroutine per process calling
// WaitN one call after the other (always backlogged), on one bucket
// (crowdLimit: 20/s, burst 1). A call of the fair script there reaches 3
// requests (reserve/fair.go, fairReach) and carries 11 queues at most, of
// a process's 12: its pump chooses the queues each call carries, by its
// own reckoning of the turns, which does not see what the other processes
// book for the same tenants. The tenants' calls are judged to stay near
// equal (fairness.go).
//
// The goroutines draw from streams of their own (4000 and up), so the
// other keys' callers draw as before.
const (
	fairLow             = "low"
	fairHigh            = "high"
	fairHeavyGoroutines = 2
	fairLowEstimate     = 40
	fairHighEstimate    = 160
	fairActualMin       = 80
	fairActualMax       = 160
	fairLightEstimate   = 120
	// A light call waits fairLightIdle (drawn) after the one before.
	fairLightIdleMin = 200 * time.Millisecond
	fairLightIdleMax = 600 * time.Millisecond
	// A light call's own deadline, when it has one.
	fairLightMinDeadline = time.Second
	fairLightMaxDeadline = 2 * time.Second
	crowdTenants         = 12
)

// The kinds of KeyFair's calls.
const (
	kindFairReserve  = "reservef" // a heavy tenant's ReserveN, Sleep and Settle
	kindFairWait     = "waitf"    // a light tenant's WaitN
	kindFairDeadline = "waitfd"   // a light tenant's WaitN with a deadline of its own
	kindCrowd        = "waitc"    // a crowd tenant's WaitN, on KeyCrowd
)

// fairActual is the tokens a call on KeyFair used, drawn from its ID (the
// provider's draw, the same on a replay), whatever it estimated.
func fairActual(id string) float64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte("fair/" + id))
	return float64(fairActualMin + int(h.Sum64()%uint64(fairActualMax-fairActualMin+1)))
}

// fairCallers starts KeyFair's goroutines of this process on wg.
func (c *child) fairCallers(ctx context.Context, goFn func(func())) {
	for g := range fairHeavyGoroutines {
		goFn(func() { c.fairHeavy(ctx, fairLow, fairLowEstimate, 4000+g) })
		goFn(func() { c.fairHeavy(ctx, fairHigh, fairHighEstimate, 4100+g) })
	}
	goFn(func() { c.fairLight(ctx, 4200) })
	for i := range crowdTenants {
		goFn(func() { c.crowdCaller(ctx, "c"+strconv.Itoa(i), 4300+i) })
	}
}

// crowdCaller calls KeyCrowd for a crowd tenant, one call after the other.
func (c *child) crowdCaller(ctx context.Context, tenant string, g int) {
	cl := &caller{c: c, key: keyDefs[KeyCrowd], rng: c.rng(g)}
	for ctx.Err() == nil {
		call := Call{ID: fmt.Sprintf("%s-%d", c.spec.ID, c.seq.Add(1)), Key: KeyCrowd, Child: c.spec.ID, Kind: kindCrowd, Tenant: tenant,
			Cost: map[string]float64{reserve.PermitsUnit: 1}}
		c.count(kindCrowd)
		call.Grant = time.Now().UnixNano()
		req := reserve.Single(KeyCrowd, crowdLimit, 1)
		req.Tenant = tenant
		if c.failed(ctx, kindCrowd, KeyCrowd, c.l.WaitN(ctx, req)) {
			continue
		}
		c.count(kindCrowd + "-sent")
		c.sendWaited(ctx, cl, call)
	}
}

// fairHeavy calls KeyFair for tenant, one call after the other.
func (c *child) fairHeavy(ctx context.Context, tenant string, est float64, g int) {
	cl := &caller{c: c, key: keyDefs[KeyFair], rng: c.rng(g)}
	for ctx.Err() == nil {
		call := c.fairCall(kindFairReserve, tenant, est)
		req := fairRequest(tenant, est)
		c.count(kindFairReserve)
		call.Grant = time.Now().UnixNano()
		r, err := c.l.ReserveN(ctx, req)
		if c.failed(ctx, kindFairReserve, KeyFair, err) {
			continue
		}
		c.checkBand(kindFairReserve, cl.key, r.Band(), false)
		call.First = r.Time().UnixNano()
		if c.failed(ctx, kindFairReserve, KeyFair, r.Sleep(ctx)) {
			continue
		}
		fire := time.Now()
		call.Seq = seqOf(r)
		call.Slot, call.Exact = granted.Slot(r)
		call.Ran, call.Share = granted.Booked(r)
		call.Lo, call.Hi = call.Slot, call.Slot
		call.Placed, call.Fire, call.Local = r.Time().UnixNano(), fire.UnixNano(), r.Local()
		call.Settle = true
		if retry := cl.send(ctx, call, r); retry > 0 {
			c.count("429")
			cl.pause(ctx, retry)
		}
	}
}

// fairLight calls KeyFair for this process's light tenant: one call at a
// time, fairLightIdle apart.
func (c *child) fairLight(ctx context.Context, g int) {
	cl := &caller{c: c, key: keyDefs[KeyFair], rng: c.rng(g)}
	tenant := "light-" + c.spec.ID
	for {
		sleepCtx(ctx, fairLightIdleMin+time.Duration(cl.rng.Int64N(int64(fairLightIdleMax-fairLightIdleMin)+1)))
		if ctx.Err() != nil {
			return
		}
		kind, callCtx, within := kindFairWait, ctx, time.Duration(0)
		var cancel context.CancelFunc = func() {}
		if cl.rng.IntN(2) == 0 {
			kind = kindFairDeadline
			within = fairLightMinDeadline + time.Duration(cl.rng.Int64N(int64(fairLightMaxDeadline-fairLightMinDeadline)+1))
			callCtx, cancel = context.WithTimeout(ctx, within)
		}
		call := c.fairCall(kind, tenant, fairLightEstimate)
		call.Within = int64(within)
		c.count(kind)
		call.Grant = time.Now().UnixNano()
		err := c.l.WaitN(callCtx, fairRequest(tenant, fairLightEstimate))
		cancel()
		if err != nil {
			c.fairRefused(ctx, callCtx, call, err)
			continue
		}
		c.sendWaited(ctx, cl, call)
	}
}

// sendWaited sends call, whose WaitN returned just now, to the provider,
// and waits out a 429's retry.
func (c *child) sendWaited(ctx context.Context, cl *caller, call Call) {
	fire := time.Now()
	call.Lo, call.Hi, call.Fire = call.Grant, fire.Add(reserve.MaxEarly).UnixNano(), fire.UnixNano()
	if retry := cl.send(ctx, call, nil); retry > 0 {
		c.count("429")
		cl.pause(ctx, retry)
	}
}

// fairRefused handles a light call's error: with a deadline of its own, a
// refusal for it (noted, for the verdict) or the deadline passing while it
// waited (counted); else what failed makes of it.
func (c *child) fairRefused(ctx, callCtx context.Context, call Call, err error) {
	if call.Within > 0 && !ended(ctx) {
		if d, ok := ctx.Deadline(); ok && time.Unix(0, call.Grant).Add(time.Duration(call.Within)).After(d) {
			// The run ends before its own deadline: what refused it.
			c.count(call.Kind + "-end")
			return
		}
		if tl, ok := errors.AsType[*reserve.WaitTooLongError](err); ok {
			c.count(call.Kind + "-refused")
			c.note(Note{Type: noteRefused, Key: KeyFair, ID: call.ID, At: call.Grant, End: time.Now().UnixNano(), D: call.Within,
				Op: tl.Band, Attrs: map[string]string{"tenant": call.Tenant, "wait_ns": strconv.FormatInt(int64(tl.Wait), 10)}})
			return
		}
		if errors.Is(err, context.DeadlineExceeded) && ended(callCtx) {
			c.count(call.Kind + "-deadline")
			return
		}
		if errors.Is(err, reserve.ErrUnavailable) {
			// A caller with a deadline of its own asked for errors.
			c.count(call.Kind + "-unavailable")
			sleepCtx(ctx, 50*time.Millisecond)
			return
		}
	}
	c.failed(ctx, call.Kind, KeyFair, err)
}

// fairCall returns a new call on KeyFair.
func (c *child) fairCall(kind, tenant string, est float64) Call {
	return Call{ID: fmt.Sprintf("%s-%d", c.spec.ID, c.seq.Add(1)), Key: KeyFair, Child: c.spec.ID, Kind: kind, Tenant: tenant,
		Cost: map[string]float64{unitTokens: est}}
}

// fairRequest is a fair request of tenant (weight 1, Normal) on KeyFair.
func fairRequest(tenant string, est float64) reserve.Request {
	return reserve.Request{Key: KeyFair, Policy: fairLimit, Cost: reserve.Cost{unitTokens: est}, Tenant: tenant, Weight: 1}
}
