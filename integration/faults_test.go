package integration

import (
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
)

// The fleet of every fault test: two processes of 8 goroutines each, with
// default reserve.Options, calling Wait on one key at 100/s, burst 1.
const (
	procs      = 2
	goroutines = 8
	rate       = 100.0
	burst      = 1

	warmup   = 3 * time.Second // both children heartbeat twice: they know the fleet is 2
	faultFor = 4 * time.Second
	tail     = 4 * time.Second // after Redis is back

	// The bounds the tests assert, with default Options (CallTimeout
	// 250 ms, FailAfter 3, ProbeInterval 1 s ± 25%, HeartbeatInterval 2 s):
	//
	// maxStall: the longest time in which no caller of the fleet gets a
	// slot. A fault costs at most one CallTimeout before a caller is paced
	// locally (each failing call falls back at once), plus the local queue
	// (8 goroutines at 50/s: 160 ms), plus scheduling on a loaded 2-core
	// machine. 1.5 s leaves room without hiding a limiter that stalls.
	maxStall = 1500 * time.Millisecond
	// maxRecovery: from Redis answering again until every child is back on
	// the shared bucket: one probe interval (at most 1.25 s) plus a call.
	maxRecovery = 3 * time.Second
)

type fault struct {
	// spec is where the children find Redis.
	spec childSpec
	// inject breaks Redis; heal mends it and returns when Redis answers.
	inject, heal func(t *testing.T)
	// failover: Redis mends itself (a replica is promoted); heal only
	// waits for that, right after inject.
	failover bool
}

func TestFaultRestartEmpty(t *testing.T) {
	s := redistest.NewProcess(t)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: s.URL},
		inject: func(t *testing.T) { s.Stop(t) },
		heal:   func(t *testing.T) { s.Restart(t) }, // empty: no buckets, no scripts, no heartbeats
	})
}

func TestFaultSIGSTOP(t *testing.T) {
	s := redistest.NewProcess(t)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: s.URL},
		inject: func(t *testing.T) { s.Freeze(t) },
		heal:   func(t *testing.T) { s.Thaw(t) },
	})
}

func TestFaultLatency(t *testing.T) {
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: "redis://" + p.Addr()},
		inject: func(t *testing.T) { p.AddLatency(t, time.Second) }, // four times CallTimeout
		heal:   func(t *testing.T) { p.Clear(t) },
	})
}

func TestFaultTimeout(t *testing.T) {
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: "redis://" + p.Addr()},
		inject: func(t *testing.T) { p.AddTimeout(t) }, // data stops flowing
		heal:   func(t *testing.T) { p.Clear(t) },
	})
}

func TestFaultReset(t *testing.T) {
	s := redistest.NewProcess(t)
	p := redistest.NewProxy(t, s.Addr)
	runFault(t, fault{
		spec:   childSpec{Mode: "url", URL: "redis://" + p.Addr()},
		inject: func(t *testing.T) { p.ResetPeer(t) },
		heal:   func(t *testing.T) { p.Clear(t) },
	})
}

func TestFaultSentinelFailover(t *testing.T) {
	s := redistest.NewSentinel(t)
	runFault(t, fault{
		spec:     childSpec{Mode: "sentinel", MasterName: s.MasterName, Addrs: s.SentinelAddrs},
		inject:   func(t *testing.T) { s.KillMaster(t) },
		heal:     func(t *testing.T) { s.WaitFailover(t, 30*time.Second) },
		failover: true,
	})
}

func TestFaultClusterFailover(t *testing.T) {
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
// after faultFor, and checks and logs: Wait errors (none allowed), the
// longest stall, the rate while both children pace locally, and the time
// until both are back on Redis.
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
	before := float64(run.countIn(start.Add(time.Second), injectAt)) / (warmup - time.Second).Seconds()
	localAt, nLocal := run.lastSwitch("local", injectAt)
	redisAt, nRedis := run.lastSwitch("redis", injectAt)
	if nLocal != procs {
		t.Fatalf("%d of %d children switched to local pacing", nLocal, procs)
	}
	if nRedis != procs {
		t.Fatalf("%d of %d children came back to Redis\n%s", nRedis, procs, run.stderr)
	}
	firstBack := firstSwitch(run, "redis", injectAt)
	degraded := firstBack.Sub(localAt)
	stall := run.longestGap(start.Add(500*time.Millisecond), end.Add(-500*time.Millisecond))
	recovery := redisAt.Sub(healedAt)
	t.Logf("switches per child (1 to local and 1 back means no flapping): %v", run.switchCounts())
	msg := "before %.1f/s; degraded %v after the fault (both local %v): %.1f/s; longest stall %v, longest Wait %v; Redis back %v after the fault, both children on it %v later; calls %d"
	var degradedRate float64
	if degraded > 500*time.Millisecond {
		degradedRate = float64(run.countIn(localAt, firstBack)) / degraded.Seconds()
	}
	t.Logf(msg, before, localAt.Sub(injectAt).Round(time.Millisecond), degraded.Round(time.Millisecond), degradedRate,
		stall.Round(time.Millisecond), run.longestWait().Round(time.Millisecond), healedAt.Sub(injectAt).Round(time.Millisecond),
		recovery.Round(time.Millisecond), len(run.calls))

	if degraded > 500*time.Millisecond && (degradedRate < 0.25*rate || degradedRate > 1.1*rate) {
		t.Errorf("rate while degraded %.1f/s, want within [%.0f, %.0f]", degradedRate, 0.25*rate, 1.1*rate)
	}
	if stall > maxStall {
		t.Errorf("longest stall %v, want at most %v", stall, maxStall)
	}
	for child, n := range run.switchCounts() {
		if n != 2 {
			t.Errorf("child %d switched %d times, want 2 (to local once, back once): a probe declared Redis back too early", child, n)
		}
	}
	if recovery > maxRecovery {
		t.Errorf("back on Redis %v after it answered, want at most %v", recovery, maxRecovery)
	}
	after := float64(run.countIn(redisAt.Add(500*time.Millisecond), end.Add(-200*time.Millisecond))) /
		end.Add(-200*time.Millisecond).Sub(redisAt.Add(500*time.Millisecond)).Seconds()
	if after > 1.1*rate {
		t.Errorf("rate after recovery %.1f/s, above the limit %v/s", after, rate)
	}
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
