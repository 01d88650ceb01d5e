package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is a throwaway redis-server this program started: persistence off,
// listening on 127.0.0.1 only, in its own temporary directory. (It cannot be
// internal/redistest's: that one ties every server to a *testing.T.)
type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd.Wait has returned
}

// startServer starts redis-server from PATH on a free loopback port and waits
// until it answers. A start that fails (someone took the port first) is
// retried on another port a few times.
func startServer() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("pacerbench: no -redis given and %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-redis-*")
	if err != nil {
		return nil, err
	}
	var errs []error
	for attempt := 1; attempt <= 5; attempt++ {
		s, err := launch(bin, dir)
		if err == nil {
			return s, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
	}
	os.RemoveAll(dir)
	return nil, fmt.Errorf("pacerbench: could not start redis-server: %w", errors.Join(errs...))
}

func launch(bin, dir string) (*server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(10 * time.Second); err != nil {
		s.kill()
		log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
		return nil, fmt.Errorf("%s: %w\n%s", s.addr, err, log)
	}
	return s, nil
}

// waitReady polls until the server answers INFO with its own process id, so
// that a foreign server that won the race for the port is not taken for ours.
func (s *server) waitReady(timeout time.Duration) error {
	want := strconv.Itoa(s.cmd.Process.Pid)
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-s.done:
			return errors.New("exited before answering")
		default:
		}
		pid, err := s.pid()
		if err == nil {
			if pid != want {
				return fmt.Errorf("port answered by another server (process_id %s, want %s)", pid, want)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %v: %w", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *server) pid() (string, error) {
	conn, err := net.DialTimeout("tcp", s.addr, 250*time.Millisecond)
	if err != nil {
		return "", err
	}
	conn.Close()
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return infoField(info, "process_id"), nil
}

// url is the server's address for go-redis and for child processes.
func (s *server) url() string { return "redis://" + s.addr + "/0" }

// stop kills the server, waits for it and removes its directory.
func (s *server) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}

func (s *server) kill() {
	select {
	case <-s.done:
		return
	default:
	}
	// SIGKILL: nothing is persisted, and SIGTERM waits for the next cron tick.
	_ = s.cmd.Process.Kill()
	<-s.done
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
