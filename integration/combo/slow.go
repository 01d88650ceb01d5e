package combo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/launcher"
)

// The slow Redis (FaultSlow): for a while, every reply from Redis reaches
// the fleet Latency late, or every command reaches Redis Latency late (so
// that it runs late: past its deadline when Latency is over twice the call
// timeout, and the script refuses it, PACER_STALE), through proxies
// (internal/testkit's redisproxy, a Toxiproxy; one per fleet slot) the
// fleet's processes reach Redis by in the seeds that draw it; in a third
// of them, one slot's link only (One): that process alone is slow, and the
// others hear it late, or not at all while its commands are late.
//
// A slow Redis is no outage (DESIGN.md): callers who can wait get no
// error, and whatever each process decides (on Redis, slow; or pacing
// locally when its ping outlasts its budget) the provider sees no window
// over the limit. The latencies run from under the Limiter's call timeout
// (250 ms by default: calls answer slowly) to over it (calls time out, the
// pings that decide wait, heartbeats come late), up to a little over a
// second (go-redis's handshake on a new connection takes round trips of
// its own).
//
// It is drawn last, from a stream of its own, so that every other draw of
// a seed stays as it was; the seeds that do not draw it reach Redis
// directly, as before.
var slowLatencies = []time.Duration{80 * time.Millisecond, 300 * time.Millisecond, 700 * time.Millisecond, 1200 * time.Millisecond}

// drawSlow adds a slow Redis to half the seeds, where the timeline has
// room for it.
func (sc *Scenario) drawSlow() {
	rng := rand.New(rand.NewPCG(sc.Seed, 0x510e))
	if rng.Float64() >= 0.5 {
		return
	}
	lat := slowLatencies[rng.IntN(len(slowLatencies))]
	last := sc.Length - settle
	for range 30 { // tries to find room between the other Redis faults
		d := between2(rng, 1200*time.Millisecond, 3500*time.Millisecond)
		if sc.addFitting(Event{At: between2(rng, warmup, last-d), Kind: FaultSlow, For: d, Latency: lat}) {
			// Commands or replies late: drawn after the rest, so that the
			// draws above are what they were before it joined.
			e := &sc.Events[len(sc.Events)-1]
			e.Commands = rng.IntN(2) == 0
			if rng.IntN(3) == 0 { // drawn after the direction, as it was after the rest
				e.One, e.Child = true, rng.IntN(sc.Procs)
			}
			return
		}
	}
}

// slowRedis reports whether sc draws a slow Redis: its fleet then reaches
// Redis through proxies, one per slot.
func (sc Scenario) slowRedis() bool {
	return slices.ContainsFunc(sc.Events, func(e Event) bool { return e.Kind == FaultSlow })
}

// slowProxy is the proxy a fleet slot's processes reach Redis by in a seed
// that draws a slow Redis.
type slowProxy struct {
	child *launcher.Child
}

// startSlowProxy starts a proxy to upstream (host:port).
func startSlowProxy(ctx context.Context, upstream string) (*slowProxy, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute) // a first build of the launcher
	defer cancel()
	c, err := launcher.Start(ctx, "redisproxy", upstream)
	if err != nil {
		return nil, fmt.Errorf("the slow Redis's proxy: %w", err)
	}
	if strings.HasPrefix(c.First, "unavailable") {
		_ = c.Close()
		return nil, fmt.Errorf("the slow Redis's proxy: %s", c.First)
	}
	return &slowProxy{child: c}, nil
}

// addr is the proxy's host:port.
func (p *slowProxy) addr() string { return p.child.First }

// slow makes every reply d late, or every command (commands); clear, on
// time again.
func (p *slowProxy) slow(d time.Duration, commands bool) error {
	if commands {
		return p.child.Do("latency-up " + d.String())
	}
	return p.child.Do("latency " + d.String())
}
func (p *slowProxy) clear() error { return p.child.Do("clear") }
func (p *slowProxy) close()       { _ = p.child.Close() }
