package lua_test

// Mixed shares: callers on Redis whose views of the fleet differ (for a
// heartbeat, one counts a member held that another counts live) reserve
// and cancel on one state at different shares (ARGV[3]); together they
// never pass the whole limit in force. They run on a real redis-server.

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// TestMixedShares: callers whose views of the fleet differ reserve on one
// state at different shares; together they never pass the whole limit,
// burst + rate*T over every interval. The combination runner found it: a
// caller at half the rate, then one at the whole, on a Limit{20, 2} got 3
// slots within 25 ms (2.5 allowed), since each read the bucket's balance
// at its own rate. Also under a stored limit below the code's.
func TestMixedShares(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	r := rand.New(rand.NewPCG(7, 21))
	for range trials(200, 30) {
		rate, burst := float64(1+r.IntN(100)), float64(1+r.IntN(8))
		code := permits(rate, burst)
		s := onRedis(t, srv)
		if r.IntN(2) == 0 {
			// A stored limit below the code's: the group's lattice is the
			// code's, its bucket the stored rate's (core.lua's lattice).
			rate *= 0.5 + 0.49*r.Float64()
			s.setStored(start, permits(rate, burst).stored())
		}
		now := start
		var slots []int64
		for range 60 {
			share := whole
			if r.IntN(2) == 0 {
				n := 2 + r.IntN(4)
				held := r.Perm(n)[:1+r.IntN(n-1)]
				slices.Sort(held)
				share = group(n, held...)
			}
			slots = append(slots, s.reserve(now, share, code, 1)[0].slot)
			if r.IntN(3) == 0 {
				now += r.Int64N(2e9)
			}
		}
		slices.Sort(slots)
		if i, j, over := overBucket(slots, rate, burst); over {
			T := float64(slots[j]-slots[i]) / 1e9
			t.Fatalf("rate %v burst %v: %d units within %.6f s, want at most %.6f", rate, burst, j-i+1, T, burst+rate*T)
		}
	}
}

// TestMixedSharesCancel: callers whose views of the fleet differ
// (TestMixedShares), cancelling as well as reserving, under a stored limit
// below the code's, never pass the limit in force. A cancel gives back
// what later reservations have not built on, measured at the whole rate's
// spacing: a caller at a share measured it at its own, longer spacing,
// found a later reservation of a caller at the whole rate built on less
// than it was, and gave back time that caller then took again (the
// combination runner's seed 98: two calls 20.9 ms apart on a burst of 1
// at 16.5/s; 30 of 2,000 random runs here).
func TestMixedSharesCancel(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	for seed := range trials(2000, 80) {
		r := rand.New(rand.NewPCG(uint64(seed), 98))
		burst := float64(1 + r.IntN(5))
		s := onRedis(t, srv)
		s.setStored(start, permits(16.5, burst).stored())
		code := permits(30, burst)
		now := start
		type granted struct {
			grant
			share string
		}
		var live []granted
		for range 40 {
			share := whole
			if r.IntN(2) == 0 {
				share = group(3, [][]int{{0, 1}, {0}, {1}, {0, 2}}[r.IntN(4)]...)
			}
			if i := r.IntN(len(live) + 1); r.IntN(4) == 0 && i < len(live) && live[i].slot > now {
				s.cancel(now, live[i].share, code, live[i].grant) // by the caller that reserved it
				live = slices.Delete(live, i, i+1)
			} else {
				live = append(live, granted{s.reserve(now, share, code, 1)[0], share})
			}
			now += r.Int64N(4e7)
		}
		var slots []int64
		for _, g := range live {
			slots = append(slots, g.slot)
		}
		slices.Sort(slots)
		if i, j, over := overBucket(slots, 16.5, burst); over {
			T := float64(slots[j]-slots[i]) / 1e9
			t.Fatalf("seed %d, burst %v: %d units within %.6f s, want at most %.6f", seed, burst, j-i+1, T, burst+16.5*T)
		}
	}
}
