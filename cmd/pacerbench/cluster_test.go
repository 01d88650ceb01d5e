package main

import (
	"bytes"
	"context"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestClusterPhase runs the cluster phase end to end at a tiny size (3
// processes, 30 cold keys, segments of 1 s, 30 slots moved) and checks
// that every segment ran and counted something, that the resharding moved
// the slots it planned, and that both failovers happened and their tables
// were printed. It asserts no figure: errors, the busiest seconds and
// recovery times are the phase's to print, not a test's to bound.
func TestClusterPhase(t *testing.T) {
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not on PATH (CI is set)", bin)
			}
			t.Skipf("%s is not on PATH", bin)
		}
	}
	c, err := parseFlags([]string{"-quick", "-phases", "cluster", "-cluster-procs", "3", "-cluster-keys", "30", "-cluster-rate", "30",
		"-cluster-seg", "1s", "-cluster-slots", "30"})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, progress bytes.Buffer
	start := time.Now()
	res, err := run(context.Background(), c, &stdout, &progress)
	t.Logf("run took %v; progress:\n%s", time.Since(start).Round(time.Millisecond), progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.Cluster == nil || len(res.Cluster.Runs) != 1 {
		t.Fatalf("cluster results %+v, want one run", res.Cluster)
	}
	r := res.Cluster.Runs[0]
	var names []string
	for _, s := range r.Segments {
		names = append(names, s.Name)
		if len(s.Nodes) != 6 {
			t.Errorf("segment %s: %d nodes, want 6", s.Name, len(s.Nodes))
		}
	}
	if !slices.Equal(names, clusterSegNames) {
		t.Errorf("segments %q, want %q", names, clusterSegNames)
	}
	if len(r.Children) != 3 {
		t.Fatalf("%d processes' lines, want 3", len(r.Children))
	}
	if s := r.segment("steady"); s == nil || s.Cold == 0 || slices.Contains(s.Judged, 0) {
		t.Errorf("steady segment %+v: want cold and judged admissions", s)
	}
	if r.KeyBytes <= 0 || r.FleetBytes <= 0 {
		t.Errorf("memory: a cold key's state %d B, the fleet's records %d B: want both sampled", r.KeyBytes, r.FleetBytes)
	}
	if r.Reshard.Slots < 30 || len(r.Reshard.Moves) != 3 {
		t.Errorf("resharding %+v: want 30 slots or more in 3 moves", r.Reshard)
	}
	if r.Kill.Node == "" || r.Kill.Replica == "" || r.Kill.Served <= 0 {
		t.Errorf("kill %+v: want a master killed and its replica serving", r.Kill)
	}
	if r.Failover.Node == "" || r.Failover.Replica == "" || r.Failover.Took <= 0 {
		t.Errorf("failover %+v: want the roles swapped", r.Failover)
	}
	if rows := r.shardRows(); len(rows) != 3 || !slices.ContainsFunc(rows, func(s shardRow) bool { return s.Fleet && s.BeatCalls > 0 }) {
		t.Errorf("shard rows %+v: want 3 masters, the fleet's with heartbeats", rows)
	}
	out := stdout.String()
	for _, want := range []string{"### Cluster: 3 processes", "| steady |", "| failover |", "kill -9 of", "CLUSTER FAILOVER on", "Steady segment, by master"} {
		if !strings.Contains(out, want) {
			t.Errorf("the tables have no %q", want)
		}
	}
}

// TestFitLine: the least-squares line of points on a line is that line,
// and of three points the textbook's.
func TestFitLine(t *testing.T) {
	f := fitLine([]float64{50, 100, 200}, []float64{110, 210, 410})
	if math.Abs(f.Slope-2) > 1e-9 || math.Abs(f.Intercept-10) > 1e-9 || math.Abs(f.at(1000)-2010) > 1e-9 {
		t.Errorf("fitLine of y = 10 + 2x: %+v", f)
	}
	// (0, 1), (1, 3), (2, 2): mean x 1, mean y 2, Sxy = 1, Sxx = 2.
	f = fitLine([]float64{0, 1, 2}, []float64{1, 3, 2})
	if f.Sxy != 1 || f.Sxx != 2 || f.Slope != 0.5 || f.Intercept != 1.5 {
		t.Errorf("fitLine((0,1), (1,3), (2,2)) = %+v, want slope 0.5, intercept 1.5", f)
	}
}

// TestBusiestFrom: the busiest window of 1 s starting in a segment counts
// fires past the segment's end, and none before its start.
func TestBusiestFrom(t *testing.T) {
	s := int64(time.Second)
	fires := []int64{0, s / 2, s, s + s/2, s + 3*s/4, 2 * s, 5 * s}
	for _, tt := range []struct {
		from, to int64
		want     int
		at       int64
	}{
		{0, 10 * s, 3, s},    // [1 s, 2 s) holds 1, 1.5, 1.75
		{0, s / 2, 2, 0},     // only windows starting at 0: 0 and 0.5
		{s / 2, s + 1, 3, s}, // from 0.5: [0.5, 1.5) holds 0.5, 1 (2); [1, 2) 3
		{3 * s, 10 * s, 1, 5 * s},
		{6 * s, 10 * s, 0, 6 * s},
	} {
		n, at := busiestFrom(fires, time.Second, tt.from, tt.to)
		if n != tt.want || at != tt.at {
			t.Errorf("busiestFrom(%d, %d) = %d at %d, want %d at %d", tt.from, tt.to, n, at, tt.want, tt.at)
		}
	}
}

// TestColdCall: over a round every cold key is called once, by one
// process, and each process's calls are spaced evenly.
func TestColdCall(t *testing.T) {
	for _, j := range []clusterJob{{Procs: 3, Keys: 30, ColdRate: 30}, {Procs: 7, Keys: 100, ColdRate: 50}, {Procs: 4, Keys: 4, ColdRate: 1}} {
		for r := range 3 {
			seen := make([]int, j.Keys)
			for i := range j.Procs {
				var prev time.Duration = -1
				for m := 0; ; m++ {
					k, at, ok := j.coldCall(i, r, m)
					if !ok {
						break
					}
					seen[k]++
					if at < time.Duration(r)*j.round() || at >= time.Duration(r+1)*j.round() {
						t.Errorf("%+v: process %d round %d call %d at %v, outside the round", j, i, r, m, at)
					}
					step := j.round() / time.Duration((j.Keys+j.Procs-1)/j.Procs)
					if d := at - prev - step; prev >= 0 && (d < -time.Microsecond || d > time.Microsecond) {
						t.Errorf("%+v: process %d round %d: calls %v apart", j, i, r, at-prev)
					}
					prev = at
				}
			}
			for k, n := range seen {
				if n != 1 {
					t.Errorf("%+v round %d: key %d called %d times", j, r, k, n)
				}
			}
		}
	}
}
