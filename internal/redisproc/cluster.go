package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	clusterSlots       = 16384
	clusterCreateLimit = time.Minute      // redis-cli --cluster create
	clusterReadyLimit  = 20 * time.Second // until every node reports cluster_state:ok
	nodeTimeout        = time.Second      // bounds each command that polls a node

	// Nodes gossip with a peer at least every node timeout / 2, so a short
	// timeout while the cluster forms makes redis-cli's join wait about one
	// second instead of one to six.
	formingNodeTimeout = time.Second
	// The node timeout of a formed cluster without replicas: a briefly
	// starved node is not marked failed, which would take the whole
	// replica-less cluster down.
	replicalessNodeTimeout = 5 * time.Second
)

// replicaNodeArgs are given to every node of a cluster with replicas. A
// validity factor of 0 lets a replica fail over however long it has been
// cut off from its master; a diskless sync starts at once.
var replicaNodeArgs = []string{"--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"}

// ClusterSpec says what Redis Cluster StartCluster starts.
type ClusterSpec struct {
	// Masters is the number of masters serving slots: at least 3
	// (redis-cli's minimum).
	Masters int
	// Replicas is the number of replicas of each master (0 or more).
	Replicas int
	// NodeTimeout is cluster-node-timeout once the cluster is formed. A
	// master is flagged failed about this long after it stops answering,
	// and its replica takes over about a second later. Default: 1 s with
	// replicas (should a starved master be flagged failed by mistake, its
	// replica takes over and the cluster stays up), 5 s without (a
	// briefly starved node is not marked failed, which would take the
	// replica-less cluster down).
	NodeTimeout time.Duration
	// Args come after the cluster's own arguments on every node.
	Args []string
	// FIFO is every node's Spec.FIFO: a real-time priority, or 0.
	FIFO int
}

// Cluster is a Redis Cluster of redis-server processes on free loopback
// ports, started by StartCluster. Its methods are safe for concurrent use.
type Cluster struct {
	Masters  []string  // host:port of every master, as created, sorted
	Replicas []string  // host:port of every replica, as created, sorted
	Nodes    []*Server // every node, in start order
}

// StartCluster starts sp.Masters × (1 + sp.Replicas) redis-server
// --cluster-enabled processes, joins them with redis-cli --cluster create
// (--cluster-replicas sp.Replicas), and waits until every node reports
// cluster_state:ok with all 16384 slots covered, knows every other node
// as the right master or replica, and every replica has finished its
// initial sync. redis-server and redis-cli come from PATH. On error
// everything started is stopped.
func StartCluster(sp ClusterSpec) (c *Cluster, err error) {
	if sp.Masters < 3 || sp.Replicas < 0 {
		return nil, fmt.Errorf("redisproc: StartCluster(%d masters, %d replicas each): a Redis Cluster needs at least 3 masters, and replicas cannot be negative", sp.Masters, sp.Replicas)
	}
	if sp.NodeTimeout <= 0 {
		sp.NodeTimeout = formingNodeTimeout
		if sp.Replicas == 0 {
			sp.NodeTimeout = replicalessNodeTimeout
		}
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, err
	}
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", ms(formingNodeTimeout)}
	if sp.Replicas > 0 {
		args = append(args, replicaNodeArgs...)
	}
	args = append(args, sp.Args...)

	c = &Cluster{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	var all []string
	for range sp.Masters * (1 + sp.Replicas) {
		p, err := Start(Spec{Bin: server, ClusterBus: true, Args: args, FIFO: sp.FIFO})
		if err != nil {
			return nil, fmt.Errorf("redisproc: cluster node: %w", err)
		}
		c.Nodes = append(c.Nodes, p)
		all = append(all, p.Addr())
	}
	if err := createCluster(cli, all, sp.Replicas); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	if err := waitClusterOK(all, sp.Masters, clusterReadyLimit); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	// Every node must see every replica attached to its master, or the
	// masters would not vote for it in a failover.
	err = WaitUntil(clusterReadyLimit, 50*time.Millisecond, func() string {
		c.Masters, c.Replicas = nil, nil
		for _, addr := range all {
			nodes, err := ClusterNodes(addr)
			if err != nil {
				return addr + ": " + err.Error()
			}
			if why := topologyNotReady(nodes, sp.Masters, sp.Replicas); why != "" {
				return addr + ": " + why
			}
			if c.Masters == nil {
				c.Masters, c.Replicas = roles(nodes)
			}
		}
		for _, addr := range c.Replicas {
			if why := ReplicaNotSynced(addr); why != "" {
				return why
			}
		}
		return ""
	})
	if err != nil {
		return nil, fmt.Errorf("redisproc: cluster replicas: %w", err)
	}
	if sp.NodeTimeout != formingNodeTimeout {
		if err := setNodeTimeout(all, ms(sp.NodeTimeout)); err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
	}
	return c, nil
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// Close stops every node (SIGKILL), releases their ports and removes their
// directories.
func (c *Cluster) Close() {
	for _, p := range c.Nodes {
		p.Close()
	}
}

// WaitOK waits up to timeout until every node reports the cluster whole
// again (cluster_state:ok, every slot served, every node known), as after
// StartCluster: after a node restarted or thawed, for example.
func (c *Cluster) WaitOK(timeout time.Duration) error {
	var addrs []string
	for _, p := range c.Nodes {
		addrs = append(addrs, p.Addr())
	}
	if err := waitClusterOK(addrs, len(c.Masters), timeout); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	return nil
}

// Node returns the node at addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, p := range c.Nodes {
		if p.Addr() == addr {
			return p
		}
	}
	return nil
}

// SlotOwner returns the master that owns slot as the first live node
// asked sees it.
func (c *Cluster) SlotOwner(slot int) (ClusterNode, error) {
	var errs []error
	for _, p := range c.Nodes {
		if p.Stopped() {
			continue
		}
		owner, err := slotOwner(p.Addr(), slot)
		if err == nil {
			return owner, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", p.Addr(), err))
	}
	return ClusterNode{}, fmt.Errorf("redisproc: no live node knows the master of slot %d: %w", slot, errors.Join(errs...))
}

// WaitSlotServed waits up to timeout until every live node agrees that slot
// belongs to one live master, none of them is flagged as failing and all
// report cluster_state:ok, and that master answers ROLE as a master. It
// returns that master's address. After a master of a cluster with replicas
// is killed, that typically takes the node timeout and 1 to 2 seconds.
func (c *Cluster) WaitSlotServed(slot int, timeout time.Duration) (string, error) {
	var owner string
	err := WaitUntil(timeout, 50*time.Millisecond, func() string {
		owner = ""
		for _, p := range c.Nodes {
			if p.Stopped() {
				continue
			}
			n, err := slotOwner(p.Addr(), slot)
			if err != nil {
				return p.Addr() + ": " + err.Error()
			}
			if owner != "" && n.Addr != owner {
				return fmt.Sprintf("nodes disagree on the owner of slot %d: %s and %s", slot, owner, n.Addr)
			}
			if why := c.nodeDown(n.Addr); why != "" {
				return fmt.Sprintf("%s says %s owns slot %d, but it %s", p.Addr(), n.Addr, slot, why)
			}
			if bad := n.Unhealthy(); bad != "" {
				return fmt.Sprintf("%s sees the owner %s of slot %d flagged %s", p.Addr(), n.Addr, slot, bad)
			}
			owner = n.Addr
			if why := clusterStateNotOK(p.Addr()); why != "" {
				return p.Addr() + ": " + why
			}
		}
		if owner == "" {
			return "no live node"
		}
		r, err := Role(owner)
		if err != nil {
			return owner + ": ROLE: " + err.Error()
		}
		if r != "master" {
			return owner + " has role " + r
		}
		return ""
	})
	if err != nil {
		return "", fmt.Errorf("redisproc: slot %d: %w", slot, err)
	}
	return owner, nil
}

// nodeDown returns why the node at addr is not a live node of c, or "".
func (c *Cluster) nodeDown(addr string) string {
	p := c.Node(addr)
	switch {
	case p == nil:
		return "is not a node of this cluster"
	case p.Stopped():
		return "was killed"
	}
	return ""
}

// KeySlot asks a live node of c for the hash slot of key.
func (c *Cluster) KeySlot(key string) (int, error) {
	var err error
	for _, p := range c.Nodes {
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
	return 0, fmt.Errorf("redisproc: CLUSTER KEYSLOT %q: no live node answered: %v", key, err)
}

// createCluster joins the nodes at addrs into one cluster, with replicas
// replicas per master.
func createCluster(cli string, addrs []string, replicas int) error {
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateLimit)
	defer cancel()
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", cli, strings.Join(args, " "), err, out)
	}
	return nil
}

// setNodeTimeout sets cluster-node-timeout on every node.
func setNodeTimeout(addrs []string, ms string) error {
	for _, addr := range addrs {
		c := nodeClient(addr)
		ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
		err := c.ConfigSet(ctx, "cluster-node-timeout", ms).Err()
		cancel()
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("%s: CONFIG SET cluster-node-timeout %s: %w", addr, ms, err)
		}
	}
	return nil
}

// waitClusterOK polls CLUSTER INFO on every node until each reports
// cluster_state:ok, all slots assigned and ok, knows every node, and counts
// masters masters serving slots.
func waitClusterOK(addrs []string, masters int, timeout time.Duration) error {
	clients := make([]*redis.Client, len(addrs))
	for i, addr := range addrs {
		clients[i] = nodeClient(addr)
		defer clients[i].Close()
	}
	err := WaitUntil(timeout, 50*time.Millisecond, func() string {
		for i, c := range clients {
			if why := clusterNodeNotReady(c, len(addrs), masters); why != "" {
				return addrs[i] + ": " + why
			}
		}
		return ""
	})
	if err != nil {
		return fmt.Errorf("cluster %v: %w", addrs, err)
	}
	return nil
}

// clusterNodeNotReady returns why the node c is not yet part of a healthy
// cluster of n nodes of which masters serve slots, or "" if it is.
func clusterNodeNotReady(c *redis.Client, n, masters int) string {
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err.Error()
	}
	for _, want := range [][2]string{
		{"cluster_state", "ok"},
		{"cluster_slots_assigned", strconv.Itoa(clusterSlots)},
		{"cluster_slots_ok", strconv.Itoa(clusterSlots)},
		{"cluster_known_nodes", strconv.Itoa(n)},
		{"cluster_size", strconv.Itoa(masters)},
	} {
		if got := InfoField(info, want[0]); got != want[1] {
			return fmt.Sprintf("%s is %q, want %q", want[0], got, want[1])
		}
	}
	return ""
}

// topologyNotReady returns why a node's view of the cluster does not yet
// hold masters healthy masters each with replicas healthy replicas, or "".
func topologyNotReady(nodes []ClusterNode, masters, replicas int) string {
	perMaster := map[string]int{}
	nMasters := 0
	for _, n := range nodes {
		if bad := n.Unhealthy(); bad != "" {
			return fmt.Sprintf("node %s is flagged %s", n.Addr, bad)
		}
		switch {
		case n.HasFlag("master"):
			nMasters++
		case n.HasFlag("slave") && n.Master != "-":
			perMaster[n.Master]++
		default:
			return fmt.Sprintf("node %s has flags %v and master %q", n.Addr, n.Flags, n.Master)
		}
	}
	if nMasters != masters {
		return fmt.Sprintf("%d masters, want %d", nMasters, masters)
	}
	for _, n := range nodes {
		if n.HasFlag("master") && perMaster[n.ID] != replicas {
			return fmt.Sprintf("master %s has %d replicas, want %d", n.Addr, perMaster[n.ID], replicas)
		}
	}
	return ""
}

// roles splits the addresses in nodes into masters and replicas, sorted.
func roles(nodes []ClusterNode) (masters, replicas []string) {
	for _, n := range nodes {
		if n.HasFlag("master") {
			masters = append(masters, n.Addr)
		} else {
			replicas = append(replicas, n.Addr)
		}
	}
	slices.Sort(masters)
	slices.Sort(replicas)
	return masters, replicas
}

// slotOwner asks the node at addr which master owns slot.
func slotOwner(addr string, slot int) (ClusterNode, error) {
	nodes, err := ClusterNodes(addr)
	if err != nil {
		return ClusterNode{}, err
	}
	for _, n := range nodes {
		if n.HasFlag("master") && n.Serves(slot) {
			return n, nil
		}
	}
	return ClusterNode{}, fmt.Errorf("no master owns slot %d", slot)
}

// MigrateBatch is how many keys one MIGRATE of MoveSlot moves (redis-cli's
// --cluster-pipeline default).
const MigrateBatch = 10

// MoveSlot moves slot from src to dst, masters of one cluster, as redis-cli
// --cluster reshard does (clusterManagerMoveSlot): SETSLOT IMPORTING on
// dst, MIGRATING on src, MIGRATE of the keys MigrateBatch at a time until
// none is left, then SETSLOT NODE on dst, src and the other masters of
// masters. node returns the caller's client of the node at an address,
// patient enough for a MIGRATE on a loaded machine. It returns the keys
// it moved.
func MoveSlot(ctx context.Context, node func(addr string) *redis.Client, masters []ClusterNode, src, dst ClusterNode, slot int) (int, error) {
	s, d := node(src.Addr), node(dst.Addr)
	if err := d.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", src.ID).Err(); err != nil {
		return 0, fmt.Errorf("SETSLOT IMPORTING on %s: %w", dst.Addr, err)
	}
	if err := s.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dst.ID).Err(); err != nil {
		return 0, fmt.Errorf("SETSLOT MIGRATING on %s: %w", src.Addr, err)
	}
	host, port, _ := strings.Cut(dst.Addr, ":")
	moved := 0
	for {
		keys, err := s.ClusterGetKeysInSlot(ctx, slot, MigrateBatch).Result()
		if err != nil {
			return moved, fmt.Errorf("GETKEYSINSLOT on %s: %w", src.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", host, port, "", 0, 60000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := s.Do(ctx, args...).Err(); err != nil {
			return moved, fmt.Errorf("MIGRATE on %s: %w", src.Addr, err)
		}
		moved += len(keys)
	}
	order := []string{dst.Addr, src.Addr}
	for _, m := range masters {
		if m.Addr != src.Addr && m.Addr != dst.Addr {
			order = append(order, m.Addr)
		}
	}
	for _, addr := range order {
		if err := node(addr).Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dst.ID).Err(); err != nil {
			return moved, fmt.Errorf("SETSLOT NODE on %s: %w", addr, err)
		}
	}
	return moved, nil
}

// MastersBySlot returns the masters serving slots, as a live node sees
// them now, ordered by the lowest slot each serves.
func (c *Cluster) MastersBySlot() ([]ClusterNode, error) {
	var errs []error
	for _, p := range c.Nodes {
		if p.Stopped() {
			continue
		}
		nodes, err := ClusterNodes(p.Addr())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", p.Addr(), err))
			continue
		}
		var masters []ClusterNode
		for _, n := range nodes {
			if n.HasFlag("master") && len(n.Slots) > 0 {
				masters = append(masters, n)
			}
		}
		slices.SortFunc(masters, func(a, b ClusterNode) int { return a.LowestSlot() - b.LowestSlot() })
		return masters, nil
	}
	return nil, fmt.Errorf("redisproc: no live node answered CLUSTER NODES: %w", errors.Join(errs...))
}
