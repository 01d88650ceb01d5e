// Package redisproc starts throwaway redis-server processes: on a free
// 127.0.0.1 port, with persistence off, each in a temporary directory of
// its own, and stops, restarts, freezes and thaws them by process id.
//
// It knows nothing of testing: internal/redistest wraps it for tests (with
// t.Cleanup and its skip-or-fail rules), and cmd/pacerbench uses it as is.
//
//	srv, err := redisproc.Start(redisproc.Spec{})
//	if err != nil { ... }
//	defer srv.Close()
//	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
package redisproc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

const (
	startAttempts = 5               // ports tried before giving up on a server
	restartLimit  = 5 * time.Second // how long Restart keeps trying to bind the old port
)

// Spec says how to start a redis-server; Restart reuses it.
type Spec struct {
	// Bin is the redis-server binary. Default (""): redis-server from PATH.
	Bin string
	// ClusterBus reserves port+10000 too, which a cluster node needs for
	// its bus.
	ClusterBus bool
	// Args come after the package's own arguments (--port, --bind
	// 127.0.0.1, --save "", --appendonly no, --dir, --logfile).
	Args []string
	// Config, if not empty, is written to redis.conf in the process's
	// directory, whose path becomes redis-server's first argument
	// (Sentinel needs a configuration file).
	Config string
	// FIFO, if not 0, is a real-time priority (1 to 99): each process
	// started runs its main thread under SCHED_FIFO at it, so that the
	// machine's other processes do not preempt it and a command's time in
	// SLOWLOG is Redis's own work, as on a host of its own (pacerbench's
	// -fifo). Linux only, and it needs root or CAP_SYS_NICE: a start where
	// the kernel refuses it fails.
	FIFO int
}

// checkFIFO checks a real-time priority (Spec.FIFO).
func checkFIFO(prio int) error {
	if prio < 1 || prio > 99 {
		return fmt.Errorf("priority %d: want 1 to 99", prio)
	}
	return nil
}

// Server is a redis-server started by Start, on a port that stays its own
// until Close, across Stop and Restart. Its methods are safe for concurrent
// use.
type Server struct {
	spec Spec
	port int
	dir  string // its temporary directory: one subdirectory per process

	mu       sync.Mutex // guards proc, launches and closed
	proc     *Process   // the current process; Restart replaces it
	launches int
	closed   bool
}

// Start starts a redis-server on a free loopback port, in a new temporary
// directory, and waits until it answers INFO with its own process id (so a
// foreign server that took the port first is never mistaken for it). A
// start that fails, for example because someone took the port first, is
// retried on another port a few times. The error then holds the end of
// each attempt's log.
func Start(sp Spec) (*Server, error) {
	if sp.FIFO != 0 {
		if err := checkFIFO(sp.FIFO); err != nil {
			return nil, fmt.Errorf("redisproc: Spec.FIFO: %w", err)
		}
	}
	if sp.Bin == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return nil, err
		}
		sp.Bin = bin
	}
	dir, err := os.MkdirTemp("", "redisproc-")
	if err != nil {
		return nil, err
	}
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		s := &Server{spec: sp, dir: dir}
		if err := s.tryStart(); err != nil {
			errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
			if errors.As(err, new(fifoError)) {
				break
			}
			continue
		}
		return s, nil
	}
	_ = os.RemoveAll(dir)
	return nil, fmt.Errorf("redisproc: could not start %s: %w", sp.Bin, errors.Join(errs...))
}

// tryStart reserves a free port and launches the server on it. The port is
// released again if the launch fails.
func (s *Server) tryStart() error {
	port, err := pickPort(s.spec.ClusterBus)
	if err != nil {
		return err
	}
	s.port = port
	if err := s.launch(); err != nil {
		releasePort(port, s.spec.ClusterBus)
		return err
	}
	return nil
}

// launch starts a process on s.port in a new subdirectory. s.mu is held,
// or s is not shared yet. A cluster node (Spec.ClusterBus) started again
// takes its last process's cluster configuration (nodes.conf) with it, as
// a node restarted on its own disk does: it comes back as the same node,
// owning the same slots, with no data.
func (s *Server) launch() error {
	s.launches++
	dir := filepath.Join(s.dir, fmt.Sprintf("%d-%d", s.launches, s.port))
	var nodes []byte
	if s.spec.ClusterBus && s.launches > 1 {
		b, err := os.ReadFile(filepath.Join(s.dir, fmt.Sprintf("%d-%d", s.launches-1, s.port), "nodes.conf"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		nodes = b
	}
	p, err := launch(s.spec, dir, s.port, nodes)
	if err != nil {
		return err
	}
	s.proc = p
	return nil
}

// Addr returns the server's host:port, 127.0.0.1 and its port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL returns redis://host:port/0, for go-redis's ParseURL and child
// processes.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Port returns the server's port.
func (s *Server) Port() int { return s.port }

// Process returns the server's current process.
func (s *Server) Process() *Process {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// Stopped reports whether the current process has exited (after Stop, or
// by itself).
func (s *Server) Stopped() bool { return s.Process().Exited() }

// Stop kills the server (SIGKILL: nothing is persisted) and waits until it
// has exited, so that it refuses connections from then on. The port stays
// reserved for a later Restart. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.Process().kill() }

// Restart starts a new, empty redis-server on the same port and waits until
// it answers, stopping the running one first if need be. It retries for a
// few seconds while the port cannot be bound yet. Clients made before keep
// working: go-redis redials on its own, though a command that was in flight
// or that meets a connection to the old process may fail once.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redisproc: Restart after Close")
	}
	s.proc.kill()
	deadline := time.Now().Add(restartLimit)
	for attempt := 1; ; attempt++ {
		err := s.launch()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: restart %s: %d attempts in %v, last: %w", s.Addr(), attempt, restartLimit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Freeze stops the server process with SIGSTOP, as a hung Redis: the kernel
// still accepts connections and takes in commands, but nothing is answered
// until Thaw. It returns once the process is stopped. Close and Stop resume
// a frozen process before killing it.
func (s *Server) Freeze() error {
	p := s.Process()
	if p.Exited() {
		return fmt.Errorf("redisproc: Freeze %s: the server is stopped", s.Addr())
	}
	if err := pause(p.cmd.Process); err != nil {
		return fmt.Errorf("redisproc: Freeze %s: %w", s.Addr(), err)
	}
	return nil
}

// Thaw resumes a server stopped by Freeze with SIGCONT; commands sent in the
// meantime are then answered. Thawing a running server does nothing.
func (s *Server) Thaw() error {
	p := s.Process()
	if p.Exited() {
		return fmt.Errorf("redisproc: Thaw %s: the server is stopped", s.Addr())
	}
	if err := resume(p.cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redisproc: Thaw %s: %w", s.Addr(), err)
	}
	return nil
}

// LogTail returns the last lines of the current process's log and output,
// for error messages.
func (s *Server) LogTail() string { return s.Process().logTail() }

// Close kills the server, waits until it has been reaped, releases its
// ports and removes its directory. Only the first call does anything.
func (s *Server) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	s.proc.kill()
	releasePort(s.port, s.spec.ClusterBus)
	_ = os.RemoveAll(s.dir)
}
