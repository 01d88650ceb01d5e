package reserve_test

import (
	"context"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestClusterMovedIsNotAnError: while the masters of a Redis Cluster
// disagree on who owns a key's slot (a failover or a resharding under
// way, as the views settle), each says the other does, and a command gets
// MOVED after MOVED until the go-redis Cluster client has spent its
// redirects (MaxRedirects, 3) and returns the last MOVED. That is Redis
// not serving the key for a while, as CLUSTERDOWN or TRYAGAIN: a caller
// who can wait must not get it as an error (the cmd/pacerbench cluster
// phase met it in a failover, on a loaded machine). The test makes the
// masters disagree (CLUSTER SETSLOT ... NODE on the owner alone), Waits,
// and puts the slot back 300 ms later.
func TestClusterMovedIsNotAnError(t *testing.T) {
	t.Parallel()
	c := redistest.NewCluster(t, 3)
	l, err := reserve.New(c.NewClient(t), reserve.Options{KeyPrefix: redistest.Prefix(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })

	key := "api.example.com"
	rk := l.RedisKey(key)
	ctx := context.Background()
	slot, err := c.Client.ClusterKeySlot(ctx, rk).Result()
	require.NoError(t, err)
	owner := c.MasterFor(t, rk)
	other := c.Addrs[0]
	if other == owner {
		other = c.Addrs[1]
	}
	id := func(addr string) string {
		n := redis.NewClient(&redis.Options{Addr: addr})
		defer n.Close()
		id, err := n.Do(ctx, "CLUSTER", "MYID").Text()
		require.NoError(t, err)
		return id
	}
	ownerID, otherID := id(owner), id(other)
	node := redis.NewClient(&redis.Options{Addr: owner})
	defer node.Close()
	// The owner now says other owns the slot; other still says the owner
	// does.
	require.NoError(t, node.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", otherID).Err())
	healed := make(chan struct{})
	go func() {
		defer close(healed)
		time.Sleep(300 * time.Millisecond)
		// Not t's require: another goroutine. The Wait below fails the
		// test should this not heal it.
		_ = node.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", ownerID).Err()
	}()

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = l.Wait(wctx, key, reserve.Limit{Rate: 10, Burst: 1})
	<-healed
	require.NoError(t, err, "Wait while the masters disagree on the owner of slot %d", slot)
}
