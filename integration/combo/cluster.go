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
// clusterMasters masters without replicas (internal/redisproc), each
// process's Limiter on a redis.ClusterClient with go-redis's defaults, as
// a Cluster user builds it (its script calls pipelined per master). The
// seven keys and the fleet's records fall on the masters by their hash
// slots (their hash tags are the keys' names and "limiters", whatever the
// prefix: the same masters in every run, master 1 serving slot 0). Each
// Redis fault strikes one master, the others serving on: restarted empty
// (the same node, its slots, no data: as one restarted on its own disk
// without persistence), frozen, out of memory, or paused. A resharding
// (FaultReshard) moves a master's slots of the run's keys and records to
// the next master under load. What the run leaves out, and why, is
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
// and it draws, from another stream, up to two reshardings of a master
// each (FaultReshard), each clear of the Redis faults by faultGap.
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
	rs := rand.New(rand.NewPCG(sc.Seed, 0x72657368617264)) // "reshard"
	for range pick(rs, []int{0, 1, 2}, []int{30, 50, 20}) {
		for range 20 { // a few tries to find room
			at := warmup + time.Duration(rs.Int64N(int64(sc.Length-settle-warmup)))
			if sc.redisFaultIn(at-faultGap, at+faultGap) || slices.ContainsFunc(sc.Events, func(e Event) bool {
				return e.Kind == FaultReshard && (e.At-at).Abs() < 2*time.Second
			}) {
				continue
			}
			sc.Events = append(sc.Events, Event{At: at, Kind: FaultReshard, Node: 1 + rs.IntN(masters)})
			break
		}
	}
	slices.SortStableFunc(sc.Events, func(a, b Event) int { return int(a.At - b.At) })
	return sc
}

// mastersBySlot returns c's masters' addresses, master 1 first: by the
// lowest slot each serves (Event.Node).
func mastersBySlot(c *redisproc.Cluster) ([]string, error) {
	nodes, err := c.MastersBySlot()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = n.Addr
	}
	return out, nil
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
	if in.cluster == nil || e.Node < 1 || e.Node > len(in.masters) {
		return "", fmt.Errorf("%s: master %d of %d on a Cluster", e.Kind, e.Node, len(in.masters))
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterHealTimeout)
	defer cancel()
	src, dst := in.masters[e.Node-1], in.masters[e.Node%len(in.masters)]
	var moved []string
	done := map[int]bool{}
	for _, name := range placed() {
		slot, err := in.cluster.KeySlot(placedKey(prefix, name))
		if err != nil {
			return strings.Join(moved, ", "), err
		}
		if done[slot] {
			continue
		}
		done[slot] = true
		nodes, err := in.cluster.MastersBySlot()
		if err != nil {
			return strings.Join(moved, ", "), err
		}
		from := slices.IndexFunc(nodes, func(n redisproc.ClusterNode) bool { return n.Addr == src && n.Serves(slot) })
		to := slices.IndexFunc(nodes, func(n redisproc.ClusterNode) bool { return n.Addr == dst })
		if from < 0 {
			continue // another master's
		}
		if to < 0 {
			return strings.Join(moved, ", "), fmt.Errorf("%s: master %s serves no slot", e.Kind, dst)
		}
		keys, err := redisproc.MoveSlot(ctx, func(addr string) *redis.Client { return in.rdb[addr] }, nodes, nodes[from], nodes[to], slot)
		if err != nil {
			return strings.Join(moved, ", "), fmt.Errorf("%s: %s's slot %d: %w", e.Kind, name, slot, err)
		}
		moved = append(moved, fmt.Sprintf("%s's slot %d (%d keys)", name, slot, keys))
	}
	if len(moved) == 0 {
		return fmt.Sprintf("nothing of the run's on master %d", e.Node), nil
	}
	return fmt.Sprintf("to master %d: %s", e.Node%len(in.masters)+1, strings.Join(moved, ", ")), nil
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
