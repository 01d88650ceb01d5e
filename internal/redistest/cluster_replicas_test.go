package redistest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClusterReplicasFailover(t *testing.T) {
	var c *Cluster
	t.Run("failover", func(t *testing.T) {
		start := time.Now()
		c = NewClusterReplicas(t, 3, 1)
		t.Logf("3 masters %v + 3 replicas %v ready in %v", c.Addrs, c.Replicas, time.Since(start).Round(time.Millisecond))
		require.Len(t, c.Addrs, 3)
		require.Len(t, c.Replicas, 3)
		for _, addr := range c.Replicas {
			r, err := role(addr)
			require.NoError(t, err)
			assert.Equal(t, "slave", r, addr)
		}

		key := Prefix(t) + "{k}"
		require.NoError(t, c.Client.Set(ctx(t), key, "before", 0).Err())
		master := c.MasterFor(t, key)
		assert.Contains(t, c.Addrs, master)
		node := redis.NewClient(&redis.Options{Addr: master})
		defer node.Close()
		// The key must reach the replica before its master dies.
		n, err := node.Do(ctx(t), "WAIT", 1, 2000).Int()
		require.NoError(t, err)
		require.Equal(t, 1, n, "replicas acknowledging")

		c.KillNode(t, master)
		killed := time.Now()
		served := c.WaitSlotServed(t, key, 15*time.Second)
		failover := time.Since(killed)
		assert.NotEqual(t, master, served)
		assert.Contains(t, c.Replicas, served, "a replica took over")
		assert.Equal(t, served, c.MasterFor(t, key))

		// go-redis (v9.23) refreshes a cluster client's slot map on MOVED or
		// ASK, or every ClusterStateReloadInterval (60 s by default), but not
		// on connection errors: a client with the default options keeps
		// dialling the dead master until told to reload.
		opts := &redis.ClusterOptions{Addrs: slices.Concat(c.Addrs, c.Replicas), ClusterStateReloadInterval: 500 * time.Millisecond}
		reloading := redis.NewClusterClient(opts)
		defer reloading.Close()
		got, err := retry(10*time.Second, func() (string, error) { return reloading.Get(ctx(t), key).Result() })
		require.NoError(t, err, "GET after failover with ClusterStateReloadInterval 500ms")
		assert.Equal(t, "before", got)
		t.Logf("failover %s -> %s: slot served after %v, a client reloading every 500ms reads after %v",
			master, served, failover.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

		start = time.Now()
		err = c.Client.Get(ctx(t), key).Err()
		t.Logf("the default client before ReloadState: %v after %v", err, time.Since(start).Round(time.Millisecond))
		c.Client.ReloadState(ctx(t)) // in the background
		got, err = retry(5*time.Second, func() (string, error) { return c.Client.Get(ctx(t), key).Result() })
		require.NoError(t, err, "GET after failover and ReloadState")
		assert.Equal(t, "before", got)
		require.NoError(t, c.Client.Set(ctx(t), key, "after", 0).Err())

		// The other masters were never affected.
		for i := range 50 {
			require.NoError(t, c.Client.Set(ctx(t), fmt.Sprintf("%s{%d}", Prefix(t), i), "x", 0).Err())
		}
	})
	if c == nil {
		t.Skip("the sub-test got no cluster")
	}
	for _, p := range c.nodes {
		assertStopped(t, p.Addr(), p.Process())
	}
}

// retry calls f until it succeeds or timeout has passed, and returns its
// last result.
func retry[T any](timeout time.Duration, f func() (T, error)) (T, error) {
	deadline := time.Now().Add(timeout)
	for {
		v, err := f()
		if err == nil || time.Now().After(deadline) {
			return v, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
