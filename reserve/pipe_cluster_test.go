package reserve_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/redistest"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// clusterPipe is a Limiter on a Cluster of 3 masters, on a client set up
// as pacer needs it (so New uses it, hooks and all), whose every master's
// own client records the commands naming mark (byNode, by address).
type clusterPipe struct {
	prefix string
	c      *redistest.Cluster
	cc     *redis.ClusterClient
	l      *reserve.Limiter
	mu     sync.Mutex
	byNode map[string]*keyCommands
}

func newClusterPipe(t *testing.T, mark string, opts reserve.Options) *clusterPipe {
	t.Helper()
	p := &clusterPipe{c: redistest.NewCluster(t, 3), byNode: map[string]*keyCommands{}}
	p.cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: p.c.Addrs, MaxRetries: -1, ContextTimeoutEnabled: true, DialerRetries: 1})
	t.Cleanup(func() { _ = p.cc.Close() })
	p.cc.OnNewNode(func(n *redis.Client) {
		h := newKeyCommands(mark)
		p.mu.Lock()
		p.byNode[n.Options().Addr] = h
		p.mu.Unlock()
		n.AddHook(h)
	})
	opts.RequireRedis = true
	opts.KeyPrefix = redistest.Prefix(t)
	p.prefix = opts.KeyPrefix
	l, err := reserve.New(p.cc, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	p.l = l
	return p
}

// node returns the commands the master at addr was sent.
func (p *clusterPipe) node(addr string) *keyCommands {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byNode[addr]
}

// keysByMaster returns n keys named prefix<i> for each master, by the
// master's address, and the master of the fleet's records.
func (p *clusterPipe) keysByMaster(t *testing.T, prefix string, n int) (keys map[string][]string, fleet string) {
	t.Helper()
	keys = map[string][]string{}
	for i := 0; len(keys) < len(p.c.Addrs) || !enough(keys, n); i++ {
		k := fmt.Sprintf("%s%d", prefix, i)
		m := p.c.MasterFor(t, p.l.RedisKey(k))
		if len(keys[m]) < n {
			keys[m] = append(keys[m], k)
		}
	}
	return keys, p.c.MasterFor(t, layout.FleetKeys(p.prefix)[0])
}

func enough(keys map[string][]string, n int) bool {
	for _, ks := range keys {
		if len(ks) < n {
			return false
		}
	}
	return true
}

// TestPipelinedClusterLanes: on a Cluster each master has a lane of its
// own: script calls made while the lanes are busy go as one pipeline per
// master, each carrying exactly the calls whose keys that master owns, and
// each call is granted by Redis on its key's master.
func TestPipelinedClusterLanes(t *testing.T) {
	t.Parallel()
	p := newClusterPipe(t, "cpipe", reserve.Options{})
	keys, _ := p.keysByMaster(t, "cpipe", 4)
	var all []string
	for _, ks := range keys {
		all = append(all, ks...)
	}
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	res := make([]*reserve.Reservation, len(all))
	_, sent0 := reserve.PipeQueued(p.l)
	send := holdPipe(t, p.l, len(all), func(i int) (err error) {
		res[i], err = p.l.Reserve(ctx, all[i], lim)
		return err
	})
	for i, err := range send() {
		require.NoError(t, err, "caller %d", i)
		require.False(t, res[i].Local(), "caller %d: granted by Redis", i)
	}
	_, sent := reserve.PipeQueued(p.l)
	require.Equal(t, sent0+int64(len(keys)), sent, "one pipeline per master")

	for addr, ks := range keys {
		h := p.node(addr)
		require.NotNil(t, h, "master %s was sent commands", addr)
		h.mu.Lock()
		require.Equal(t, []int{len(ks)}, h.sizes, "master %s: one pipeline of its keys' calls", addr)
		for _, k := range ks {
			require.Equal(t, []string{"evalsha"}, h.piped[p.l.RedisKey(k)], "key %s on its master %s", k, addr)
		}
		h.mu.Unlock()
		for _, k := range ks {
			n, err := p.cc.Exists(ctx, p.l.RedisKey(k)).Result()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "key %s's state is on Redis", k)
		}
	}
}

// TestPipelinedClusterMasterHangs: a master that hangs holds only its own
// slots' calls. With one of the masters frozen (SIGSTOP) and a call on one
// of its keys in flight, calls on the other masters' keys are granted by
// Redis while that call still waits; once the master is thawed, its call
// is granted too.
func TestPipelinedClusterMasterHangs(t *testing.T) {
	t.Parallel()
	// A CallTimeout that no loaded machine reaches: the frozen master's
	// call stays in flight until it is thawed.
	p := newClusterPipe(t, "chang", reserve.Options{CallTimeout: time.Minute})
	keys, fleet := p.keysByMaster(t, "chang", 3)
	var frozen string
	for addr := range keys {
		if addr != fleet {
			frozen = addr
			break
		}
	}
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	// A master silent past cluster-node-timeout (5 s) is marked failed,
	// and without replicas the Cluster would then refuse every slot
	// (CLUSTERDOWN): on a loaded machine this test may take that long. The
	// other masters serve their own slots whatever the frozen one's state.
	for _, addr := range p.c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err()
		n.Close()
		require.NoError(t, err)
	}
	thaw := p.c.FreezeNode(t, frozen)

	stuck := make(chan error, 1)
	go func() {
		r, err := p.l.Reserve(ctx, keys[frozen][0], lim)
		if err == nil && r.Local() {
			err = fmt.Errorf("granted locally")
		}
		stuck <- err
	}()
	// It is in flight once the frozen master's client has been handed it.
	stuckKey := p.l.RedisKey(keys[frozen][0])
	require.Eventually(t, func() bool {
		h := p.node(frozen)
		if h == nil {
			return false
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return len(h.cmds[stuckKey]) > 0
	}, 30*time.Second, time.Millisecond, "the call on the frozen master is sent")

	var wg sync.WaitGroup
	errs := map[string]error{}
	var mu sync.Mutex
	for addr, ks := range keys {
		if addr == frozen {
			continue
		}
		for _, k := range ks {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				r, err := p.l.Reserve(cctx, k, lim)
				if err == nil && r.Local() {
					err = fmt.Errorf("granted locally")
				}
				mu.Lock()
				errs[k] = err
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	select {
	case err := <-stuck:
		t.Fatalf("the call on the frozen master returned before its master was thawed: %v", err)
	default:
	}
	require.Len(t, errs, 2*3)
	for k, err := range errs {
		require.NoError(t, err, "key %s, on a master that answers", k)
	}
	thaw()
	require.NoError(t, <-stuck, "the call on the thawed master")
}

// TestPipelinedClusterMoved: a call a pipeline takes to the master its
// client's map of slots names, after the slot has moved elsewhere, is
// refused there with MOVED (it did not run) and sent again through the
// Cluster client, which follows the redirection: it is granted on the
// slot's new master, once, and the pipeline's other calls are not sent
// again. No call fails: a slot that moved is not an outage (each such
// failure would count towards local pacing, FailAfter, through a live
// resharding).
func TestPipelinedClusterMoved(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	p := newClusterPipe(t, "cmove", reserve.Options{Metrics: rec})
	keys, fleet := p.keysByMaster(t, "cmove", 4)
	ctx := context.Background()
	lim := reserve.Limit{Rate: 1, Burst: 1}
	// Every master has the script (a call of its own on each), so that each
	// call below is one EVALSHA where it runs.
	for _, ks := range keys {
		_, err := p.l.Reserve(ctx, ks[3], lim)
		require.NoError(t, err)
	}
	var from, to string
	for addr := range keys {
		switch {
		case addr == fleet:
		case from == "":
			from = addr
		case to == "":
			to = addr
		}
	}
	if to == "" {
		to = fleet
	}
	moved := keys[from][0]
	slot, err := p.cc.ClusterKeySlot(ctx, p.l.RedisKey(moved)).Result()
	require.NoError(t, err)
	// The slot is empty: each master is told its new owner, and the
	// Limiter's client is not (it learns from MOVED, or its reload in 10 s).
	nc := redis.NewClient(&redis.Options{Addr: to})
	defer nc.Close()
	toID, err := nc.ClusterMyID(ctx).Result()
	require.NoError(t, err)
	for _, addr := range p.c.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", toID).Err()
		n.Close()
		require.NoError(t, err, "SETSLOT on %s", addr)
	}

	batch := keys[from][:3]
	res := make([]*reserve.Reservation, len(batch))
	send := holdPipe(t, p.l, len(batch), func(i int) (err error) {
		res[i], err = p.l.Reserve(ctx, batch[i], lim)
		return err
	})
	for i, err := range send() {
		require.NoError(t, err, "caller %d", i)
		require.False(t, res[i].Local(), "caller %d (%s): granted by Redis", i, batch[i])
	}

	rec.mu.Lock()
	require.Zero(t, rec.c.errors, "Redis calls that failed")
	rec.mu.Unlock()

	h := p.node(from)
	h.mu.Lock()
	for _, k := range batch {
		rk := p.l.RedisKey(k)
		require.Equal(t, []string{"evalsha"}, h.piped[rk], "key %s went in the pipeline to %s", k, from)
		if k != moved {
			require.Equal(t, []string{"evalsha"}, h.cmds[rk], "key %s was sent to %s once", k, from)
		}
	}
	h.mu.Unlock()
	for i, k := range batch {
		owner := from
		if k == moved {
			owner = to
		}
		n := redis.NewClient(&redis.Options{Addr: owner})
		exists, err := n.Exists(ctx, p.l.RedisKey(k)).Result()
		n.Close()
		require.NoError(t, err)
		require.EqualValues(t, 1, exists, "key %s's state is on %s", k, owner)
		// Charged once: a second call's slot is the first one's plus
		// 1/rate.
		r, err := p.l.Reserve(ctx, k, lim)
		require.NoError(t, err)
		first, ok1 := reserve.ServerSlot(res[i])
		second, ok2 := reserve.ServerSlot(r)
		require.True(t, ok1 && ok2)
		require.InDelta(t, float64(time.Second), float64(second-first), float64(time.Microsecond), "key %s's second slot", k)
	}
}
