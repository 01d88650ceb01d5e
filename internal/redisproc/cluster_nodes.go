package redisproc

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID     string
	Addr   string   // host:port, without the bus port or hostname
	Flags  []string // myself, master, slave, fail?, fail, handshake, noaddr...
	Master string   // the master's id for a replica, else "-"
	Slots  [][2]int // inclusive ranges; slots being imported or migrated are left out
}

// HasFlag reports whether n has flag.
func (n ClusterNode) HasFlag(flag string) bool { return slices.Contains(n.Flags, flag) }

// Unhealthy returns the first flag that says n is failing or not fully
// known yet, or "".
func (n ClusterNode) Unhealthy() string {
	for _, f := range []string{"fail?", "fail", "handshake", "noaddr"} {
		if n.HasFlag(f) {
			return f
		}
	}
	return ""
}

// LowestSlot returns the lowest slot n owns; 16384 if none.
func (n ClusterNode) LowestSlot() int {
	low := clusterSlots
	for _, r := range n.Slots {
		low = min(low, r[0])
	}
	return low
}

// Serves reports whether n owns slot.
func (n ClusterNode) Serves(slot int) bool {
	for _, r := range n.Slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// ClusterNodes returns the node at addr's view of the cluster.
func ClusterNodes(addr string) ([]ClusterNode, error) {
	c := nodeClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(text)
}

// parseClusterNodes parses the reply of CLUSTER NODES: per line
// "<id> <ip:port@cport[,hostname]> <flags> <master> <ping-sent> <pong-recv>
// <config-epoch> <link-state> <slot or range>...". Slots being imported or
// migrated ("[...]") are skipped.
func parseClusterNodes(text string) ([]ClusterNode, error) {
	var nodes []ClusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: too few fields", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		n := ClusterNode{ID: f[0], Addr: addr, Flags: strings.Split(f[2], ","), Master: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, isRange := strings.Cut(s, "-")
			if !isRange {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES line %q: bad slot %q", line, s)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// clusterStateNotOK returns why the node at addr does not report
// cluster_state:ok, or "".
func clusterStateNotOK(addr string) string {
	c := nodeClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err.Error()
	}
	if state := InfoField(info, "cluster_state"); state != "ok" {
		return "cluster_state is " + state
	}
	return ""
}

// nodeClient returns a client to one node for polling it: short timeouts, no
// retries, one connection. The caller closes it.
func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         addr,
		DialTimeout:  nodeTimeout,
		ReadTimeout:  nodeTimeout,
		WriteTimeout: nodeTimeout,
		MaxRetries:   -1,
		PoolSize:     1,
	})
}

// WaitUntil calls notReady every interval until it returns "" or timeout has
// passed. The error then says what was still not ready, and what the
// other checks said: the last answer alone can hide why a minute went by
// (a node that timed out once, after a minute of another flagged failing).
func WaitUntil(timeout, interval time.Duration, notReady func() string) error {
	return waitUntil(time.Now, time.Sleep, timeout, interval, notReady)
}

// waitUntil is WaitUntil on the clock now and sleep.
func waitUntil(now func() time.Time, sleep func(time.Duration), timeout, interval time.Duration, notReady func() string) error {
	deadline := now().Add(timeout)
	var whys []string // the distinct answers, in the order first given (8 at most)
	count := map[string]int{}
	checks := 0
	for {
		why := notReady()
		if why == "" {
			return nil
		}
		checks++
		if _, ok := count[why]; ok || len(whys) < 8 {
			if !ok {
				whys = append(whys, why)
			}
			count[why]++
		}
		if now().After(deadline) {
			return fmt.Errorf("not ready within %v: %s%s", timeout, why, otherAnswers(whys, count, why, checks))
		}
		sleep(interval)
	}
}

// otherAnswers says what the checks other than the last answered, the most
// given first: "" when they all said last.
func otherAnswers(whys []string, count map[string]int, last string, checks int) string {
	var others []string
	for _, w := range whys {
		if w != last {
			others = append(others, w)
		}
	}
	if len(others) == 0 {
		return ""
	}
	slices.SortStableFunc(others, func(a, b string) int { return count[b] - count[a] })
	parts := make([]string, len(others))
	for i, w := range others {
		parts[i] = fmt.Sprintf("%q %d times", w, count[w])
	}
	return fmt.Sprintf(" (the last of %d checks, %d of which said so; the others said %s)", checks, count[last], strings.Join(parts, ", "))
}

// ReplicaNotSynced returns why the replica at addr has not finished its
// initial sync with its master, or "" if it has.
func ReplicaNotSynced(addr string) string {
	c := nodeClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return addr + ": " + err.Error()
	}
	for _, want := range [][2]string{
		{"role", "slave"},
		{"master_link_status", "up"},
		{"master_sync_in_progress", "0"},
	} {
		if got := InfoField(info, want[0]); got != want[1] {
			return fmt.Sprintf("%s: %s is %q, want %q", addr, want[0], got, want[1])
		}
	}
	return ""
}

// Role returns the first element of ROLE at addr: "master", "slave" or
// "sentinel".
func Role(addr string) (string, error) {
	c := nodeClient(addr)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), nodeTimeout)
	defer cancel()
	reply, err := c.Do(ctx, "ROLE").Slice()
	if err != nil {
		return "", err
	}
	if len(reply) == 0 {
		return "", fmt.Errorf("ROLE at %s: empty reply", addr)
	}
	r, _ := reply[0].(string)
	return r, nil
}
