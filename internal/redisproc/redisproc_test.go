package redisproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// start starts a server for sp or skips t when redis-server is not on PATH
// (internal/redistest's tests fail instead when CI is set).
func start(t *testing.T, sp Spec) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil && sp.Bin == "" {
		t.Skip("redis-server is not on PATH")
	}
	s, err := Start(sp)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func TestStartClose(t *testing.T) {
	s := start(t, Spec{})
	assert.Regexp(t, `^127\.0\.0\.1:\d+$`, s.Addr())
	assert.Equal(t, "redis://"+s.Addr()+"/0", s.URL())
	assert.True(t, Reserved(s.Port()))
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	require.NoError(t, err)
	assert.Equal(t, fmt.Sprint(s.Process().Pid()), InfoField(info, "process_id"))
	assert.Equal(t, "", InfoField(info, "no_such_field"))

	p := s.Process()
	s.Close()
	s.Close() // a no-op
	assert.True(t, p.Exited())
	assert.False(t, Reserved(s.Port()), "the port is released")
	_, err = os.Stat(p.Dir())
	assert.True(t, errors.Is(err, os.ErrNotExist), "%s not removed: %v", p.Dir(), err)
	if conn, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after Close", s.Addr())
	}
	assert.Error(t, s.Restart(), "Restart after Close")
}

func TestStartFailureReportsLog(t *testing.T) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not on PATH")
	}
	_, err = Start(Spec{Bin: bin, Args: []string{"--no-such-directive", "1"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("attempt %d:", startAttempts), "retried")
	assert.Contains(t, err.Error(), "exited before answering")
	assert.Contains(t, err.Error(), "no-such-directive", "log tail included")
	reserved.Lock()
	defer reserved.Unlock()
	assert.Empty(t, reserved.ports, "ports of failed starts released")
}

func TestWaitReadyRejectsForeignServer(t *testing.T) {
	s := start(t, Spec{})
	// A process that is not the server listening on s's port.
	cmd := exec.Command(s.spec.Bin, "--version")
	require.NoError(t, cmd.Start())
	p := &Process{port: s.port, cmd: cmd, done: make(chan struct{})}
	defer func() { _ = cmd.Wait() }()
	err := p.waitReady(time.Second)
	assert.ErrorContains(t, err, "port answered by another server")
}

// TestClusterNodeRestartKeepsItsSlots: a master restarted (Restart) comes
// back as the same node with the same slots, as one restarted on its own
// disk does, and empty; the cluster serves its slots again.
func TestClusterNodeRestartKeepsItsSlots(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Skip("redis-cli is not on PATH")
	}
	start(t, Spec{}) // skips without redis-server
	c, err := StartCluster(ClusterSpec{Masters: 3})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Masters})
	defer rdb.Close()
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	ms, err := c.MastersBySlot()
	require.NoError(t, err)
	require.Len(t, ms, 3)
	assert.True(t, ms[0].Serves(0) && ms[2].Serves(16383), "by the slots they serve: %v", ms)
	slot, err := c.KeySlot("k")
	require.NoError(t, err)
	owner, err := c.SlotOwner(slot)
	require.NoError(t, err)

	node := c.Node(owner.Addr)
	require.NotNil(t, node)
	require.NoError(t, node.Restart())
	require.NoError(t, c.WaitOK(20*time.Second), "the cluster whole again")
	served, err := c.WaitSlotServed(slot, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, owner.Addr, served, "the restarted node serves its slot again")
	after, err := c.SlotOwner(slot)
	require.NoError(t, err)
	assert.Equal(t, owner.ID, after.ID, "the same node, by its id")
	nc := nodeClient(owner.Addr)
	defer nc.Close()
	n, err := nc.DBSize(ctx).Result()
	require.NoError(t, err)
	assert.Zero(t, n, "restarted empty")
}

// TestWaitUntilSaysWhatTheChecksSaid: the error of a wait that timed out
// gives the last answer and the others, the most given first (a failed
// pacerbench run said only "i/o timeout" after a minute of checks).
func TestWaitUntilSaysWhatTheChecksSaid(t *testing.T) {
	clock := time.Unix(0, 0)
	now := func() time.Time { return clock }
	sleep := func(d time.Duration) { clock = clock.Add(d) }
	answers := []string{"b", "a", "a", "a", "c"} // then "c": checks at 0 to 5 s, the deadline 4 s
	i := 0
	err := waitUntil(now, sleep, 4*time.Second, time.Second, func() string {
		w := answers[min(i, len(answers)-1)]
		i++
		return w
	})
	want := `not ready within 4s: c (the last of 6 checks, 2 of which said so; the others said "a" 3 times, "b" 1 times)`
	if err == nil || err.Error() != want {
		t.Errorf("waitUntil = %v\nwant %s", err, want)
	}
	i = 0
	answers = []string{"x", "x", ""}
	if err := waitUntil(now, sleep, time.Minute, time.Second, func() string {
		w := answers[i]
		i++
		return w
	}); err != nil || i != 3 {
		t.Errorf("waitUntil = %v after %d checks; want nil after 3", err, i)
	}
	i = 0
	if err := waitUntil(now, sleep, 0, time.Second, func() string { i++; return "y" }); err == nil || err.Error() != "not ready within 0s: y" {
		t.Errorf("waitUntil = %v; want the one answer alone", err)
	}
}

// TestFIFORange: a priority outside 1 to 99 is refused before any process
// starts (here the binary does not even exist). Before, the server was
// started first and then stopped when the kernel call refused it.
func TestFIFORange(t *testing.T) {
	for _, prio := range []int{-1, 100} {
		_, err := Start(Spec{Bin: filepath.Join(t.TempDir(), "no-redis-server"), FIFO: prio})
		require.Error(t, err)
		assert.Contains(t, err.Error(), fmt.Sprintf("Spec.FIFO: priority %d: want 1 to 99", prio))
		assert.NotContains(t, err.Error(), "attempt ", "a process was started")
	}
}
