package redistest

import (
	"testing"
	"time"
)

// NewClusterReplicas starts a Redis Cluster of masters masters with
// replicasPerMaster replicas each (3 and 1 give 6 redis-server processes),
// joined with redis-cli --cluster create --cluster-replicas. It waits until
// every node reports cluster_state:ok, knows every other node as the right
// master or replica, and every replica has finished its initial sync, and
// stops it all on t.Cleanup (redisproc.StartCluster). The nodes keep
// cluster-node-timeout at 1000 ms, so that after KillNode of a master its
// replica takes over within a few seconds (see WaitSlotServed); without
// replicas it is raised to 5000 ms as in NewCluster. Addrs lists the
// masters and Replicas the replicas as created. Missing binaries skip or
// fail the test as in NewCluster.
func NewClusterReplicas(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	if masters < 3 || replicasPerMaster < 0 {
		t.Fatalf("redistest: NewClusterReplicas(%d, %d): a Redis Cluster needs at least 3 masters, and replicas cannot be negative", masters, replicasPerMaster)
	}
	return newCluster(t, masters, replicasPerMaster)
}

// MasterFor returns the address of the master that owns key's slot, as the
// first live node asked sees it.
func (c *Cluster) MasterFor(t testing.TB, key string) string {
	t.Helper()
	slot, err := c.proc.KeySlot(key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	owner, err := c.proc.SlotOwner(slot)
	if err != nil {
		t.Fatalf("redistest: the master of %q: %v", key, err)
	}
	return owner.Addr
}

// KillNode kills the node at addr (SIGKILL) and returns at once. Its port
// stays reserved until the test ends, so nothing else takes its place.
func (c *Cluster) KillNode(t testing.TB, addr string) {
	t.Helper()
	p := c.proc.Node(addr)
	if p == nil {
		t.Fatalf("redistest: KillNode(%s): no such node in cluster %v", addr, c.Addrs)
	}
	p.Stop()
	c.mu.Lock()
	c.killedAt = time.Now()
	c.mu.Unlock()
}

// FreezeNode stops the node at addr with SIGSTOP, as a hung master: it
// takes in commands and answers none until the returned thaw resumes it
// (SIGCONT). The test's end thaws it too, if it still runs.
func (c *Cluster) FreezeNode(t testing.TB, addr string) (thaw func()) {
	t.Helper()
	p := c.proc.Node(addr)
	if p == nil {
		t.Fatalf("redistest: FreezeNode(%s): no such node in cluster %v", addr, c.Addrs)
	}
	if err := p.Freeze(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	thaw = func() {
		if err := p.Thaw(); err != nil {
			t.Errorf("redistest: %v", err)
		}
	}
	t.Cleanup(func() { _ = p.Thaw() })
	return thaw
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
	slot, err := c.proc.KeySlot(key)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	owner, err := c.proc.WaitSlotServed(slot, timeout)
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
