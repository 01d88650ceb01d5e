package redisproc

import (
	"fmt"
	"net"
	"sync"
)

// clusterBusOffset is the distance between a cluster node's client port and
// its cluster bus port when no cluster-port is configured.
const clusterBusOffset = 10000

// reserved holds the ports handed to servers of this process that have not
// been released yet, so that two servers started in parallel never pick the
// same port even if the kernel hands it out twice.
var reserved = struct {
	sync.Mutex
	ports map[int]bool
}{ports: make(map[int]bool)}

// pickPort returns a port on 127.0.0.1 that was free a moment ago. If withBus
// is set, port+10000 was free too (a cluster node needs it for its bus). The
// port stays reserved in this process until releasePort is called. Someone
// else may still take it before the server binds it: callers retry.
func pickPort(withBus bool) (int, error) {
	const attempts = 50
	var lastErr error
	for range attempts {
		port, err := listenFree(0)
		if err != nil {
			return 0, err
		}
		if withBus {
			if port+clusterBusOffset > 65535 {
				lastErr = fmt.Errorf("port %d leaves no room for its cluster bus port", port)
				continue
			}
			if _, err := listenFree(port + clusterBusOffset); err != nil {
				lastErr = err
				continue
			}
		}
		if reserve(port, withBus) {
			return port, nil
		}
		lastErr = fmt.Errorf("port %d is already used by a server of this process", port)
	}
	return 0, fmt.Errorf("no free port on 127.0.0.1 after %d attempts: %w", attempts, lastErr)
}

// listenFree binds 127.0.0.1:port (0 for any), closes it again and returns the
// port that was bound.
func listenFree(port int) (int, error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return 0, err
	}
	p := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return p, nil
}

func reserve(port int, withBus bool) bool {
	reserved.Lock()
	defer reserved.Unlock()
	if reserved.ports[port] || (withBus && reserved.ports[port+clusterBusOffset]) {
		return false
	}
	reserved.ports[port] = true
	if withBus {
		reserved.ports[port+clusterBusOffset] = true
	}
	return true
}

// Reserved reports whether port belongs to a server of this process that
// has not been closed.
func Reserved(port int) bool {
	reserved.Lock()
	defer reserved.Unlock()
	return reserved.ports[port]
}

func releasePort(port int, withBus bool) {
	reserved.Lock()
	defer reserved.Unlock()
	delete(reserved.ports, port)
	if withBus {
		delete(reserved.ports, port+clusterBusOffset)
	}
}
