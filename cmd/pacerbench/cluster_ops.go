package main

import (
	"context"
	"fmt"
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

// clusterNodes is this program's clients to every node of the phase's
// Cluster: INFO, SLOWLOG, the resharding's commands, the failovers.
type clusterNodes struct {
	cl    *redisproc.Cluster
	addrs []string // every node, sorted
	admin map[string]*redis.Client
}

func newClusterNodes(cl *redisproc.Cluster) *clusterNodes {
	n := &clusterNodes{cl: cl, admin: map[string]*redis.Client{}}
	for _, p := range cl.Nodes {
		n.addrs = append(n.addrs, p.Addr())
		// Patient: MIGRATE of the fleet's records (a hash of a field per
		// key) and SLOWLOG GET of a busy window take a while on a loaded
		// machine; a dead node refuses at once.
		n.admin[p.Addr()] = redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: time.Second,
			ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxRetries: -1, DialerRetries: 1, PoolSize: 2})
	}
	slices.Sort(n.addrs)
	return n
}

// node is this program's client of the node at addr.
func (n *clusterNodes) node(addr string) *redis.Client { return n.admin[addr] }

func (n *clusterNodes) close() {
	for _, c := range n.admin {
		c.Close()
	}
}

// cluster returns a Cluster client on every node; the caller closes it.
func (n *clusterNodes) cluster() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: n.addrs})
}

// nodeInfo is one node's INFO at one moment.
type nodeInfo struct {
	Up         bool
	Role       string // "master" or "slave"
	CPU        float64
	Stats      map[string]cmdStat
	Clients    int64
	UsedMemory int64
	Dataset    int64 // used_memory_dataset
	Keys       int64
}

// snapshot reads every node's INFO, at once; a node that does not answer
// within 5 s is not Up.
func (n *clusterNodes) snapshot(ctx context.Context) map[string]nodeInfo {
	out := make(map[string]nodeInfo, len(n.addrs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, addr := range n.addrs {
		wg.Go(func() {
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ni := readNodeInfo(ictx, n.admin[addr])
			mu.Lock()
			out[addr] = ni
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

func readNodeInfo(ctx context.Context, c *redis.Client) nodeInfo {
	info, err := c.Info(ctx, "cpu", "commandstats", "clients", "memory", "keyspace", "replication").Result()
	if err != nil {
		return nodeInfo{}
	}
	u, err := parseUsage(info)
	if err != nil {
		return nodeInfo{}
	}
	field := func(f string) int64 { v, _ := strconv.ParseInt(redisproc.InfoField(info, f), 10, 64); return v }
	ni := nodeInfo{Up: true, Role: redisproc.InfoField(info, "role"), CPU: u.CPU, Stats: u.Stats,
		Clients: field("connected_clients"), UsedMemory: field("used_memory"), Dataset: field("used_memory_dataset")}
	if db := redisproc.InfoField(info, "db0"); db != "" {
		keys, _, _ := strings.Cut(strings.TrimPrefix(db, "keys="), ",")
		ni.Keys, _ = strconv.ParseInt(keys, 10, 64)
	}
	return ni
}

// segNode is one node over one segment.
type segNode struct {
	Addr       string
	Up         bool    // answered at the segment's end
	Role       string  // at the segment's end
	CPU        float64 // seconds per second; -1 if the node died
	EvalCalls  float64 // EVALSHA per second (every script: the keys' and the fleet's)
	EvalUsec   float64 // their µs per second (commandstats)
	Clients    int64   // at the end
	UsedMemory int64
	Dataset    int64
	Keys       int64
}

// nodeDeltas is what each node did between two snapshots d apart.
func nodeDeltas(addrs []string, a, b map[string]nodeInfo, d time.Duration) []segNode {
	var out []segNode
	for _, addr := range addrs {
		x, y := a[addr], b[addr]
		s := segNode{Addr: addr, Up: y.Up, Role: y.Role, CPU: -1, Clients: y.Clients, UsedMemory: y.UsedMemory, Dataset: y.Dataset, Keys: y.Keys}
		if x.Up && y.Up {
			sec := d.Seconds()
			s.CPU = (y.CPU - x.CPU) / sec
			for _, name := range []string{"evalsha", "eval"} {
				s.EvalCalls += float64(y.Stats[name].Calls-x.Stats[name].Calls) / sec
				s.EvalUsec += float64(y.Stats[name].Usec-x.Stats[name].Usec) / sec
			}
		}
		out = append(out, s)
	}
	return out
}

// A reshardPlan is the slots the resharding moves, and the keys and nodes
// the run judges and fails over.
type reshardPlan struct {
	masters     []redisproc.ClusterNode // by their first slot
	moves       []slotMove
	judged      []string
	judgedSlots []int
}

// A slotMove moves slots from one master to another.
type slotMove struct {
	from, to redisproc.ClusterNode
	slots    []int
}

func (p *reshardPlan) masterAddrs() []string {
	var out []string
	for _, m := range p.masters {
		out = append(out, fmt.Sprintf("%s (slots %d-%d)", m.Addr, m.Slots[0][0], m.Slots[len(m.Slots)-1][1]))
	}
	return out
}

// plan plans the run on the Cluster as created. With o the master of the
// fleet's records (fleetSlot), k the next and t the third: each master
// gives the top slots/3 of its range to the next (o to k, k to t, t to
// o), and fleetSlot moves from o to k in any case, so k holds the fleet's
// records after the resharding; it is killed later, and o fails over by
// CLUSTER FAILOVER (the master of the third judged key's slot then). The
// judged keys: one in a slot that moves from k to t (the resharding), one
// in a slot k keeps (the kill), one in a slot o keeps (the manual
// failover).
func (n *clusterNodes) plan(ctx context.Context, slots, fleetSlot int) (*reshardPlan, error) {
	nodes, err := redisproc.ClusterNodes(n.addrs[0])
	if err != nil {
		return nil, err
	}
	p := &reshardPlan{}
	for _, nd := range nodes {
		if nd.HasFlag("master") && len(nd.Slots) > 0 {
			p.masters = append(p.masters, nd)
		}
	}
	if len(p.masters) != 3 {
		return nil, fmt.Errorf("pacerbench: %d masters serve slots, want 3", len(p.masters))
	}
	slices.SortFunc(p.masters, func(a, b redisproc.ClusterNode) int { return a.Slots[0][0] - b.Slots[0][0] })
	o := slices.IndexFunc(p.masters, func(m redisproc.ClusterNode) bool { return m.Serves(fleetSlot) })
	if o < 0 {
		return nil, fmt.Errorf("pacerbench: no master serves slot %d", fleetSlot)
	}
	k := (o + 1) % 3
	per := max(slots/3, 1)
	kept := map[int]map[int]bool{} // slots each master keeps
	for i, m := range p.masters {
		var own []int
		for _, r := range m.Slots {
			for s := r[0]; s <= r[1]; s++ {
				own = append(own, s)
			}
		}
		move := slotMove{from: m, to: p.masters[(i+1)%3], slots: slices.Clone(own[max(len(own)-per, 0):])}
		if i == o && !slices.Contains(move.slots, fleetSlot) {
			move.slots = append(move.slots, fleetSlot)
		}
		kept[i] = map[int]bool{}
		for _, s := range own {
			if !slices.Contains(move.slots, s) {
				kept[i][s] = true
			}
		}
		p.moves = append(p.moves, move)
	}
	movesKT := map[int]bool{}
	for _, s := range p.moves[k].slots {
		movesKT[s] = true
	}
	for i, in := range []func(int) bool{
		func(s int) bool { return movesKT[s] },
		func(s int) bool { return kept[k][s] },
		func(s int) bool { return kept[o][s] },
	} {
		name, slot := judgedName(i, in)
		p.judged, p.judgedSlots = append(p.judged, name), append(p.judgedSlots, slot)
	}
	return p, nil
}

// judgedName returns the first name of judged key i whose slot in is true.
func judgedName(i int, in func(int) bool) (string, int) {
	for n := 0; ; n++ {
		name := fmt.Sprintf("api%d.judged%d.example.com", n, i)
		if slot := keySlot(layout.Key(reserve.DefaultKeyPrefix, name)); in(slot) {
			return name, slot
		}
	}
}

// reshard carries out p's moves, one slot at a time.
func (n *clusterNodes) reshard(ctx context.Context, p *reshardPlan, progress func(string, ...any)) (reshardStats, error) {
	var st reshardStats
	masters := p.masters
	for _, mv := range p.moves {
		keys := 0
		start := time.Now()
		from, to := mv.from, mv.to
		// Slots each shard keeps: they find its master after a failover.
		fromAnchor, toAnchor := mv.from.Slots[0][0], mv.to.Slots[0][0]
		for _, slot := range mv.slots {
			k, err := redisproc.MoveSlot(ctx, n.node, masters, from, to, slot)
			for try := 1; err != nil && try <= reshardRetries; try++ {
				// A master failed over meanwhile (a node starved past its
				// node timeout on a loaded machine): once the Cluster is
				// whole again, move the slot between the masters that now
				// hold the two shards.
				progress("cluster     resharding: slot %d from %s to %s: %v; again on the masters of now (%d)", slot, from.Addr, to.Addr, err, try)
				st.Retries = append(st.Retries, fmt.Sprintf("slot %d: %v", slot, err))
				// (Into variables of their own: a Cluster that does not
				// settle answers zero nodes, and the error must still name
				// the shards' masters as last known.)
				nowMasters, owner, nowTo, cerr := n.current(slot, toAnchor)
				if err = cerr; err != nil {
					continue
				}
				masters, to = nowMasters, nowTo
				if owner.ID == to.ID {
					break // moved already
				}
				_, nowFrom, _, cerr := n.current(fromAnchor, fromAnchor)
				if err = cerr; err == nil {
					from = nowFrom
					k, err = redisproc.MoveSlot(ctx, n.node, masters, owner, to, slot)
				}
			}
			if err != nil {
				return st, fmt.Errorf("moving slot %d from %s to %s: %w", slot, from.Addr, to.Addr, err)
			}
			keys += k
		}
		st.Slots += len(mv.slots)
		st.Keys += keys
		st.Moves = append(st.Moves, fmt.Sprintf("%s to %s: %d slots, %d keys, %v", mv.from.Addr, mv.to.Addr, len(mv.slots), keys, time.Since(start).Round(time.Millisecond)))
		progress("cluster     resharding: %s", st.Moves[len(st.Moves)-1])
	}
	return st, nil
}

// reshardRetries is how many times a slot's move starts again after it
// failed.
const reshardRetries = 5

// current waits until every live node reports cluster_state:ok, then
// returns the masters serving slots now, the master of slot and the master
// of anchor.
func (n *clusterNodes) current(slot, anchor int) (masters []redisproc.ClusterNode, from, to redisproc.ClusterNode, err error) {
	err = redisproc.WaitUntil(clusterSettle, 100*time.Millisecond, func() string {
		masters = nil
		var nodes []redisproc.ClusterNode
		for _, addr := range n.addrs {
			if p := n.cl.Node(addr); p == nil || p.Stopped() {
				continue
			}
			var err error
			if nodes, err = redisproc.ClusterNodes(addr); err != nil {
				return addr + ": CLUSTER NODES: " + err.Error()
			}
			if why := n.clusterState(addr); why != "" {
				return why
			}
		}
		var okFrom, okTo bool
		for _, nd := range nodes {
			if !nd.HasFlag("master") || len(nd.Slots) == 0 || nd.Unhealthy() != "" {
				continue
			}
			masters = append(masters, nd)
			if nd.Serves(slot) {
				from, okFrom = nd, true
			}
			if nd.Serves(anchor) {
				to, okTo = nd, true
			}
		}
		if !okFrom || !okTo {
			return fmt.Sprintf("no healthy master serves slot %d or %d", slot, anchor)
		}
		return ""
	})
	return masters, from, to, err
}

// clusterState returns why the node at addr does not report
// cluster_state:ok, or "".
func (n *clusterNodes) clusterState(addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := n.admin[addr].ClusterInfo(ctx).Result()
	if err != nil {
		return addr + ": " + err.Error()
	}
	if st := redisproc.InfoField(info, "cluster_state"); st != "ok" {
		return addr + ": cluster_state " + st
	}
	return ""
}

// heartbeats logs every command of every master in SLOWLOG for d and
// returns each master's heartbeat.lua EVALSHAs (beats.go).
func (n *clusterNodes) heartbeats(ctx context.Context, d time.Duration) (map[string]beatStats, error) {
	const logLen = 500_000
	var masters []string
	for _, addr := range n.addrs {
		if r, err := redisproc.Role(addr); err == nil && r == "master" {
			masters = append(masters, addr)
		}
	}
	for _, addr := range masters {
		restore, err := slowlogAll(ctx, n.admin[addr], logLen)
		if err != nil {
			return nil, err
		}
		defer restore()
	}
	time.Sleep(d)
	out := map[string]beatStats{}
	for _, addr := range masters {
		st, err := heartbeatCalls(ctx, "redis://"+addr+"/0", logLen)
		if err != nil {
			return nil, err
		}
		out[addr] = st
	}
	return out, nil
}

// kill kills the master of slot with SIGKILL, waits until its replica
// serves it, and then until every process that switched to local pacing
// since is back on Redis.
func (n *clusterNodes) kill(ctx context.Context, cl *redisproc.Cluster, slot int, f *fleetproc.Fleet) (killStats, error) {
	owner, err := cl.SlotOwner(slot)
	if err != nil {
		return killStats{}, err
	}
	st := killStats{Node: owner.Addr, Replica: n.replicaOf(owner)}
	at := time.Now()
	cl.Node(owner.Addr).Stop()
	served, err := cl.WaitSlotServed(slot, clusterSettle)
	if err != nil {
		return st, err
	}
	st.Served = time.Since(at)
	if served != st.Replica {
		st.Replica = served
	}
	st.Switched, st.Back, st.NotBack = awaitBack(f, at, clusterSettle)
	return st, nil
}

// failover makes master's replica take over with CLUSTER FAILOVER (the
// manual failover: the master stops its clients and hands over once its
// replica has caught up), waits until ROLE shows the roles swapped, and
// then until every process that switched to local pacing since is back.
func (n *clusterNodes) failover(ctx context.Context, master redisproc.ClusterNode, f *fleetproc.Fleet) (failoverStats, error) {
	st := failoverStats{Node: master.Addr}
	if err := redisproc.WaitUntil(clusterSettle, 100*time.Millisecond, func() string {
		if st.Replica = n.replicaOf(master); st.Replica == "" {
			return "master " + master.Addr + " has no healthy replica"
		}
		return ""
	}); err != nil {
		return st, err
	}
	// The replica refuses while it sees its master failing: after the
	// kill, or a node starved on a loaded machine past its node timeout.
	err := redisproc.WaitUntil(clusterSettle, 100*time.Millisecond, func() string {
		nodes, err := redisproc.ClusterNodes(st.Replica)
		if err != nil {
			return st.Replica + ": CLUSTER NODES: " + err.Error()
		}
		for _, nd := range nodes {
			if bad := nd.Unhealthy(); bad != "" && !n.cl.Node(nd.Addr).Stopped() {
				return fmt.Sprintf("%s sees %s flagged %s", st.Replica, nd.Addr, bad)
			}
		}
		return ""
	})
	if err != nil {
		return st, err
	}
	at := time.Now()
	if err := n.admin[st.Replica].Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return st, fmt.Errorf("CLUSTER FAILOVER on %s: %w", st.Replica, err)
	}
	err = redisproc.WaitUntil(clusterSettle, 50*time.Millisecond, func() string {
		if r, err := redisproc.Role(st.Replica); err != nil || r != "master" {
			return fmt.Sprintf("%s has role %q (%v)", st.Replica, r, err)
		}
		if r, err := redisproc.Role(master.Addr); err != nil || r != "slave" {
			return fmt.Sprintf("%s has role %q (%v)", master.Addr, r, err)
		}
		return ""
	})
	if err != nil {
		return st, fmt.Errorf("CLUSTER FAILOVER on %s: %w", st.Replica, err)
	}
	st.Took = time.Since(at)
	st.Switched, st.Back, st.NotBack = awaitBack(f, at, clusterSettle)
	return st, nil
}

// replicaOf returns the address of a live replica of master, or "".
func (n *clusterNodes) replicaOf(master redisproc.ClusterNode) string {
	for _, addr := range n.addrs {
		if p := n.cl.Node(addr); p == nil || p.Stopped() {
			continue
		}
		nodes, err := redisproc.ClusterNodes(addr)
		if err != nil {
			continue
		}
		for _, nd := range nodes {
			if nd.Master == master.ID && nd.Unhealthy() == "" {
				if p := n.cl.Node(nd.Addr); p != nil && !p.Stopped() {
					return nd.Addr
				}
			}
		}
		return ""
	}
	return ""
}

// awaitBack waits, up to limit, until every process of f that switched to
// local pacing since since is back on Redis, and stays so for half a second.
// It returns how many switched, when the last came back (since since), and
// how many were not back at the end.
func awaitBack(f *fleetproc.Fleet, since time.Time, limit time.Duration) (switched int, back time.Duration, notBack int) {
	deadline := since.Add(limit)
	stable := time.Time{}
	for {
		switched, notBack, back = 0, 0, 0
		for _, ch := range f.Children() {
			went, last, lastAt := false, "", int64(0)
			for _, line := range ch.Lines() {
				if !strings.HasPrefix(line, "f ") {
					continue
				}
				fs := strings.Fields(line)
				at, _ := strconv.ParseInt(fs[1], 10, 64)
				if at < since.UnixNano() || len(fs) < 3 {
					continue
				}
				last, lastAt = fs[2], at
				if fs[2] == "1" {
					went = true
				}
			}
			if went {
				switched++
				if last == "1" {
					notBack++
				} else {
					back = max(back, time.Duration(lastAt-since.UnixNano()))
				}
			}
		}
		switch {
		case notBack > 0:
			stable = time.Time{}
		case stable.IsZero():
			stable = time.Now()
		case time.Since(stable) >= 500*time.Millisecond:
			return switched, back, 0
		}
		if time.Now().After(deadline) {
			return switched, back, notBack
		}
		time.Sleep(250 * time.Millisecond)
	}
}
