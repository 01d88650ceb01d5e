package combo

import (
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
// slots. Each Redis fault strikes one master, the others serving on:
// restarted empty (the same node, its slots, no data: as one restarted on
// its own disk without persistence), frozen, out of memory, or paused.
// What the run leaves out, and why, is ForCluster's.

// clusterMasters is the masters of a run on a Cluster.
const clusterMasters = 3

// ForCluster returns sc as a run on a Cluster of masters plays it:
//
//   - each Redis fault strikes one master (Event.Node), drawn from a stream
//     of its own, so that the rest of the timeline is sc's;
//   - no slow Redis: its proxies stand between the fleet and one server,
//     and a Cluster client follows the addresses the masters give it;
//   - no Python process: the Python client (clients/python) has no
//     Cluster support; Go processes run in its slots.
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
	return sc
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

// placement returns the master (1 to len(c.Masters), as Event.Node) whose
// slots hold the fleet's records (fleetRecords) and each key the fleet
// calls, under prefix.
func placement(c *redisproc.Cluster, prefix string) (map[string]int, error) {
	names := append(slices.Clone(Keys), KeySeats, fleetRecords)
	out := make(map[string]int, len(names))
	for _, name := range names {
		rk := layout.Key(prefix, name)
		if name == fleetRecords {
			rk = layout.FleetKeys(prefix)[0]
		}
		slot, err := c.KeySlot(rk)
		if err != nil {
			return nil, err
		}
		owner, err := c.SlotOwner(slot)
		if err != nil {
			return nil, err
		}
		i := slices.Index(c.Masters, owner.Addr)
		if i < 0 {
			return nil, fmt.Errorf("the owner %s of %s is not a master as created %v", owner.Addr, rk, c.Masters)
		}
		out[name] = i + 1
	}
	return out, nil
}

// placementText is a placement, a master a line: "master 1: {limiters},
// sliding.example".
func placementText(p map[string]int, masters int) []string {
	var lines []string
	for m := 1; m <= masters; m++ {
		var on []string
		for _, name := range append(slices.Clone(Keys), KeySeats, fleetRecords) {
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
