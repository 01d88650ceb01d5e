package redisproc

import (
	"context"
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

const (
	readyTimeout = 10 * time.Second // how long a started server has to answer
	pollInterval = 20 * time.Millisecond
	logTailLines = 20
)

// Process is one redis-server process. A Server has one at a time;
// Restart replaces it.
type Process struct {
	spec Spec
	port int
	dir  string // --dir; holds redis.log and output.log
	cmd  *exec.Cmd

	done    chan struct{} // closed once cmd.Wait has returned
	waitErr error         // cmd.Wait's result, readable after done
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Dir returns the process's directory (--dir), which holds its logs.
func (p *Process) Dir() string { return p.dir }

// State returns the process's state as the kernel reports it in
// /proc/<pid>/stat ('R' running, 'S' sleeping, 'T' stopped...), and false
// where there is no such file.
func (p *Process) State() (byte, bool) { return procState(p.Pid()) }

// Exited reports whether the process has exited and been reaped.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Process) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// launch starts sp on port in the new directory dir and waits until it
// answers; nodes, if not nil, is its cluster configuration (nodes.conf)
// from before. It neither reserves nor releases the port: the caller owns
// it.
func launch(sp Spec, dir string, port int, nodes []byte) (*Process, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	if nodes != nil {
		if err := os.WriteFile(filepath.Join(dir, "nodes.conf"), nodes, 0o600); err != nil {
			return nil, err
		}
	}
	var args []string
	if sp.Config != "" {
		conf := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(conf, []byte(sp.Config), 0o600); err != nil {
			return nil, err
		}
		args = append(args, conf)
	}
	out, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		return nil, err
	}
	args = append(args,
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	)
	cmd := exec.Command(sp.Bin, append(args, sp.Args...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out // an *os.File: no copying goroutine
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close() // the child has its own descriptor
	if err != nil {
		return nil, err
	}
	p := &Process{spec: sp, port: port, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if sp.FIFO != 0 {
		if err := setFIFO(p.Pid(), sp.FIFO); err != nil {
			p.kill()
			return nil, fifoError{fmt.Errorf("%s on %s: SCHED_FIFO at priority %d: %w", filepath.Base(sp.Bin), p.addr(), sp.FIFO, err)}
		}
	}
	if err := p.waitReady(readyTimeout); err != nil {
		p.kill()
		return nil, fmt.Errorf("%s on %s: %w\n%s", filepath.Base(sp.Bin), p.addr(), err, p.logTail())
	}
	return p, nil
}

// fifoError is a start that failed for Spec.FIFO: another port would not
// help, so Start does not try again.
type fifoError struct{ error }

func (e fifoError) Unwrap() error { return e.error }

// waitReady polls the server until it answers INFO with its own process id
// (so a foreign server that won the race for the port is not mistaken for
// ours), the process exits, or timeout passes.
func (p *Process) waitReady(timeout time.Duration) error {
	want := strconv.Itoa(p.Pid())
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-p.done:
			return fmt.Errorf("exited before answering: %v", p.waitErr)
		default:
		}
		pid, err := p.serverPID()
		if err == nil {
			if pid != want {
				return fmt.Errorf("port answered by another server (process_id %q, want %s)", pid, want)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer within %v: %w", timeout, err)
		}
		time.Sleep(pollInterval)
	}
}

// serverPID asks whatever listens on the process's port for its process_id.
// It first checks that the port accepts connections at all, so that a server
// still starting up never trips go-redis's dial retries and backoff.
func (p *Process) serverPID() (string, error) {
	conn, err := net.DialTimeout("tcp", p.addr(), 250*time.Millisecond)
	if err != nil {
		return "", err
	}
	_ = conn.Close()
	c := redis.NewClient(&redis.Options{
		Addr:         p.addr(),
		DialTimeout:  250 * time.Millisecond,
		ReadTimeout:  time.Second,
		WriteTimeout: time.Second,
		MaxRetries:   -1,
		PoolSize:     1,
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	return InfoField(info, "process_id"), nil
}

// kill kills the process (resuming it first, should it be stopped by
// SIGSTOP) and waits until it has been reaped. SIGKILL rather than SIGTERM:
// nothing is persisted, and redis-server only notices SIGTERM on its next
// cron tick, which would add up to 100 ms to every stop. It may be called
// any number of times.
func (p *Process) kill() {
	if p.Exited() {
		return
	}
	_ = resume(p.cmd.Process)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logTail returns the last lines of the server's log and of its stdout and
// stderr, for error messages.
func (p *Process) logTail() string {
	var b strings.Builder
	for _, name := range []string{"redis.log", "output.log"} {
		data, err := os.ReadFile(filepath.Join(p.dir, name))
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "--- tail of %s ---\n%s\n", name, strings.Join(lines, "\n"))
	}
	if b.Len() == 0 {
		return "(no log output)"
	}
	return b.String()
}

// InfoField returns the value of field in the text of an INFO reply.
func InfoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
