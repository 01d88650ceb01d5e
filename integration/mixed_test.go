package integration

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/pacer-go/pacer/integration/mixed"
)

// TestMixedFleet: 2 Go and 2 Python processes (clients/python) pace one
// key at 500/s on one redis-server, through Redis stopped and restarted
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
	for _, bands := range []bool{false, true} {
		name := "limit"
		if bands {
			name = "bands"
		}
		t.Run(name, func(t *testing.T) {
			res, err := mixed.Run(t.Context(), mixed.Config{Go: 2, Python: 2, Threads: 4, Rate: 500, Bands: bands,
				Length: 10 * time.Second, StopAt: 3 * time.Second, RestartAt: 4500 * time.Millisecond,
				PauseAt: 7 * time.Second, PauseFor: time.Second, Python3: py, Repo: repo})
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
					t.Errorf("%s: %d calls, %d granted locally; want some of each (Redis was down 1.5 s)", p, by[p][0], by[p][1])
				}
			}
			b100, _ := res.Busiest(100 * time.Millisecond)
			t.Logf("%d calls; by process (calls, local): %v; the provider's busiest 100 ms: %d", len(res.Calls), by, b100)
		})
	}
}
