package integration

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/integration/combo"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// comboSeeds is TestCombination's budget: seeds 1 to comboSeeds, each a
// scenario of about 17 s, the whole test about 1.5 minutes with -race on a
// 2-core machine (CI's whole run stays under 15). PACER_COMBO_SEEDS=N runs
// seeds 1 to N instead, and PACER_COMBO_SEED=S only seed S; `go run
// ./integration/cmd/pacercombo -seeds 200` is the longer run.
const comboSeeds = 5

// comboClusterSeeds is TestCombinationCluster's budget: seeds 1 to
// comboClusterSeeds on a Redis Cluster (about 20 s each). The same
// variables choose them: PACER_COMBO_SEEDS=N runs seeds 1 to N there
// too; `go run ./integration/cmd/pacercombo -cluster -seeds 30` is the
// longer run.
const comboClusterSeeds = 1

// TestCombination runs the combination runner (package integration/combo)
// on a fixed budget of seeds: each seed's scenario mixes calls of every
// kind on six keys (two through pacehttp, one of them with a rate the
// fleet learns from the provider's 429s, Options.Adaptive; one of fair
// requests only), the operator, the provider's 429s, faults of Redis and
// of the fleet's processes (also in the first seconds after they start,
// and Close while they pace locally) and CPU hogs, and is judged by what
// the provider saw. A failing seed names the command that replays it.
func TestCombination(t *testing.T) { runCombination(t, false) }

// TestCombinationCluster runs the same scenarios on a Redis Cluster of
// three masters (combo.Config.Cluster, Scenario.ForCluster): every
// process's Limiter on a ClusterClient, its script calls pipelined per
// master, each Redis fault striking one master while the others serve.
func TestCombinationCluster(t *testing.T) { runCombination(t, true) }

// runCombination runs TestCombination's seeds, on a Cluster if cluster.
func runCombination(t *testing.T, cluster bool) {
	need := []string{"redis-server"}
	if cluster {
		need = append(need, "redis-cli") // redisproc.StartCluster joins the nodes with it
	}
	for _, bin := range need {
		if _, err := exec.LookPath(bin); err != nil {
			// redistest's rule: no Redis is a skip, or a failure under CI.
			if ci := os.Getenv("CI"); ci != "" {
				t.Fatalf("%s is not on PATH: %v (CI=%q is set, so this is a failure, not a skip)", bin, err, ci)
			}
			t.Skipf("%s is not on PATH: %v", bin, err)
		}
	}
	// go-redis's own dial errors while the scenarios stop Redis, at Debug:
	// off.
	redis.SetLogger(reserve.RedisLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	budget := comboSeeds
	if cluster {
		budget = comboClusterSeeds
	}
	seeds, err := comboSeedList(budget)
	if err != nil {
		t.Fatal(err)
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			if why, ok := pythonQuarantine[seed]; ok && os.Getenv("PACER_COMBO_PYTHON") == "" {
				// An open finding of the seed's Python draw (docs/testing.md):
				// Go processes run in its slots here until it is fixed;
				// `go run ./integration/cmd/pacercombo -seed N` still
				// draws them.
				t.Logf("seed %d: its Python draw is quarantined: %s", seed, why)
				t.Setenv("PACER_COMBO_PYTHON", "off")
			}
			for attempt := 1; ; attempt++ {
				res, err := combo.Run(t.Context(), combo.Config{Seed: seed, Args: []string{"-test.run=^$"}, Cluster: cluster})
				if err != nil {
					t.Fatalf("seed %d could not run: %v", seed, err)
				}
				t.Log(res.Progress())
				if !res.Verdict.Failed() {
					if attempt > 1 {
						t.Logf("seed %d passed on attempt %d: its failures above came with this machine's timing, not every time", seed, attempt)
					}
					return
				}
				var b strings.Builder
				res.WriteReport(&b, false)
				msg := fmt.Sprintf("seed %d failed (attempt %d of %d): %s\n%s\nreplay: %s", seed, attempt, comboAttempts,
					countText(res.Verdict.Count()), b.String(), combo.ReplayCommand(seed, cluster))
				if attempt == comboAttempts {
					t.Error(msg)
					return
				}
				t.Log(msg)
			}
		})
	}
}

// pythonQuarantine holds the seeds whose Python draw has an open finding
// (docs/testing.md, "Known findings"), with the finding.
// None now: seed 5's (a Python process's local slot 22-27 ms from a Go
// process's on Redis during an OOM, every run at 40ce2c0) passed 8 runs of
// 8 at d448fa0.
var pythonQuarantine = map[uint64]string{}

// comboAttempts is how many times TestCombination runs a seed that fails:
// a seed's scenario is fixed, but its timing is the machine's, and on a
// loaded 2-core machine (CI runs reserve's tests beside it) about one seed
// in five failed a judge once, a different one each time (a window over
// by one call where a Limiter's local slots met another's on Redis, a
// fair ratio of 1.7 over 1.5). A seed that fails every attempt fails the
// test; each failing attempt's report is logged whole, and
// docs/testing.md lists the ones not fixed yet.
const comboAttempts = 3

// comboSeedList returns the seeds to run: PACER_COMBO_SEED, else 1 to
// PACER_COMBO_SEEDS, else 1 to budget.
func comboSeedList(budget int) ([]uint64, error) {
	if s := os.Getenv("PACER_COMBO_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil || seed == 0 {
			return nil, fmt.Errorf("PACER_COMBO_SEED=%q: want a seed >= 1", s)
		}
		return []uint64{seed}, nil
	}
	n := budget
	if s := os.Getenv("PACER_COMBO_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			return nil, fmt.Errorf("PACER_COMBO_SEEDS=%q: want a number >= 1", s)
		}
		n = v
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = uint64(i + 1)
	}
	return seeds, nil
}

func countText(n map[string]int) string {
	var parts []string
	for _, k := range combo.VKinds {
		if n[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
		}
	}
	return strings.Join(parts, " ")
}
