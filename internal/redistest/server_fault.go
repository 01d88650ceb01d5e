package redistest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// restartLimit bounds how long Restart keeps trying to bind the old port.
const restartLimit = 5 * time.Second

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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current(t, "Stop").terminate()
}

// Restart starts a new, empty redis-server on the same port and waits until
// it answers, stopping the running one first if need be. It retries for a
// few seconds while the port cannot be bound yet. Clients made before keep
// working: go-redis redials on its own, though a command that was in flight
// or that meets a connection to the old process may fail once.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.current(t, "Restart")
	old.terminate()
	deadline := time.Now().Add(restartLimit)
	for attempt := 1; ; attempt++ {
		s.restarts++
		// Under the directory of the first process, which t.TempDir removes.
		dir := filepath.Join(filepath.Dir(old.dir), fmt.Sprintf("restart%d-%d", s.restarts, old.port))
		p, err := launch(old.spec, dir, old.port)
		if err == nil {
			s.proc = p
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: restart %s: %d attempts in %v, last: %v", s.Addr, attempt, restartLimit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Freeze stops the server process with SIGSTOP, as a hung Redis: the kernel
// still accepts connections and takes in commands, but nothing is answered
// until Thaw. It returns once the process is stopped. The test's cleanup
// resumes the process before killing it, so nothing stays stopped.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.current(t, "Freeze")
	if p.exited() {
		t.Fatalf("redistest: Freeze %s: the server is stopped", s.Addr)
	}
	if err := pause(p.cmd.Process); err != nil {
		t.Fatalf("redistest: Freeze %s: %v", s.Addr, err)
	}
}

// Thaw resumes a server stopped by Freeze with SIGCONT; commands sent in the
// meantime are then answered. Thawing a running server does nothing.
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.current(t, "Thaw")
	if p.exited() {
		t.Fatalf("redistest: Thaw %s: the server is stopped", s.Addr)
	}
	if err := resume(p.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("redistest: Thaw %s: %v", s.Addr, err)
	}
}

// current returns the server's running process, or skips or fails t when
// the server is not a process of ours. s.mu must be held.
func (s *Server) current(t testing.TB, method string) *process {
	t.Helper()
	if s.proc == nil {
		unavailable(t, "Server.%s needs a redis-server started by this package, but this server comes from %s (use NewProcess)", method, s.Source)
	}
	return s.proc
}

// kill kills the current process, whichever Restart left; for t.Cleanup.
func (s *Server) kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.proc.terminate()
}
