package combo

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// injector breaks the run's redis-server, or one master of its Cluster,
// and mends it. Its faults never overlap (Generate places them one after
// the other).
type injector struct {
	srv     *redisproc.Server
	cluster *redisproc.Cluster // a run on a Cluster: each fault strikes Event.Node's master
	// anchors: on a Cluster, a slot of each master at the start, master 1
	// first (Event.Node): the lowest it served. Master k is the node that
	// serves anchors[k-1] now (after a failover, its replica); no
	// resharding moves an anchor (the run's keys' slots are not one).
	anchors []int
	proxies []*slowProxy // each fleet slot's way to srv in a seed that draws a slow Redis; else none
	// rdb: CONFIG SET, CLIENT PAUSE and CLUSTER FAILOVER, MaxRetries -1:
	// srv's client, or each node's, by address.
	rdb map[string]*redis.Client
	// struck: on a Cluster, the node each Redis fault struck, by its
	// Event.At (faults never overlap), for heal: a failover may have made
	// another node master meanwhile.
	struck map[time.Duration]*redisproc.Server
	// held: on a Cluster, the replicas of a master restarted empty, by
	// the fault's Event.At, told not to fail over until it is healed
	// (holdReplicas).
	held map[time.Duration][]string
	// topology: a resharding and a failover run one at a time, as an
	// operator runs them. Drawn at one instant (both queued behind a
	// restart's heal), a failover demoted a master between a resharding's
	// read of the masters and its SETSLOT NODE there ("Please use SETSLOT
	// only with masters": the Cluster's seed 60, a harness violation).
	topology sync.Mutex
}

// newInjector returns the injector of srv, or of cluster, whose masters
// served anchors at the start.
func newInjector(srv *redisproc.Server, cluster *redisproc.Cluster, anchors []int, proxies []*slowProxy) *injector {
	in := &injector{srv: srv, cluster: cluster, anchors: anchors, proxies: proxies, rdb: map[string]*redis.Client{},
		struck: map[time.Duration]*redisproc.Server{}, held: map[time.Duration][]string{}}
	var addrs []string
	if cluster == nil {
		addrs = []string{srv.Addr()}
	} else {
		for _, p := range cluster.Nodes {
			addrs = append(addrs, p.Addr())
		}
	}
	for _, addr := range addrs {
		in.rdb[addr] = redis.NewClient(&redis.Options{
			Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: time.Second,
		})
	}
	return in
}

func (in *injector) close() {
	for _, c := range in.rdb {
		_ = c.Close()
	}
}

// target returns the server e strikes, and a client of it: the run's
// redis-server, or on a Cluster master e.Node as it is now (inject), or
// the node inject struck (heal).
func (in *injector) target(e Event) (*redisproc.Server, *redis.Client, error) {
	if in.cluster == nil {
		return in.srv, in.rdb[in.srv.Addr()], nil
	}
	if srv := in.struck[e.At]; srv != nil {
		return srv, in.rdb[srv.Addr()], nil
	}
	m, err := in.master(e)
	if err != nil {
		return nil, nil, err
	}
	srv := in.cluster.Node(m.Addr)
	if srv == nil {
		return nil, nil, fmt.Errorf("%s: master %d (%s) is not a node of the cluster", e.Kind, e.Node, m.Addr)
	}
	in.struck[e.At] = srv
	return srv, in.rdb[m.Addr], nil
}

// master returns master e.Node as it is now: the node that serves its
// anchor.
func (in *injector) master(e Event) (redisproc.ClusterNode, error) {
	if e.Node < 1 || e.Node > len(in.anchors) {
		return redisproc.ClusterNode{}, fmt.Errorf("%s: master %d of %d", e.Kind, e.Node, len(in.anchors))
	}
	return in.cluster.SlotOwner(in.anchors[e.Node-1])
}

// inject starts fault e.
func (in *injector) inject(e Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if e.Kind == FaultSlow {
		return in.eachSlow(e, func(p *slowProxy) error { return p.slow(e.Latency, e.Commands) })
	}
	srv, rdb, err := in.target(e)
	if err != nil {
		return err
	}
	switch k, d := e.Kind, e.For; k {
	case FaultRestart:
		if in.cluster != nil {
			if err := in.holdReplicas(e, srv); err != nil {
				return err
			}
		}
		srv.Stop()
		return nil
	case FaultFreeze:
		return srv.Freeze()
	case FaultOOM:
		// Every write is refused: a script that writes fails with OOM.
		if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			return err
		}
		return rdb.ConfigSet(ctx, "maxmemory", "1").Err()
	case FaultCPause:
		// CLIENT PAUSE <ms> ALL: every client's commands wait, ours too;
		// it ends by itself after d.
		return rdb.Do(ctx, "CLIENT", "PAUSE", d.Milliseconds(), "ALL").Err()
	}
	return fmt.Errorf("inject: %q is not a Redis fault", e.Kind)
}

// eachSlow runs do on the proxies slow Redis e slows: every slot's, or
// One's.
func (in *injector) eachSlow(e Event, do func(*slowProxy) error) error {
	ps := in.proxies
	switch {
	case len(ps) == 0:
		return fmt.Errorf("%s: a slow Redis without its proxies", e.Kind)
	case e.One && (e.Child < 0 || e.Child >= len(ps)):
		return fmt.Errorf("%s: a slow link of slot %d, of %d", e.Kind, e.Child, len(ps))
	case e.One:
		ps = ps[e.Child : e.Child+1]
	}
	for _, p := range ps {
		if err := do(p); err != nil {
			return err
		}
	}
	return nil
}

// heal ends fault e and returns once Redis answers again: on a Cluster,
// once every node reports it whole.
func (in *injector) heal(e Event) error {
	if e.Kind == FaultSlow {
		return in.eachSlow(e, (*slowProxy).clear)
	}
	if err := in.mend(e); err != nil {
		return err
	}
	if in.cluster != nil {
		if err := in.cluster.WaitOK(clusterHealTimeout); err != nil {
			return err
		}
		return in.releaseReplicas(e)
	}
	return nil
}

// holdReplicas tells the replicas of srv, a master about to be restarted
// empty, not to fail over (cluster-replica-no-failover) until the fault
// is healed. A master down longer than the node timeout (1 s with
// replicas) and a replica's election is failed over by that replica,
// possibly only after the master came back empty and the cluster looked
// whole: the heal returned, then the cluster went down again for the
// promotion (CLUSTERDOWN 0.4 s after it) and the old master synced from
// its replica, a fault longer than the one judged (combination runner on
// a Cluster, seed 36). A restart empty is a master that lost its data;
// a replica's promotion is FaultFailover's, and a freeze's may still
// bring one.
func (in *injector) holdReplicas(e Event, srv *redisproc.Server) error {
	nodes, err := redisproc.ClusterNodes(srv.Addr())
	if err != nil {
		return err
	}
	i := slices.IndexFunc(nodes, func(n redisproc.ClusterNode) bool { return n.Addr == srv.Addr() })
	if i < 0 {
		return fmt.Errorf("%s: %s is not among its own cluster nodes", e.Kind, srv.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, n := range nodes {
		if n.Master != nodes[i].ID {
			continue
		}
		if err := in.rdb[n.Addr].ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err(); err != nil {
			return fmt.Errorf("%s: replica %s: %w", e.Kind, n.Addr, err)
		}
		in.held[e.At] = append(in.held[e.At], n.Addr)
	}
	return nil
}

// releaseReplicas lets the replicas holdReplicas held fail over again.
func (in *injector) releaseReplicas(e Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, addr := range in.held[e.At] {
		if err := in.rdb[addr].ConfigSet(ctx, "cluster-replica-no-failover", "no").Err(); err != nil {
			return fmt.Errorf("%s: replica %s: %w", e.Kind, addr, err)
		}
	}
	return nil
}

// mend ends fault e on the server it struck.
func (in *injector) mend(e Event) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	srv, rdb, err := in.target(e)
	if err != nil {
		return err
	}
	switch e.Kind {
	case FaultRestart:
		return srv.Restart() // empty: no state, no scripts, no heartbeats
	case FaultFreeze:
		return srv.Thaw()
	case FaultOOM:
		return rdb.ConfigSet(ctx, "maxmemory", "0").Err()
	case FaultCPause:
		// It has ended by itself; wait until commands are served again.
		for {
			err := rdb.Ping(ctx).Err()
			if err == nil || ctx.Err() != nil {
				return err
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return fmt.Errorf("heal: %q is not a Redis fault", e.Kind)
}
