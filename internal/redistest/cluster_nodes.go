package redistest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pacer-go/pacer/internal/redisproc"
)

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id     string
	addr   string   // host:port, without the bus port or hostname
	flags  []string // myself, master, slave, fail?, fail, handshake, noaddr...
	master string   // the master's id for a replica, else "-"
	slots  [][2]int // inclusive ranges
}

func (n clusterNode) hasFlag(flag string) bool { return slices.Contains(n.flags, flag) }

// unhealthy returns the first flag that says n is failing or not fully
// known yet, or "".
func (n clusterNode) unhealthy() string {
	for _, f := range []string{"fail?", "fail", "handshake", "noaddr"} {
		if n.hasFlag(f) {
			return f
		}
	}
	return ""
}

func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// clusterNodes returns the node at addr's view of the cluster.
func clusterNodes(addr string) ([]clusterNode, error) {
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
func parseClusterNodes(text string) ([]clusterNode, error) {
	var nodes []clusterNode
	for line := range strings.SplitSeq(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: too few fields", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		n := clusterNode{id: f[0], addr: addr, flags: strings.Split(f[2], ","), master: f[3]}
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
			n.slots = append(n.slots, [2]int{a, b})
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
	if state := redisproc.InfoField(info, "cluster_state"); state != "ok" {
		return "cluster_state is " + state
	}
	return ""
}
