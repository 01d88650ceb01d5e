package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/outage"
	"github.com/pacer-go/pacer/internal/redistest"
)

// The fleet of every fault test: two processes of 8 goroutines each, with
// default reserve.Options and a default go-redis client, calling Wait on one
// key at 200/s, burst 1.
const (
	procs      = 2
	goroutines = 8
	rate       = 200.0
	burst      = 1

	warmup = 3 * time.Second // both children heartbeat twice: they know the fleet is 2
	// faultFor: long enough that local pacing has begun, and local slots
	// with it, well before the heal. A child finds the outage about 2 s in
	// (the ping's budget), and its local slots may wait localWait more
	// (below). With 4 s, TestFaultTimeout's children paced locally 1.7 s
	// before the heal without a slot in it, and a liveness check judged on
	// any local window failed (once in about six runs); with 7 s, on a
	// loaded machine, TestFaultLatency's both paced locally 229 ms before it.
	faultFor = 9500 * time.Millisecond
	tail     = 4 * time.Second // after Redis is back
)

// localWait is how long after its switch a child may take its first local
// slot (docs/design.md, "When Redis fails"): when a heartbeat of its saying
// "redis" may still run on Redis (a timeout, a freeze: one is under way at
// the switch), its local slots wait until the fleet holds it, 1.6 settles
// after that heartbeat's deadline, which is at most a probe's budget after
// the switch: outage.FirstLocalSlot, the rule reserve applies (5.7 s). A
// slow Redis stretches the call timeout to its cap (9.2 s).
var (
	localWait     = outage.FirstLocalSlot(outage.DefaultCallTimeout, outage.DefaultCallTimeout, outage.DefaultHeartbeatInterval)
	localWaitSlow = outage.FirstLocalSlot(outage.MaxCallTimeout, outage.DefaultCallTimeout, outage.DefaultHeartbeatInterval)
)

// windowBound is what the provider may see in any 1 s of a run, faults and
// transitions included: the limit's burst + rate*T, with 10% for callers that
// wake late on a loaded machine (the bound). It is asserted on every
// 1 s window of the whole run, not on averages.
const windowBound = 1.1*rate + burst

type fault struct {
	// spec is where the children find Redis.
	spec childSpec
	// inject breaks Redis; heal mends it and returns when Redis answers.
	inject, heal func(t *testing.T)
	// failover: Redis mends itself (a replica is promoted); heal only
	// waits for that, right after inject.
	failover bool
	// slow: Redis answers, only slowly. A slow Redis is not an outage: a
	// child whose ping answers within its budget waits on Redis, one whose
	// ping outlasts it paces locally; either way, every child that
	// switched comes back.
	slow bool
}

func TestFaultRestartEmpty(t *testing.T) {
	t.Parallel()
	s := redistest.NewProcess(t)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: s.URL},
		inject: func(t *testing.T) { s.Stop(t) },
		heal:   func(t *testing.T) { s.Restart(t) }, // empty: no buckets, no scripts, no heartbeats
	})
}

func TestFaultSIGSTOP(t *testing.T) {
	t.Parallel()
	s := redistest.NewProcess(t)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: s.URL},
		inject: func(t *testing.T) { s.Freeze(t) },
		heal:   func(t *testing.T) { s.Thaw(t) },
	})
}

func TestFaultLatency(t *testing.T) {
	t.Parallel()
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: "redis://" + p.Addr()},
		inject: func(t *testing.T) { p.AddLatency(t, time.Second) }, // four times CallTimeout
		heal:   func(t *testing.T) { p.Clear(t) },
		slow:   true,
	})
}

func TestFaultTimeout(t *testing.T) {
	t.Parallel()
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: "redis://" + p.Addr()},
		inject: func(t *testing.T) { p.AddTimeout(t) }, // data stops flowing
		heal:   func(t *testing.T) { p.Clear(t) },
	})
}

func TestFaultReset(t *testing.T) {
	t.Parallel()
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: "redis://" + p.Addr()},
		inject: func(t *testing.T) { p.ResetPeer(t) },
		heal:   func(t *testing.T) { p.Clear(t) },
	})
}

func TestFaultSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.NewSentinel(t)
	runFault(t, fault{
		spec:     childSpec{Mode: "sentinel", MasterName: s.MasterName, Addrs: s.SentinelAddrs},
		inject:   func(t *testing.T) { s.KillMaster(t) },
		heal:     func(t *testing.T) { s.WaitFailover(t, 30*time.Second) },
		failover: true,
	})
}

func TestFaultClusterFailover(t *testing.T) {
	t.Parallel()
	c := redistest.NewClusterReplicas(t, 3, 1)
	key := "api.example.com"
	var prefix string
	runFault(t, fault{
		spec: childSpec{Mode: "cluster", Addrs: c.Addrs, Key: key},
		inject: func(t *testing.T) {
			c.KillNode(t, c.MasterFor(t, prefix+"{"+key+"}"))
		},
		heal:     func(t *testing.T) { c.WaitSlotServed(t, prefix+"{"+key+"}", 30*time.Second) },
		failover: true,
	}, func(p string) { prefix = p })
}

// runFault runs the fleet, injects the fault after the warm-up, heals it
// after faultFor, and checks what holds on any machine: no Wait error, every
// child switched to local pacing and back, calls went on meanwhile, and the
// busiest 1 s of the whole run is within windowBound. Timing (stalls, rates
// per phase, recovery time) is logged.
func runFault(t *testing.T, f fault, usePrefix ...func(string)) {
	prefix := redistest.Prefix(t)
	for _, u := range usePrefix {
		u(prefix)
	}
	spec := f.spec
	spec.Prefix = prefix
	if spec.Key == "" {
		spec.Key = "api.example.com"
	}
	spec.Rate, spec.Burst, spec.Goroutines = rate, burst, goroutines
	start := time.Now().Add(1500 * time.Millisecond) // children start and heartbeat first
	injectAt := start.Add(warmup)
	end := injectAt.Add(faultFor + tail)
	spec.Start, spec.End = start.UnixNano(), end.UnixNano()

	var healedAt time.Time
	run := runFleet(t, procs, spec, func() {
		time.Sleep(time.Until(injectAt))
		f.inject(t)
		if !f.failover {
			time.Sleep(time.Until(injectAt.Add(faultFor)))
		}
		f.heal(t)
		healedAt = time.Now()
	})
	if t.Failed() {
		return
	}
	if len(run.errs) > 0 {
		t.Errorf("%d Wait errors with default options, first: %s", len(run.errs), run.errs[0])
	}
	localAt, nLocal := run.lastSwitch("local", injectAt)
	redisAt, nRedis := run.lastSwitch("redis", injectAt)
	switch {
	case f.slow && nRedis != nLocal:
		t.Errorf("%d children switched to local pacing, %d came back to Redis\n%s", nLocal, nRedis, run.stderr)
	case f.slow:
		t.Logf("%d of %d children switched to local pacing (a slow Redis: each switches only if its ping outlasted the budget and no other call of it got an answer meanwhile)", nLocal, procs)
	case nLocal != procs:
		t.Errorf("%d of %d children switched to local pacing", nLocal, procs)
	case nRedis != procs:
		t.Errorf("%d of %d children came back to Redis\n%s", nRedis, procs, run.stderr)
	}
	// The invariant: every 1 s of the whole run, start to end.
	busiest, at := run.busiest(time.Second)
	if float64(busiest) > windowBound {
		t.Errorf("busiest 1 s of the run (from %v after the start) held %d calls, want at most %.0f (1.1 x rate + burst)\n%s\nthe children's logs:\n%s",
			at.Sub(start).Round(time.Millisecond), busiest, windowBound, run.window(at, time.Second, start), strings.Join(run.stderr, "\n"))
	}
	// Liveness: the fleet went on calling while Redis was broken, judged
	// when both children paced locally longer than their local slots may
	// wait (a slow Redis switches them late, if at all, and is judged only
	// on a long window).
	wait := localWait
	if f.slow {
		wait = localWaitSlow
	}
	if nLocal == procs {
		n, local := run.countIn(localAt, healedAt), healedAt.Sub(localAt)
		switch {
		case local > wait+500*time.Millisecond && n == 0:
			t.Errorf("no call while both children paced locally (%v, longer than the %v their local slots may wait)", local.Round(time.Millisecond), wait)
		case local <= wait+500*time.Millisecond:
			t.Logf("liveness not judged: both children paced locally only %v before the heal, and local slots may wait %v", local.Round(time.Millisecond), wait)
		}
	}

	// Figures, not asserted (timing on a shared machine).
	before := float64(run.countIn(start.Add(time.Second), injectAt)) / (warmup - time.Second).Seconds()
	after := float64(run.countIn(healedAt.Add(500*time.Millisecond), end.Add(-200*time.Millisecond))) /
		end.Add(-200*time.Millisecond).Sub(healedAt.Add(500*time.Millisecond)).Seconds()
	local := "no child switched to local pacing"
	if nLocal > 0 {
		firstBack := firstSwitch(run, "redis", injectAt)
		degraded := firstBack.Sub(localAt)
		var degradedRate float64
		if degraded > 500*time.Millisecond {
			degradedRate = float64(run.countIn(localAt, firstBack)) / degraded.Seconds()
		}
		after = float64(run.countIn(redisAt.Add(500*time.Millisecond), end.Add(-200*time.Millisecond))) /
			end.Add(-200*time.Millisecond).Sub(redisAt.Add(500*time.Millisecond)).Seconds()
		local = fmt.Sprintf("local %v after the fault (all %d that switched local for %v) at %.1f/s; back on Redis %v after it answered",
			localAt.Sub(injectAt).Round(time.Millisecond), nLocal, degraded.Round(time.Millisecond), degradedRate,
			redisAt.Sub(healedAt).Round(time.Millisecond))
	}
	t.Logf("busiest 1 s of the whole run: %d calls (bound %.0f), at %v after the start (fault at %v, healed at %v); "+
		"switches per child %v; before %.1f/s; %s; after %.1f/s; longest stall %v, longest Wait %v; calls %d",
		busiest, windowBound, at.Sub(start).Round(time.Millisecond), injectAt.Sub(start).Round(time.Millisecond),
		healedAt.Sub(start).Round(time.Millisecond), run.switchCounts(), before, local, after,
		run.longestGap(start.Add(500*time.Millisecond), end.Add(-500*time.Millisecond)).Round(time.Millisecond),
		run.longestWait().Round(time.Millisecond), len(run.calls))
}

// firstSwitch returns the first switch to "to" after after, by any child.
func firstSwitch(run fleetRun, to string, after time.Time) time.Time {
	for _, s := range run.switches {
		if s.to == to && s.at >= after.UnixNano() {
			return time.Unix(0, s.at)
		}
	}
	return time.Time{}
}

// TestFaultPartialPartition: 1 process of 3 loses Redis (a proxy in front of
// its connection alone goes silent) while the other 2 keep it. The cut-off
// one paces locally on its share, rate/3; the others see its heartbeat go
// silent and, for SilentHold, reserve only their own shares (2/3 of every
// band) instead of the whole rate. Until they notice (two heartbeat
// intervals, and their next heartbeat), the total is up to rate + rate/3;
// from then on, every 1 s of the run holds at most windowBound, through the
// healing too.
func TestFaultPartialPartition(t *testing.T) {
	t.Parallel()
	const (
		parts     = 3
		heartbeat = outage.DefaultHeartbeatInterval
		// settle: the silent member counts as held after two intervals
		// without a heartbeat; each other member learns it at its next
		// heartbeat, up to one interval later.
		settle = 3*heartbeat + time.Second
		cutFor = settle + 5*time.Second
	)
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	prefix := redistest.Prefix(t)
	spec := childSpec{Mode: "url", URL: s.URL, URLs: []string{"redis://" + p.Addr()}, Prefix: prefix,
		Key: "api.example.com", Rate: rate, Burst: burst, Goroutines: goroutines}
	start := time.Now().Add(1500 * time.Millisecond)
	cutAt := start.Add(warmup + heartbeat) // every child has heard the fleet of 3
	healAt := cutAt.Add(cutFor)
	end := healAt.Add(tail)
	spec.Start, spec.End = start.UnixNano(), end.UnixNano()
	run := runFleet(t, parts, spec, func() {
		time.Sleep(time.Until(cutAt))
		p.AddTimeout(t)
		time.Sleep(time.Until(healAt))
		p.Clear(t)
	})
	if t.Failed() {
		return
	}
	if len(run.errs) > 0 {
		t.Errorf("%d Wait errors, first: %s", len(run.errs), run.errs[0])
	}
	cut := fleetRun{}
	for _, c := range run.calls {
		if c.end < cutAt.UnixNano() || c.end >= cutAt.Add(settle).UnixNano() {
			cut.calls = append(cut.calls, c)
		}
	}
	// Every 1 s window outside the settling time: windows that start
	// before the cut end before it (the settling calls are left out, so a
	// window straddling them counts fewer, never more).
	busiest, at := cut.busiest(time.Second)
	if float64(busiest) > windowBound {
		t.Errorf("busiest 1 s outside the %v after the cut: %d calls at %v after the start, want at most %.0f (cut at %v, healed at %v); %s",
			settle, busiest, at.Sub(start).Round(time.Millisecond), windowBound, cutAt.Sub(start), healAt.Sub(start), run.window(at, time.Second, start))
		for i, e := range run.stderr {
			t.Logf("child %d's log:\n%s", i, e)
		}
	}
	// How long the fleet took to come down to the rate: the first 1 s
	// window after the cut from which on every window holds the bound.
	settled := cutAt
	for w := cutAt; w.Before(healAt); w = w.Add(100 * time.Millisecond) {
		if float64(run.countIn(w, w.Add(time.Second))) > windowBound {
			settled = w.Add(100 * time.Millisecond)
		}
	}
	during, _ := fleetRun{calls: callsIn(run.calls, cutAt, cutAt.Add(settle))}.busiest(time.Second)
	t.Logf("partial partition (1 of %d cut off for %v): busiest 1 s while the fleet noticed: %d (rate + rate/3 = %.0f); "+
		"every 1 s window within %.0f from %v after the cut (settling time asserted: %v); busiest 1 s outside it: %d; "+
		"rate while cut %.1f/s; switches %v; calls %d",
		parts, cutFor, during, rate*4/3, windowBound, settled.Sub(cutAt).Round(100*time.Millisecond), settle, busiest,
		float64(run.countIn(cutAt.Add(settle), healAt))/healAt.Sub(cutAt.Add(settle)).Seconds(), run.switchCounts(), len(run.calls))
}

// callsIn returns the calls that ended in [from, to).
func callsIn(calls []call, from, to time.Time) []call {
	var in []call
	for _, c := range calls {
		if c.end >= from.UnixNano() && c.end < to.UnixNano() {
			in = append(in, c)
		}
	}
	return in
}
