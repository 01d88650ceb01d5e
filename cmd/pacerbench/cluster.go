package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	fleetproc "github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
)

// The cluster phase (issue 43, item 4): a fleet of processes, each a
// Limiter on a Redis Cluster client as README's quick start builds it,
// measured on a Cluster of 3 masters and 3 replicas started for it, through
// a live resharding and two failovers.
//
// Each process (this program re-run, cluster_child.go) calls two kinds of
// keys. The cold keys, c.ClusterKeys host names, are called c.ClusterRate
// times a second by the whole fleet, each key once a round (keys / rate
// seconds) by another process each round, at a limit of twice that: no
// call waits, and the keys spread over every shard. The judged keys, one
// on each of three masters chosen for the faults below, are called by a
// goroutine of every process in a loop of Wait: at their limit
// (clusterJudgedLimit). Every process prints the instant each of their
// calls fires, and the phase counts them as the provider would: every
// window of 1 s over the run, transitions and faults included.
//
// The run, for each fleet size of c.ClusterProcs, on a new Cluster:
//
//	warm       c.ClusterSeg: the fleet starts, heartbeats and reports
//	           settle; the judged keys' callers begin halfway through (a
//	           fleet that grows while some members look held stretched a
//	           judged key's schedule for minutes: see docs/sizing.md)
//	steady     c.ClusterSeg: each node's CPU (INFO cpu), commands (INFO
//	           commandstats), connections, memory and keys; each process's CPU
//	heartbeats c.ClusterSeg / 2, SLOWLOG (slower-than 0) on every master:
//	           each heartbeat.lua EVALSHA's own time
//	reshard    c.ClusterSlots slots move while the fleet runs, a third from
//	           each master to the next (the top of its range), the slot of
//	           the fleet's records among them, as redis-cli --cluster
//	           reshard moves a slot (clusterMove); then c.ClusterSeg / 2
//	kill       kill -9 of the master of the fleet's records, until its
//	           replica serves the slot and every process that paced
//	           locally is back on Redis; then c.ClusterSeg / 2
//	failover   CLUSTER FAILOVER on another master's replica (the manual,
//	           coordinated failover), until the roles have swapped; then
//	           c.ClusterSeg / 2
//
// Each segment's figures are printed: errors returned to callers, per
// process; the busiest second of each judged key; switches to local pacing
// and back; failed Redis calls by operation; each node's CPU and commands.
// Several fleet sizes give a line per cost, fitted against the size
// (cluster_fit.go).

// clusterJudgedLimit is the judged keys' limit: the busiest second may
// hold at most Rate + Burst calls.
var clusterJudgedLimit = limit{Rate: 50, Burst: 5}

// clusterJudgedQuick is the smoke run's.
var clusterJudgedQuick = limit{Rate: 20, Burst: 2}

// clusterWaiters is each process's goroutines per judged key.
const clusterWaiters = 1

// clusterKeepEnv, when set to a directory, has the phase write each
// child's lines there (cluster-<procs>-<index>.lines, its stderr after
// them), and the run's segments and faults (cluster-<procs>.times).
const clusterKeepEnv = "PACERBENCH_CLUSTER_KEEP"

// clusterStartGap is the time between two processes' starts: a rolling
// start. (All at once, 200 processes' first heartbeats queued on the
// fleet's shard past their CallTimeout on a 2-core machine, and New failed
// with RequireRedis.)
const clusterStartGap = 50 * time.Millisecond

// clusterSettle is how long after a fault's end the phase waits, at most,
// for the fleet to be back on Redis.
const clusterSettle = time.Minute

// clusterRun is one fleet size's run.
type clusterRun struct {
	Procs       int
	Format      int // the state format the fleet writes (-format, set on the Cluster before it starts)
	Keys        int
	ColdRate    float64
	ColdLimit   limit
	Judged      []string
	JudgedSlots []int
	JudgedLimit limit
	NodeTimeout time.Duration
	FIFO        int // the nodes' real-time priority (-fifo); 0: none
	FleetSlot   int
	Masters     []shardRange // the masters as created

	Machine   machineLoad
	OwnCPU    time.Duration // this program, its children and servers, over the run
	StartTook time.Duration // from the first child started to the last ready

	Idle     []nodeRate // each node's CPU with no client (s/s)
	Segments []clusterSeg
	Beats    map[string]beatStats // by master, over the heartbeats segment
	BeatsFor time.Duration

	Fleet    []fleetSample // the fleet's records, once a second
	Reshard  reshardStats
	Kill     killStats
	Failover failoverStats

	// Memory, at the end of the steady segment.
	KeyBytes   int64 // MEMORY USAGE of a cold key's state
	FleetBytes int64 // MEMORY USAGE of the fleet's records
	Reported   int64 // policies the fleet's hash holds

	Children []clusterProc // each child's lines, parsed
	Stderr   string        // the first child stderr that is not empty, shortened
}

// shardRange is a master and the slots it held as created.
type shardRange struct {
	Addr   string
	Lo, Hi int
}

// nodeRate is a node's CPU in a window.
type nodeRate struct {
	Addr string
	CPU  float64 // seconds per second
}

// reshardStats is what the resharding moved.
type reshardStats struct {
	Slots, Keys int
	Moves       []string // "A -> B: n slots"
	Took        time.Duration
	Retries     []string // slots whose move started again, and why
}

// killStats is the kill -9 of a master.
type killStats struct {
	Node, Replica string
	Served        time.Duration // until every live node agreed the replica serves the slot
	Switched      int           // processes that switched to local pacing after the kill
	Back          time.Duration // until the last of them was back on Redis
	NotBack       int           // those not back when the phase gave up waiting
}

// failoverStats is the manual failover.
type failoverStats struct {
	Node, Replica string
	Took          time.Duration // until ROLE showed the roles swapped
	Switched      int
	Back          time.Duration
	NotBack       int
}

// clusterResults is the cluster phase.
type clusterResults struct {
	Runs []*clusterRun
	// Failed is the fleet size whose run failed (0: none), and why: the
	// phase stops there, and reports the runs before it.
	Failed    int
	FailedErr string
}

// runCluster runs the cluster phase, a run per fleet size. A run that
// fails (a process that could not start, a Cluster that would not form)
// ends the phase: the runs before it are reported, and the failure with
// them; an error only if the first failed.
func (b *bench) runCluster(ctx context.Context, progress func(string, ...any)) (*clusterResults, error) {
	res := &clusterResults{}
	for _, n := range b.cfg.ClusterProcs {
		r, err := b.clusterRun(ctx, n, progress)
		if err != nil && len(res.Runs) == 0 {
			return nil, fmt.Errorf("cluster phase, %d processes: %w", n, err)
		}
		if err != nil {
			res.Failed, res.FailedErr = n, shorten(strings.Join(strings.Fields(err.Error()), " "), 1000)
			progress("cluster     %d processes: the run failed: %v", n, err)
			break
		}
		res.Runs = append(res.Runs, r)
	}
	return res, nil
}

// clusterSegNames are the segments of a run, in order.
var clusterSegNames = []string{"warm", "steady", "heartbeats", "reshard", "kill", "failover"}

// clusterRun runs a fleet of procs processes on a new Cluster.
func (b *bench) clusterRun(ctx context.Context, procs int, progress func(string, ...any)) (*clusterRun, error) {
	c := b.cfg
	r := &clusterRun{Procs: procs, Format: c.Format, Keys: c.ClusterKeys, ColdRate: c.ClusterRate, NodeTimeout: c.ClusterNodeTimeout, FIFO: c.FIFO,
		JudgedLimit: clusterJudgedLimit, FleetSlot: keySlot(layout.FleetKeys(reserve.DefaultKeyPrefix)[0])}
	if c.Quick {
		r.JudgedLimit = clusterJudgedQuick
	}
	// Each key once a round, at twice that: no call waits.
	r.ColdLimit = limit{Rate: 2 * c.ClusterRate / float64(c.ClusterKeys), Burst: 1}
	// The directory for the children's lines, made first: a run of
	// minutes is not lost to a directory that does not exist at its end.
	if keep := os.Getenv(clusterKeepEnv); keep != "" {
		if err := os.MkdirAll(keep, 0o755); err != nil {
			return nil, fmt.Errorf("%s: %w", clusterKeepEnv, err)
		}
	}
	r.Machine = startMachineLoad()
	own0 := ownCPUTime()

	cl, err := redisproc.StartCluster(redisproc.ClusterSpec{Masters: 3, Replicas: 1, NodeTimeout: c.ClusterNodeTimeout, FIFO: c.FIFO})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	nodes := newClusterNodes(cl)
	defer nodes.close()
	plan, err := nodes.plan(ctx, c.ClusterSlots, r.FleetSlot)
	if err != nil {
		return nil, err
	}
	r.Judged, r.JudgedSlots = plan.judged, plan.judgedSlots
	// The fleet's state format, as `pacer format` sets it (-format; 2 is
	// no setting): the Limiters read it at their first heartbeat.
	if c.Format != 2 {
		fc := nodes.cluster()
		err := fc.Set(ctx, layout.FormatKey(reserve.DefaultKeyPrefix), strconv.Itoa(c.Format), 0).Err()
		fc.Close()
		if err != nil {
			return nil, fmt.Errorf("the fleet's state format: %w", err)
		}
	}
	for _, m := range plan.masters {
		r.Masters = append(r.Masters, shardRange{m.Addr, m.Slots[0][0], m.Slots[len(m.Slots)-1][1]})
	}
	progress("cluster     %d processes: masters %s; judged keys %q (slots %v); the fleet's records in slot %d",
		procs, strings.Join(plan.masterAddrs(), ", "), r.Judged, r.JudgedSlots, r.FleetSlot)

	// The idle Cluster: each node's own background work.
	idle := max(c.ClusterSeg/4, 500*time.Millisecond)
	s0 := nodes.snapshot(ctx)
	time.Sleep(idle)
	s1 := nodes.snapshot(ctx)
	for _, addr := range nodes.addrs {
		r.Idle = append(r.Idle, nodeRate{addr, (s1[addr].CPU - s0[addr].CPU) / idle.Seconds()})
	}

	job := clusterJob{Seeds: nodes.addrs, Procs: procs, Keys: c.ClusterKeys, ColdRate: c.ClusterRate, ColdLimit: r.ColdLimit,
		Judged: r.Judged, JudgedLimit: r.JudgedLimit, Waiters: clusterWaiters, StartGap: clusterStartGap,
		JudgedAfter: c.ClusterSeg / 2}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := time.Now()
	f, err := fleetproc.Start(fctx, fleetproc.Options{Env: clusterChildEnv, Spec: job, Procs: procs, Stdin: true})
	if err != nil {
		return nil, err
	}
	defer func() { cancel(); _ = f.Wait() }()
	if err := awaitReadyWithin(ctx, f, 30*time.Second+time.Duration(procs)*(300*time.Millisecond+clusterStartGap)); err != nil {
		return nil, err
	}
	r.StartTook = time.Since(started)
	progress("cluster     %d processes ready after %v", procs, r.StartTook.Round(time.Millisecond))
	start := time.Now().Add(100 * time.Millisecond)
	for _, ch := range f.Children() {
		fmt.Fprintf(ch.Stdin, "%d\n", start.UnixNano())
	}
	time.Sleep(time.Until(start))

	watchClient := nodes.cluster()
	defer watchClient.Close()
	watch := watchFleetRecords(watchClient)
	seg := &segmenter{nodes: nodes, at: start, snap: nodes.snapshot(ctx)}
	next := func(name string) {
		seg.close(ctx, name)
		progress("cluster     %d processes: %s done after %v", procs, name, time.Since(start).Round(time.Second))
	}

	time.Sleep(c.ClusterSeg)
	next("warm")

	time.Sleep(c.ClusterSeg)
	if err := r.sampleMemory(ctx, nodes); err != nil {
		return nil, err
	}
	next("steady")

	r.BeatsFor = max(c.ClusterSeg/2, 2*heartbeatEvery)
	if r.Beats, err = nodes.heartbeats(ctx, r.BeatsFor); err != nil {
		return nil, err
	}
	next("heartbeats")

	t0 := time.Now()
	if r.Reshard, err = nodes.reshard(ctx, plan, progress); err != nil {
		return nil, err
	}
	r.Reshard.Took = time.Since(t0)
	time.Sleep(c.ClusterSeg / 2)
	next("reshard")

	if r.Kill, err = nodes.kill(ctx, cl, r.FleetSlot, f); err != nil {
		return nil, err
	}
	time.Sleep(c.ClusterSeg / 2)
	next("kill")

	// The master of the third judged key's shard now (a master may have
	// failed over since the plan, on its own).
	if _, _, shard, err := nodes.current(r.JudgedSlots[2], r.JudgedSlots[2]); err != nil {
		return nil, err
	} else if r.Failover, err = nodes.failover(ctx, shard, f); err != nil {
		return nil, err
	}
	time.Sleep(c.ClusterSeg / 2)
	next("failover")

	end := time.Now()
	r.Fleet = watch.end()
	for _, ch := range f.Children() {
		fmt.Fprintf(ch.Stdin, "%d\n", end.UnixNano())
		ch.Stdin.Close()
	}
	if err := f.Wait(); err != nil {
		return nil, err
	}
	keep := os.Getenv(clusterKeepEnv)
	for _, ch := range f.Children() {
		if keep != "" {
			name := filepath.Join(keep, fmt.Sprintf("cluster-%d-%d.lines", procs, ch.Index))
			if err := os.WriteFile(name, []byte(strings.Join(ch.Lines(), "\n")+"\n"+ch.Stderr()), 0o644); err != nil {
				return nil, err
			}
		}
		p, err := readClusterChild(ch.Lines(), len(r.Judged))
		if err != nil {
			return nil, fmt.Errorf("process %d: %w\n%s", ch.Index, err, ch.Stderr())
		}
		r.Children = append(r.Children, p)
		if r.Stderr == "" && strings.TrimSpace(ch.Stderr()) != "" {
			r.Stderr = shorten(strings.TrimSpace(ch.Stderr()), 2000)
		}
	}
	r.Segments = seg.segs
	if keep != "" {
		var t strings.Builder
		fmt.Fprintf(&t, "start %d\n", start.UnixNano())
		for _, s := range r.Segments {
			fmt.Fprintf(&t, "segment %s %d %d\n", s.Name, s.From.UnixNano(), s.To.UnixNano())
		}
		if err := os.WriteFile(filepath.Join(keep, fmt.Sprintf("cluster-%d.times", procs)), []byte(t.String()), 0o644); err != nil {
			return nil, err
		}
	}
	r.judge()
	nodes.close()
	cl.Close() // its CPU time counts as this run's
	r.OwnCPU = ownCPUTime() - own0
	r.Machine = r.Machine.finish()
	return r, nil
}

// shorten returns s cut to n bytes at most.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + " ..."
}

// segmenter cuts a run into segments, a snapshot of every node at each
// boundary.
type segmenter struct {
	nodes *clusterNodes
	at    time.Time
	snap  map[string]nodeInfo
	segs  []clusterSeg
}

// close ends the current segment, named name, now.
func (s *segmenter) close(ctx context.Context, name string) {
	now, snap := time.Now(), s.nodes.snapshot(ctx)
	s.segs = append(s.segs, clusterSeg{Name: name, From: s.at, To: now, Nodes: nodeDeltas(s.nodes.addrs, s.snap, snap, now.Sub(s.at))})
	s.at, s.snap = now, snap
}

// sampleMemory reads MEMORY USAGE of a cold key's state and of the fleet's
// records, and the policies reported. The cold key is one a SCAN of a
// master finds (coldStatePattern): asking for the keys by name, up to
// 1,000 of which had expired or were not called yet, took 22 minutes of
// round trips beside 200 busy processes on a 2-core machine.
func (r *clusterRun) sampleMemory(ctx context.Context, nodes *clusterNodes) error {
	rdb := nodes.cluster()
	defer rdb.Close()
	for _, k := range layout.FleetKeys(reserve.DefaultKeyPrefix) {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		if err == nil {
			r.FleetBytes += n
		}
	}
	r.Reported, _ = rdb.HLen(ctx, layout.Policies(reserve.DefaultKeyPrefix)).Result()
	var found []string
	var mu sync.Mutex
	_ = rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, _, err := m.Scan(ctx, 0, coldStatePattern, 1000).Result()
		if err == nil && len(keys) > 0 {
			mu.Lock()
			found = append(found, keys[0])
			mu.Unlock()
		}
		return nil
	})
	for _, k := range found {
		if n, err := rdb.MemoryUsage(ctx, k).Result(); err == nil && n > 0 {
			r.KeyBytes = n
			return nil
		}
	}
	return nil
}

// coldStatePattern matches the state of the cold keys named "www.site<i>.com"
// (hostName), and no other record of theirs (":shadow" and the like follow
// the brace) nor a judged key's.
var coldStatePattern = strings.TrimSuffix(layout.Key(reserve.DefaultKeyPrefix, "www.site"), "}") + "*}"

// clusterProcsFlag parses -cluster-procs: fleet sizes, comma-separated.
func clusterProcsFlag(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("pacerbench: -cluster-procs %q: want fleet sizes of 1 or more, comma-separated", s)
		}
		out = append(out, n)
	}
	if !slices.IsSorted(out) {
		return nil, fmt.Errorf("pacerbench: -cluster-procs %q: want the sizes in increasing order", s)
	}
	return out, nil
}
