package redistest

import (
	"testing"

	"github.com/pacer-go/pacer/internal/redisproc"
)

// Stop kills the server (SIGKILL: nothing is persisted) and waits until it
// has exited, so that it refuses connections from then on. The port stays
// reserved for a later Restart, and Addr and URL stay valid. Stopping a
// stopped server does nothing.
//
// Stop, Restart, Freeze and Thaw need a redis-server started by this package
// (Source is SourceProcess, as with NewProcess). For a server from REDIS_URL
// or a container they skip the test, or fail it when CI is set, as New does
// when there is no Redis.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.process(t, "Stop").Stop()
}

// Restart starts a new, empty redis-server on the same port and waits until
// it answers, stopping the running one first if need be. It retries for a
// few seconds while the port cannot be bound yet. Clients made before keep
// working: go-redis redials on its own, though a command that was in flight
// or that meets a connection to the old process may fail once.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.process(t, "Restart").Restart(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Freeze stops the server process with SIGSTOP, as a hung Redis: the kernel
// still accepts connections and takes in commands, but nothing is answered
// until Thaw. It returns once the process is stopped. The test's cleanup
// resumes the process before killing it, so nothing stays stopped.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	if err := s.process(t, "Freeze").Freeze(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Thaw resumes a server stopped by Freeze with SIGCONT; commands sent in the
// meantime are then answered. Thawing a running server does nothing.
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	if err := s.process(t, "Thaw").Thaw(); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// process returns the server's redis-server, or skips or fails t when the
// server is not a process of ours.
func (s *Server) process(t testing.TB, method string) *redisproc.Server {
	t.Helper()
	if s.proc == nil {
		unavailable(t, "Server.%s needs a redis-server started by this package, but this server comes from %s (use NewProcess)", method, s.Source)
	}
	return s.proc
}
