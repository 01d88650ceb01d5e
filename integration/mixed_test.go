package integration

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/pacer-go/pacer/integration/mixed"
	"github.com/pacer-go/pacer/internal/outage"
)

// TestMixedFleet: 2 Go and 2 Python processes (clients/python) pace one
// key at 500/s on one redis-server, through Redis stopped 7 s and restarted
// empty and a pause of the key, with a Limit and with two bands whose
// tokens are settled. Judged on the slots (package mixed): no interval
// holds more than a band allows, no slot lies in the pause. The figures
// (the busiest 100 ms the provider saw) are integration/cmd/pacermixed's.
func TestMixedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a fleet of processes through an outage: not with -short")
	}
	py := os.Getenv("PACER_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if out, err := exec.Command(py, "-c", "import redis, lupa").CombinedOutput(); err != nil {
		msg := "the mixed fleet needs " + py + " with redis-py and lupa (Debian: python3-redis python3-lupa): " + string(out)
		if ci := os.Getenv("CI"); ci != "" {
			t.Fatalf("%s (CI=%q is set, so this is a failure, not a skip)", msg, ci)
		}
		t.Skip(msg)
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		if ci := os.Getenv("CI"); ci != "" {
			t.Fatalf("no redis-server on PATH (CI=%q is set)", ci)
		}
		t.Skip("no redis-server on PATH")
	}
	repo, err := mixed.Repo()
	if err != nil {
		t.Fatal(err)
	}
	// Redis is down long enough for every process to pace locally: one
	// whose heartbeat was under way when Redis stopped takes no local slot
	// until the fleet holds it by its silence (docs/design.md, "When Redis
	// fails"). That is outage.FirstLocalSlot for a Go child (5.7 s with
	// the default Options), and for a Python child, whose client has a
	// 0.5 s socket timeout (clients/python/tests/fleet_child.py), its
	// probe's budget (2 × 0.5 + max(2, 4 × 0.5) s) and 1.6 settles (3.2 s):
	// 6.2 s. With 1.5 s down, a Python child once took no local slot
	// (beside a CPU-heavy job), and the check below was timing-bound.
	const (
		stopAt     = 3 * time.Second
		down       = 7 * time.Second
		pyFirstLoc = 6200 * time.Millisecond
	)
	if goFirst := outage.FirstLocalSlot(outage.DefaultCallTimeout, outage.DefaultCallTimeout, outage.DefaultHeartbeatInterval); down < max(goFirst, pyFirstLoc)+500*time.Millisecond {
		t.Fatalf("Redis down %v: not long enough for the first local slots (Go %v, Python %v, +500 ms)", down, goFirst, pyFirstLoc)
	}
	for _, bands := range []bool{false, true} {
		name := "limit"
		if bands {
			name = "bands"
		}
		t.Run(name, func(t *testing.T) {
			res, err := mixed.Run(t.Context(), mixed.Config{Go: 2, Python: 2, Threads: 4, Rate: 500, Bands: bands,
				Length: stopAt + down + 5500*time.Millisecond, StopAt: stopAt, RestartAt: stopAt + down,
				PauseAt: stopAt + down + 2500*time.Millisecond, PauseFor: time.Second, Python3: py, Repo: repo})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Errors {
				t.Error(e)
			}
			for _, e := range res.Excesses() {
				t.Errorf("band %s: %.1f units in [%v, %v] after the start, bound %.2f", e.Band, e.Units,
					time.Unix(0, e.From).Sub(res.Start), time.Unix(0, e.To).Sub(res.Start), e.Bound)
			}
			for _, c := range res.InPause() {
				t.Errorf("%s's slot %v after the start lies in the pause [%v, %v]", c.Proc, time.Unix(0, c.Slot).Sub(res.Start),
					res.PauseFrom.Sub(res.Start), res.PauseEnd.Sub(res.Start))
			}
			by := res.ByProc()
			for _, p := range []string{"go-0", "go-1", "py-0", "py-1"} {
				if by[p][0] == 0 || by[p][1] == 0 {
					t.Errorf("%s: %d calls, %d granted locally; want some of each (Redis was down %v)", p, by[p][0], by[p][1], down)
				}
			}
			b100, _ := res.Busiest(100 * time.Millisecond)
			t.Logf("%d calls; by process (calls, local): %v; the provider's busiest 100 ms: %d", len(res.Calls), by, b100)
		})
	}
}
