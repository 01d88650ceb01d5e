package reserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/internal/redistest"
)

// TestDoubtLeaseWaitsForHeartbeat: a hot key's batch, which leases a run
// of slots, waits for the heartbeat after one failed as other calls do
// (TestDoubtWaitsForHeartbeat): its lease, refused for want of a share,
// must not send the batch to the local fallback. This Limiter is on Redis
// and the fleet counts it there, so a slot granted on its own store could
// meet one Redis grants another member.
func TestDoubtLeaseWaitsForHeartbeat(t *testing.T) {
	s := redistest.New(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	k := prefix + "{limiters}"
	l, err := New(s.Client, Options{KeyPrefix: prefix, Logger: slog.New(slog.DiscardHandler), HeartbeatInterval: time.Hour, SilentHold: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, id := range []string{"other1", "other2"} {
		if err := heartbeatScript.Run(ctx, s.Client, layout.FleetKeys(prefix), id, "redis", fmt.Sprint(time.Now().UnixMilli(), " 0 0"), 7_200_000, 10_800_000, 3_960_000, 60_000, "").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.heartbeat(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.fleet.size(); n != 3 {
		t.Fatalf("fleet of %d, want 3", n)
	}
	// The fleet's set of another type for a moment: the heartbeat fails.
	for _, err := range []error{s.Client.Rename(ctx, k, k+":saved").Err(), s.Client.Set(ctx, k, "x", 0).Err()} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := l.heartbeat(ctx); err == nil {
		t.Fatal("the heartbeat did not fail")
	}
	for _, err := range []error{s.Client.Del(ctx, k).Err(), s.Client.Rename(ctx, k+":saved", k).Err()} {
		if err != nil {
			t.Fatal(err)
		}
	}

	// 30,000/s, burst 1 (under the fleet's 3): a lease of 1 ms at a
	// third of it (the share in doubt) holds 10.
	key := "hot.example"
	sp, amounts, err := l.single(key, Limit{Rate: 30000, Burst: 1}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if size := l.leaseSize(key, sp, l.opts.LeaseQueue); size < 2 || !l.leasable(sp, &request{amounts: amounts}) {
		t.Fatalf("the key does not lease (size %d): the test checks nothing", size)
	}
	reqs := make([]*request, l.opts.LeaseQueue)
	for i := range reqs {
		reqs[i] = &request{op: names.OpWait, amounts: amounts, maxWait: -1, done: make(chan result, 1)}
	}
	for i, res := range l.leaseBatch(ctx, key, sp, reqs) {
		var ns *noShareError
		if res.r != nil {
			t.Fatalf("request %d granted (source %v) before the next heartbeat", i, res.r.Source())
		}
		if !errors.As(res.err, &ns) {
			t.Fatalf("request %d: %v; want a wait for a share", i, res.err)
		}
	}
	if l.hasLocal(key) {
		t.Fatal("the key has a local state: the batch went to the local fallback")
	}
}
