package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

const (
	clusterSlots       = 16384
	clusterCreateLimit = time.Minute      // redis-cli --cluster create
	clusterReadyLimit  = 20 * time.Second // until every node reports cluster_state:ok

	// Nodes gossip with a peer at least every node timeout / 2, so a short
	// timeout while the cluster forms makes redis-cli's join wait about one
	// second instead of one to six. Once formed, the timeout is raised so
	// that a briefly starved node is not marked failed, which would take
	// the whole replica-less cluster down.
	formingNodeTimeout = "1000"
	clusterNodeTimeout = "5000"
)

// Cluster is a Redis Cluster of redis-server processes started for one test.
type Cluster struct {
	Addrs    []string             // host:port of every master, as created
	Replicas []string             // host:port of every replica, as created (see NewClusterReplicas)
	Client   *redis.ClusterClient // ready, closed on t.Cleanup

	nodes    []*redisproc.Server // every node, in start order
	mu       sync.Mutex          // guards killedAt
	killedAt time.Time           // when KillNode last killed a node
}

// NewCluster starts a Redis Cluster of masters master nodes (no replicas)
// from redis-server --cluster-enabled processes on free loopback ports,
// joins them with redis-cli --cluster create, waits until every node reports
// cluster_state:ok with all 16384 slots covered, and stops it all on
// t.Cleanup. redis-cli needs at least 3 masters. If redis-server or redis-cli
// is missing, the test is skipped, or fails when CI is set (as in New).
func NewCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: NewCluster(%d): a Redis Cluster needs at least 3 masters", masters)
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
	for range masters {
		p := startServer(t, redisproc.Spec{Bin: server, ClusterBus: true, Args: []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", formingNodeTimeout,
		}}, "cluster node")
		c.nodes = append(c.nodes, p)
		c.Addrs = append(c.Addrs, p.Addr())
	}

	if err := createCluster(cli, c.Addrs, 0); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if err := waitClusterOK(c.Addrs, masters, clusterReadyLimit); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	if err := setNodeTimeout(c.Addrs, clusterNodeTimeout); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	c.Client = c.NewClient(t)
	report(t, SourceProcess, "cluster", strings.Join(c.Addrs, ","))
	return c
}

// NewClient returns another cluster client, closed on t.Cleanup, that has
// answered PING on every master. Every node, replicas included, is a seed.
func (c *Cluster) NewClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	seeds := append(append([]string(nil), c.Addrs...), c.Replicas...)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
	t.Cleanup(func() { _ = client.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
	defer cancel()
	err := client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		return node.Ping(ctx).Err()
	})
	if err != nil {
		t.Fatalf("redistest: PING cluster %v: %v", c.Addrs, err)
	}
	return client
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
		c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
		ctx, cancel := context.WithTimeout(context.Background(), pingTimeout)
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
		clients[i] = redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MaxRetries: -1})
		defer clients[i].Close()
	}
	deadline := time.Now().Add(timeout)
	for {
		notReady := ""
		for i, c := range clients {
			if why := clusterNodeNotReady(c, len(addrs), masters); why != "" {
				notReady = addrs[i] + ": " + why
				break
			}
		}
		if notReady == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster %v not ready within %v: %s", addrs, timeout, notReady)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// clusterNodeNotReady returns why the node c is not yet part of a healthy
// cluster of n nodes of which masters serve slots, or "" if it is.
func clusterNodeNotReady(c *redis.Client, n, masters int) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
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
		if got := redisproc.InfoField(info, want[0]); got != want[1] {
			return fmt.Sprintf("%s is %q, want %q", want[0], got, want[1])
		}
	}
	return ""
}
