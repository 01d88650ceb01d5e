package redistest

import (
	"time"

	"github.com/pacer-go/pacer/internal/redisproc"
)

const (
	nodeTimeout  = time.Second // bounds each command that polls a node or a sentinel
	pollInterval = 20 * time.Millisecond
)

// waitUntil calls notReady every interval until it returns "" or timeout has
// passed. The error then says what was still not ready.
func waitUntil(timeout, interval time.Duration, notReady func() string) error {
	return redisproc.WaitUntil(timeout, interval, notReady)
}

// replicaNotSynced returns why the replica at addr has not finished its
// initial sync with its master, or "" if it has.
func replicaNotSynced(addr string) string { return redisproc.ReplicaNotSynced(addr) }

// role returns the first element of ROLE at addr: "master", "slave" or
// "sentinel".
func role(addr string) (string, error) { return redisproc.Role(addr) }
