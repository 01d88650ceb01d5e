package redistest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSentinelFailover(t *testing.T) {
	var s *Sentinel
	t.Run("failover", func(t *testing.T) {
		start := time.Now()
		s = NewSentinel(t)
		t.Logf("master, replica and %d sentinels ready in %v", len(s.SentinelAddrs), time.Since(start).Round(time.Millisecond))
		require.Len(t, s.SentinelAddrs, 3)
		key := Prefix(t) + "k"
		require.NoError(t, s.Client.Set(ctx(t), key, "before", 0).Err())
		// The key must reach the replica before its master dies.
		n, err := s.Client.Do(ctx(t), "WAIT", 1, 2000).Int()
		require.NoError(t, err)
		require.Equal(t, 1, n, "replicas acknowledging")

		old := s.MasterAddr(t)
		assert.Equal(t, old, s.KillMaster(t))
		killed := time.Now()
		master := s.WaitFailover(t, 20*time.Second)
		failover := time.Since(killed)
		assert.NotEqual(t, old, master)
		assert.Equal(t, master, s.MasterAddr(t))

		// The failover client finds the new master by itself.
		var writeErr error
		require.Eventually(t, func() bool {
			writeErr = s.Client.Set(ctx(t), key, "after", 0).Err()
			return writeErr == nil
		}, 10*time.Second, 50*time.Millisecond, "write after failover: %v", writeErr)
		t.Logf("failover %s -> %s: sentinels agree after %v, failover client writes after %v",
			old, master, failover.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))
		got, err := s.Client.Get(ctx(t), key).Result()
		require.NoError(t, err)
		assert.Equal(t, "after", got)
	})
	if s == nil {
		t.Skip("the sub-test got no sentinel setup")
	}
	for _, p := range s.sentinels {
		assertStopped(t, p.Addr(), p.Process())
	}
	for addr, p := range s.data {
		assertStopped(t, addr, p.Process())
	}
}
