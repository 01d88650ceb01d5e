//go:build linux

package redisproc

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFIFO: a server started with Spec.FIFO runs under SCHED_FIFO at that
// priority, across a Restart too; a priority out of range starts nothing.
func TestFIFO(t *testing.T) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("redis-server is not on PATH")
	}
	s, err := Start(Spec{FIFO: 7})
	if err != nil && strings.Contains(err.Error(), "CAP_SYS_NICE") {
		t.Skipf("this process may not give real-time priorities: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(s.Close)
	policy, prio := schedOf(t, s.Process().Pid())
	assert.Equal(t, 1, policy, "SCHED_FIFO")
	assert.Equal(t, 7, prio)

	require.NoError(t, s.Restart())
	policy, prio = schedOf(t, s.Process().Pid())
	assert.Equal(t, 1, policy, "SCHED_FIFO after Restart")
	assert.Equal(t, 7, prio)

}

// TestNoFIFO: by default a server keeps the policy it inherits (this
// process's: SCHED_OTHER unless the tests run under chrt).
func TestNoFIFO(t *testing.T) {
	s := start(t, Spec{})
	policy, prio := schedOf(t, s.Process().Pid())
	ownPolicy, ownPrio := schedOf(t, os.Getpid())
	assert.Equal(t, ownPolicy, policy)
	assert.Equal(t, ownPrio, prio)
}

// schedOf returns pid's scheduling policy and real-time priority, from
// /proc/<pid>/stat (fields 41 and 40).
func schedOf(t *testing.T, pid int) (policy, prio int) {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	require.NoError(t, err)
	// The command name, in parentheses, may hold spaces: count from after it.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	// f[0] is field 3 (state): field n is f[n-3].
	prio, err = strconv.Atoi(f[40-3])
	require.NoError(t, err)
	policy, err = strconv.Atoi(f[41-3])
	require.NoError(t, err)
	return policy, prio
}
