package redistest

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of redis-server processes started for one test.
type Cluster struct {
	Addrs    []string             // host:port of every master, as created
	Replicas []string             // host:port of every replica, as created (see NewClusterReplicas)
	Client   *redis.ClusterClient // ready, closed on t.Cleanup

	proc     *redisproc.Cluster
	nodes    []*redisproc.Server // every node, in start order
	mu       sync.Mutex          // guards killedAt
	killedAt time.Time           // when KillNode last killed a node
}

// NewCluster starts a Redis Cluster of masters master nodes (no replicas)
// from redis-server --cluster-enabled processes on free loopback ports,
// joins them with redis-cli --cluster create, waits until every node reports
// cluster_state:ok with all 16384 slots covered, and stops it all on
// t.Cleanup (redisproc.StartCluster). redis-cli needs at least 3 masters.
// Once formed, the nodes' cluster-node-timeout is 5000 ms, so that a
// briefly starved node is not marked failed, which would take the whole
// replica-less cluster down. If redis-server or redis-cli is missing, the
// test is skipped, or fails when CI is set (as in New).
func NewCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: NewCluster(%d): a Redis Cluster needs at least 3 masters", masters)
	}
	return newCluster(t, masters, 0)
}

// newCluster starts a cluster of masters masters with replicas replicas
// each, as NewCluster and NewClusterReplicas say.
func newCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			unavailable(t, "%s is not on PATH: %v", bin, err)
		}
	}
	pc, err := redisproc.StartCluster(redisproc.ClusterSpec{Masters: masters, Replicas: replicas})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(pc.Close)
	c := &Cluster{Addrs: pc.Masters, Replicas: pc.Replicas, proc: pc, nodes: pc.Nodes}
	c.Client = c.NewClient(t)
	all := append(append([]string(nil), c.Addrs...), c.Replicas...)
	report(t, SourceProcess, "cluster", strings.Join(all, ","))
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
