package combo

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// A run on a Redis Cluster (Config.Cluster; pacercombo -cluster): the same
// seeds, played by the same fleet, operator and judges on a Cluster of
// clusterMasters masters (internal/redisproc; for two seeds in five with
// a replica each, which takes over a master that fails), each
// process's Limiter on a redis.ClusterClient with go-redis's defaults, as
// a Cluster user builds it (its script calls pipelined per master). The
// seven keys and the fleet's records fall on the masters by their hash
// slots (their hash tags are the keys' names and "limiters", whatever the
// prefix: the same masters in every run, master 1 serving slot 0). Each
// Redis fault strikes one master, the others serving on: restarted empty
// (the same node, its slots, no data: as one restarted on its own disk
// without persistence), frozen, out of memory, or paused. A resharding
// (FaultReshard) moves a master's slots of the run's keys and records to
// the next master under load, and a failover (FaultFailover) hands a
// master's slots to its replica. What the run leaves out, and why, is
// ForCluster's.

// clusterMasters is the masters of a run on a Cluster.
const clusterMasters = 3

// ForCluster returns sc as a run on a Cluster of masters plays it:
//
//   - each Redis fault strikes one master (Event.Node), drawn from a stream
//     of its own, so that the rest of the timeline is sc's;
//   - no slow Redis: its proxies stand between the fleet and one server,
//     and a Cluster client follows the addresses the masters give it;
//   - no Python process: the Python client (clients/python) has no
//     Cluster support; Go processes run in its slots;
//
// and it draws, each from a stream of its own, up to two reshardings of a
// master each (FaultReshard), and for two seeds in five a replica of each
// master (Replicas), with up to two failovers (FaultFailover): a master
// frozen or stopped past the node timeout (1 s) then fails over too.
// Reshardings and failovers keep clear of the Redis faults by faultGap,
// and of each other by 1 s.
func (sc Scenario) ForCluster(masters int) Scenario {
	rng := rand.New(rand.NewPCG(sc.Seed, 0x636c7573746572)) // "cluster"
	sc.Masters = masters
	sc.Python = nil
	events := make([]Event, 0, len(sc.Events))
	for _, e := range sc.Events {
		if e.Kind == FaultSlow {
			continue
		}
		if e.Kind.IsRedisFault() {
			e.Node = 1 + rng.IntN(masters)
		}
		events = append(events, e)
	}
	sc.Events = events
	// clusterOp adds an event of kind at a time clear of the Redis faults
	// and the other reshardings and failovers, if it finds one.
	clusterOp := func(rng *rand.Rand, kind Kind) {
		for range 20 { // a few tries to find room
			at := warmup + time.Duration(rng.Int64N(int64(sc.Length-settle-warmup)))
			if sc.redisFaultIn(at-faultGap, at+faultGap) || slices.ContainsFunc(sc.Events, func(e Event) bool {
				return (e.Kind == FaultReshard || e.Kind == FaultFailover) && (e.At-at).Abs() < time.Second
			}) {
				continue
			}
			sc.Events = append(sc.Events, Event{At: at, Kind: kind, Node: 1 + rng.IntN(masters)})
			return
		}
	}
	// The failovers first: the rarer, they find room the more often.
	if rf := rand.New(rand.NewPCG(sc.Seed, 0x7265706c696361)); rf.IntN(5) < 2 { // "replica"
		sc.Replicas = 1
		for range pick(rf, []int{0, 1, 2}, []int{20, 50, 30}) {
			clusterOp(rf, FaultFailover)
		}
	}
	rs := rand.New(rand.NewPCG(sc.Seed, 0x72657368617264)) // "reshard"
	for range pick(rs, []int{0, 1, 2}, []int{30, 50, 20}) {
		clusterOp(rs, FaultReshard)
	}
	slices.SortStableFunc(sc.Events, func(a, b Event) int { return int(a.At - b.At) })
	return sc
}

// mastersBySlot returns c's masters' addresses, master 1 first: by the
// lowest slot each serves (Event.Node), and those slots (the masters'
// anchors: injector).
func mastersBySlot(c *redisproc.Cluster) (addrs []string, anchors []int, err error) {
	nodes, err := c.MastersBySlot()
	if err != nil {
		return nil, nil, err
	}
	for _, n := range nodes {
		addrs, anchors = append(addrs, n.Addr), append(anchors, n.LowestSlot())
	}
	return addrs, anchors, nil
}

// redisAt is where the run's Redis is: one redis-server's address, or a
// Cluster's masters'.
type redisAt struct {
	addrs   []string
	cluster bool
}

// client returns a client of the run's Redis with o's timeouts, retries
// and pool: a ClusterClient on a Cluster.
func (at redisAt) client(o redis.UniversalOptions) redis.UniversalClient {
	o.Addrs, o.IsClusterMode = at.addrs, at.cluster
	return redis.NewUniversalClient(&o)
}

// fleetRecords names the fleet's records ({limiters}) in a placement.
const fleetRecords = "{limiters}"

// placement returns the master (1 to len(masters), as Event.Node) whose
// slots hold the fleet's records (fleetRecords) and each key the fleet
// calls, under prefix.
func placement(c *redisproc.Cluster, masters []string, prefix string) (map[string]int, error) {
	out := map[string]int{}
	for _, name := range placed() {
		slot, err := c.KeySlot(placedKey(prefix, name))
		if err != nil {
			return nil, err
		}
		owner, err := c.SlotOwner(slot)
		if err != nil {
			return nil, err
		}
		i := slices.Index(masters, owner.Addr)
		if i < 0 {
			return nil, fmt.Errorf("the owner %s of slot %d (%s) is not a master %v", owner.Addr, slot, name, masters)
		}
		out[name] = i + 1
	}
	return out, nil
}

// placed names what a placement places: the keys the fleet calls, and the
// fleet's records.
func placed() []string { return append(slices.Clone(Keys), KeySeats, fleetRecords) }

// placedKey is name's Redis key under prefix (its hash slot's).
func placedKey(prefix, name string) string {
	if name == fleetRecords {
		return layout.FleetKeys(prefix)[0]
	}
	return layout.Key(prefix, name)
}

// reshard moves the slots of the run's keys and records (placed) that
// master e.Node serves now to the next master, one slot at a time, as
// redis-cli --cluster reshard does, while the fleet calls. It returns
// what moved.
func (in *injector) reshard(e Event, prefix string) (string, error) {
	if in.cluster == nil {
		return "", fmt.Errorf("%s on one redis-server", e.Kind)
	}
	in.topology.Lock()
	defer in.topology.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), clusterHealTimeout)
	defer cancel()
	src, err := in.master(e)
	if err != nil {
		return "", err
	}
	next := e.Node%len(in.anchors) + 1
	dst, err := in.master(Event{Kind: e.Kind, Node: next})
	if err != nil {
		return "", err
	}
	// Patient clients: a MIGRATE on a loaded machine outlasts the
	// injector's 2 s, and one cut short leaves its slot half moved.
	clients := map[string]*redis.Client{}
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	node := func(addr string) *redis.Client {
		if clients[addr] == nil {
			clients[addr] = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second,
				ReadTimeout: clusterHealTimeout, WriteTimeout: clusterHealTimeout})
		}
		return clients[addr]
	}
	var moved []string
	done := map[int]bool{}
	for _, name := range placed() {
		slot, err := in.cluster.KeySlot(placedKey(prefix, name))
		if err != nil {
			return strings.Join(moved, ", "), err
		}
		if done[slot] || !src.Serves(slot) {
			continue // moved already, or another master's
		}
		done[slot] = true
		if slices.Contains(in.anchors, slot) {
			return strings.Join(moved, ", "), fmt.Errorf("%s: %s's slot %d is a master's anchor", e.Kind, name, slot)
		}
		nodes, err := in.cluster.MastersBySlot()
		if err != nil {
			return strings.Join(moved, ", "), err
		}
		keys, err := redisproc.MoveSlot(ctx, node, nodes, src, dst, slot)
		if err != nil {
			return strings.Join(moved, ", "), fmt.Errorf("%s: %s's slot %d: %w", e.Kind, name, slot, err)
		}
		moved = append(moved, fmt.Sprintf("%s's slot %d (%d keys)", name, slot, keys))
	}
	if len(moved) == 0 {
		return fmt.Sprintf("nothing of the run's on master %d", e.Node), nil
	}
	return fmt.Sprintf("to master %d: %s", next, strings.Join(moved, ", ")), nil
}

// failover has a replica of master e.Node take its place, as an operator's
// CLUSTER FAILOVER does (the master hands over its slots once the replica
// has caught up), and waits until it serves the master's slots. It
// returns the new master's address.
func (in *injector) failover(e Event) (string, error) {
	if in.cluster == nil {
		return "", fmt.Errorf("%s on one redis-server", e.Kind)
	}
	in.topology.Lock()
	defer in.topology.Unlock()
	m, err := in.master(e)
	if err != nil {
		return "", err
	}
	// A master restarted empty just before (the timeline runs a fault's
	// next step once the heal has returned) has a replica that is
	// syncing again, or that the cluster still flags: wait until one is
	// healthy and in sync, as an operator would, rather than fail.
	var replica string
	err = redisproc.WaitUntil(clusterHealTimeout, 20*time.Millisecond, func() string {
		nodes, err := redisproc.ClusterNodes(m.Addr)
		if err != nil {
			return err.Error()
		}
		i := slices.IndexFunc(nodes, func(n redisproc.ClusterNode) bool { return n.Master == m.ID && n.Unhealthy() == "" })
		if i < 0 {
			return "no healthy replica"
		}
		if why := inSync(in.rdb[nodes[i].Addr]); why != "" {
			return nodes[i].Addr + ": " + why
		}
		replica = nodes[i].Addr
		return ""
	})
	if err != nil {
		return "", fmt.Errorf("%s: master %d (%s): %w", e.Kind, e.Node, m.Addr, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := in.rdb[replica].Do(ctx, "CLUSTER", "FAILOVER").Err(); err != nil {
		return "", fmt.Errorf("%s: CLUSTER FAILOVER on %s: %w", e.Kind, replica, err)
	}
	// CLUSTER FAILOVER answers before the replica takes over: wait until
	// it serves the master's slots, then until every node agrees.
	err = redisproc.WaitUntil(clusterHealTimeout, 20*time.Millisecond, func() string {
		owner, err := in.cluster.SlotOwner(in.anchors[e.Node-1])
		switch {
		case err != nil:
			return err.Error()
		case owner.Addr != replica:
			return "slot " + fmt.Sprint(in.anchors[e.Node-1]) + " still served by " + owner.Addr
		}
		return ""
	})
	if err != nil {
		return "", fmt.Errorf("%s: master %d's replica %s: %w", e.Kind, e.Node, replica, err)
	}
	owner, err := in.cluster.WaitSlotServed(in.anchors[e.Node-1], clusterHealTimeout)
	if err != nil {
		return "", err
	}
	if owner != replica {
		return "", fmt.Errorf("%s: master %d's slots went to %s, not its replica %s", e.Kind, e.Node, owner, replica)
	}
	return fmt.Sprintf("replica %s took over from %s", owner, m.Addr), nil
}

// inSync returns why the replica rdb is not in sync with its master ("" if
// it is): its link is down, or a full sync is under way.
func inSync(rdb *redis.Client) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return err.Error()
	}
	if !strings.Contains(info, "master_link_status:up") {
		return "link to its master down"
	}
	if strings.Contains(info, "master_sync_in_progress:1") {
		return "syncing"
	}
	return ""
}

// placementText is a placement, a master a line: "master 1: {limiters},
// sliding.example".
func placementText(p map[string]int, masters int) []string {
	var lines []string
	for m := 1; m <= masters; m++ {
		var on []string
		for _, name := range placed() {
			if p[name] == m {
				on = append(on, name)
			}
		}
		lines = append(lines, fmt.Sprintf("master %d: %s", m, strings.Join(on, ", ")))
	}
	return lines
}

// clusterHealTimeout bounds how long a healed fault waits for every node
// to report the Cluster whole again.
const clusterHealTimeout = 20 * time.Second
