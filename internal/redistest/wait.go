package redistest

import (
	"context"
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

const (
	nodeTimeout  = time.Second // bounds each command that polls a node or a sentinel
	pollInterval = 20 * time.Millisecond
)

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

// waitUntil calls notReady every interval until it returns "" or timeout has
// passed. The error then says what was still not ready.
func waitUntil(timeout, interval time.Duration, notReady func() string) error {
	deadline := time.Now().Add(timeout)
	for {
		why := notReady()
		if why == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v: %s", timeout, why)
		}
		time.Sleep(interval)
	}
}

// replicaNotSynced returns why the replica at addr has not finished its
// initial sync with its master, or "" if it has.
func replicaNotSynced(addr string) string {
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
		if got := redisproc.InfoField(info, want[0]); got != want[1] {
			return fmt.Sprintf("%s: %s is %q, want %q", addr, want[0], got, want[1])
		}
	}
	return ""
}

// role returns the first element of ROLE at addr: "master", "slave" or
// "sentinel".
func role(addr string) (string, error) {
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
