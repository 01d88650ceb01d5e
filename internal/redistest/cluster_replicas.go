package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
)

// failoverNodeTimeout is the cluster-node-timeout of a cluster with
// replicas, kept while it runs: a master is flagged failed about this long
// after it stops answering, and its replica takes over about a second later.
// Should a starved master be flagged failed by mistake, its replica takes
// over and the cluster stays up, unlike a cluster without replicas.
const failoverNodeTimeout = "1000"

// clusterReplicaArgs are given to every node of a cluster with replicas.
// A validity factor of 0 lets a replica fail over however long it has been
// cut off from its master.
var clusterReplicaArgs = append([]string{"--cluster-replica-validity-factor", "0"}, dataNodeArgs...)

// NewClusterReplicas starts a Redis Cluster of masters masters with
// replicasPerMaster replicas each (3 and 1 give 6 redis-server processes),
// joined with redis-cli --cluster create --cluster-replicas. It waits until
// every node reports cluster_state:ok, knows every other node as the right
// master or replica, and every replica has finished its initial sync, and
// stops it all on t.Cleanup. The nodes keep cluster-node-timeout at 1000 ms,
// so that after KillNode of a master its replica takes over within a few
// seconds (see WaitSlotServed); without replicas it is raised to 5000 ms as
// in NewCluster. Addrs lists the masters and Replicas the
// replicas as created. Missing binaries skip or fail the test as in
// NewCluster.
func NewClusterReplicas(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("redistest: NewClusterReplicas(%d, %d): a Redis Cluster needs at least 3 masters, and replicas cannot be negative", masters, replicasPerMaster)
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server is not on PATH: %v", err)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		unavailable(t, "redis-cli is not on PATH: %v", err)
	}

	c := &Cluster{}
	var all []string
	for range masters * (1 + replicasPerMaster) {
		p := startServer(t, redisproc.Spec{Bin: server, ClusterBus: true, Args: append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", failoverNodeTimeout,
		}, clusterReplicaArgs...)}, "cluster node")
		c.nodes = append(c.nodes, p)
		all = append(all, p.Addr())
	}
	if err := createCluster(cli, all, replicasPerMaster); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if err := waitClusterOK(all, masters, clusterReadyLimit); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	// Every node must see every replica attached to its master, or the
	// masters would not vote for it in a failover.
	err = waitUntil(clusterReadyLimit, 50*time.Millisecond, func() string {
		c.Addrs, c.Replicas = nil, nil
		for _, addr := range all {
			nodes, err := clusterNodes(addr)
			if err != nil {
				return addr + ": " + err.Error()
			}
			if why := topologyNotReady(nodes, masters, replicasPerMaster); why != "" {
				return addr + ": " + why
			}
			if c.Addrs == nil {
				c.Addrs, c.Replicas = roles(nodes)
			}
		}
		for _, addr := range c.Replicas {
			if why := replicaNotSynced(addr); why != "" {
				return why
			}
		}
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: cluster replicas: %v", err)
	}
	if replicasPerMaster == 0 { // nothing to fail over to: as in NewCluster
		if err := setNodeTimeout(all, clusterNodeTimeout); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	c.Client = c.NewClient(t)
	report(t, SourceProcess, "cluster", strings.Join(all, ","))
	return c
}

// topologyNotReady returns why a node's view of the cluster does not yet
// hold masters healthy masters each with replicas healthy replicas, or "".
func topologyNotReady(nodes []clusterNode, masters, replicas int) string {
	perMaster := map[string]int{}
	nMasters := 0
	for _, n := range nodes {
		if bad := n.unhealthy(); bad != "" {
			return fmt.Sprintf("node %s is flagged %s", n.addr, bad)
		}
		switch {
		case n.hasFlag("master"):
			nMasters++
		case n.hasFlag("slave") && n.master != "-":
			perMaster[n.master]++
		default:
			return fmt.Sprintf("node %s has flags %v and master %q", n.addr, n.flags, n.master)
		}
	}
	if nMasters != masters {
		return fmt.Sprintf("%d masters, want %d", nMasters, masters)
	}
	for _, n := range nodes {
		if n.hasFlag("master") && perMaster[n.id] != replicas {
			return fmt.Sprintf("master %s has %d replicas, want %d", n.addr, perMaster[n.id], replicas)
		}
	}
	return ""
}

// roles splits the addresses in nodes into masters and replicas, sorted.
func roles(nodes []clusterNode) (masters, replicas []string) {
	for _, n := range nodes {
		if n.hasFlag("master") {
			masters = append(masters, n.addr)
		} else {
			replicas = append(replicas, n.addr)
		}
	}
	slices.Sort(masters)
	slices.Sort(replicas)
	return masters, replicas
}

// MasterFor returns the address of the master that owns key's slot, as the
// first live node asked sees it.
func (c *Cluster) MasterFor(t testing.TB, key string) string {
	t.Helper()
	slot, err := c.keySlot(key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var errs []string
	for _, p := range c.nodes {
		if p.Stopped() {
			continue
		}
		owner, err := slotOwner(p.Addr(), slot)
		if err == nil {
			return owner.addr
		}
		errs = append(errs, p.Addr()+": "+err.Error())
	}
	t.Fatalf("redistest: no live node knows the master of %q: %s", key, strings.Join(errs, "; "))
	return ""
}

// KillNode kills the node at addr (SIGKILL) and returns at once. Its port
// stays reserved until the test ends, so nothing else takes its place.
func (c *Cluster) KillNode(t testing.TB, addr string) {
	t.Helper()
	for _, p := range c.nodes {
		if p.Addr() == addr {
			p.Stop()
			c.mu.Lock()
			c.killedAt = time.Now()
			c.mu.Unlock()
			return
		}
	}
	t.Fatalf("redistest: KillNode(%s): no such node in cluster %v", addr, c.Addrs)
}

// WaitSlotServed waits up to timeout until every live node agrees that the
// slot of key belongs to one live master, none of them is flagged as failing
// and all report cluster_state:ok, and that master answers ROLE as a master.
// It returns that master's address and logs how long it took since the last
// KillNode. After a master is killed in a cluster from NewClusterReplicas
// that is typically 2 to 3 seconds; a timeout of 15 s is safe.
//
// The cluster is then ready, but a go-redis ClusterClient (v9.23) may not
// know yet: it refreshes its slot map on MOVED or ASK replies and every
// ClusterStateReloadInterval (60 s by default), not on connection errors, so
// it keeps dialling the dead master until then. Call its ReloadState, or
// give it a short ClusterStateReloadInterval; Client and NewClient use
// go-redis's defaults.
func (c *Cluster) WaitSlotServed(t testing.TB, key string, timeout time.Duration) string {
	t.Helper()
	slot, err := c.keySlot(key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var owner string
	err = waitUntil(timeout, 50*time.Millisecond, func() string {
		owner = ""
		for _, p := range c.nodes {
			if p.Stopped() {
				continue
			}
			n, err := slotOwner(p.Addr(), slot)
			if err != nil {
				return p.Addr() + ": " + err.Error()
			}
			if owner != "" && n.addr != owner {
				return fmt.Sprintf("nodes disagree on the owner of %q: %s and %s", key, owner, n.addr)
			}
			if why := c.nodeDown(n.addr); why != "" {
				return p.Addr() + " says " + n.addr + " owns " + key + ", but it " + why
			}
			if bad := n.unhealthy(); bad != "" {
				return fmt.Sprintf("%s sees the owner %s of %q flagged %s", p.Addr(), n.addr, key, bad)
			}
			owner = n.addr
			if why := clusterStateNotOK(p.Addr()); why != "" {
				return p.Addr() + ": " + why
			}
		}
		if owner == "" {
			return "no live node"
		}
		r, err := role(owner)
		if err != nil {
			return owner + ": ROLE: " + err.Error()
		}
		if r != "master" {
			return owner + " has role " + r
		}
		return ""
	})
	if err != nil {
		t.Fatalf("redistest: slot of %q: %v", key, err)
	}
	c.mu.Lock()
	killedAt := c.killedAt
	c.mu.Unlock()
	if !killedAt.IsZero() {
		t.Logf("redistest: slot of %q served by %s %v after the last KillNode", key, owner, time.Since(killedAt).Round(time.Millisecond))
	}
	return owner
}

// nodeDown returns why the node at addr is not a live node of c, or "".
func (c *Cluster) nodeDown(addr string) string {
	for _, p := range c.nodes {
		if p.Addr() == addr {
			if p.Stopped() {
				return "was killed"
			}
			return ""
		}
	}
	return "is not a node of this cluster"
}

// keySlot asks a live node of c for the hash slot of key.
func (c *Cluster) keySlot(key string) (int, error) {
	var err error
	for _, p := range c.nodes {
		if p.Stopped() {
			continue
		}
		client := nodeClient(p.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
		var slot int64
		slot, err = client.ClusterKeySlot(ctx, key).Result()
		cancel()
		_ = client.Close()
		if err == nil {
			return int(slot), nil
		}
	}
	return 0, fmt.Errorf("CLUSTER KEYSLOT %q: no live node answered: %v", key, err)
}

// slotOwner asks the node at addr which master owns slot.
func slotOwner(addr string, slot int) (clusterNode, error) {
	nodes, err := clusterNodes(addr)
	if err != nil {
		return clusterNode{}, err
	}
	for _, n := range nodes {
		if n.hasFlag("master") && n.serves(slot) {
			return n, nil
		}
	}
	return clusterNode{}, fmt.Errorf("no master owns slot %d", slot)
}
