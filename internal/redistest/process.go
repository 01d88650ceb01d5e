package redistest

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
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	startAttempts = 5                // ports tried before giving up on a server
	readyTimeout  = 10 * time.Second // how long a started server has to answer
	pollInterval  = 20 * time.Millisecond
	logTailLines  = 20
)

// process is one redis-server started by this package.
type process struct {
	bin     string
	port    int
	withBus bool   // port+10000 is reserved for the cluster bus too
	dir     string // --dir; holds redis.log and output.log
	cmd     *exec.Cmd

	done     chan struct{} // closed once cmd.Wait has returned
	waitErr  error         // cmd.Wait's result, readable after done
	stopOnce sync.Once
}

func (p *process) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// startProcess starts bin (a redis-server) on a free loopback port with
// persistence off and the given extra arguments, waits until it answers, and
// stops it on t.Cleanup. A start that fails, for example because someone
// took the port first, is retried on another port a few times.
func startProcess(t testing.TB, bin string, withBus bool, extra ...string) (*process, error) {
	t.Helper()
	base := t.TempDir() // removed after the cleanup below has run (LIFO)
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		p, err := tryStart(base, attempt, bin, withBus, extra)
		if err == nil {
			t.Cleanup(p.stop)
			return p, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
	}
	return nil, fmt.Errorf("could not start %s: %w", bin, errors.Join(errs...))
}

func tryStart(base string, attempt int, bin string, withBus bool, extra []string) (*process, error) {
	port, err := pickPort(withBus)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(base, fmt.Sprintf("%d-%d", attempt, port))
	if err := os.Mkdir(dir, 0o700); err != nil {
		releasePort(port, withBus)
		return nil, err
	}
	out, err := os.Create(filepath.Join(dir, "output.log"))
	if err != nil {
		releasePort(port, withBus)
		return nil, err
	}
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--daemonize", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
	}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out // an *os.File: no copying goroutine
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close() // the child has its own descriptor
	if err != nil {
		releasePort(port, withBus)
		return nil, err
	}
	p := &process{
		bin: bin, port: port, withBus: withBus, dir: dir, cmd: cmd,
		done: make(chan struct{}),
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(readyTimeout); err != nil {
		p.stop()
		return nil, fmt.Errorf("%s on %s: %w\n%s", filepath.Base(bin), p.addr(), err, p.logTail())
	}
	return p, nil
}

// waitReady polls the server until it answers INFO with its own process id
// (so a foreign server that won the race for the port is not mistaken for
// ours), the process exits, or timeout passes.
func (p *process) waitReady(timeout time.Duration) error {
	want := strconv.Itoa(p.cmd.Process.Pid)
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
func (p *process) serverPID() (string, error) {
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
	return infoField(info, "process_id"), nil
}

// stop kills the process, waits for it so that no zombie is left, and
// releases its ports. Only the first call does anything. SIGKILL rather than
// SIGTERM: nothing is persisted, and redis-server only notices SIGTERM on its
// next cron tick, which would add up to 100 ms to every test. The directory
// is left for t.TempDir's own cleanup.
func (p *process) stop() { p.stopOnce.Do(p.kill) }

func (p *process) kill() {
	defer releasePort(p.port, p.withBus)
	select {
	case <-p.done:
		return // already exited
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// logTail returns the last lines of the server's log and of its stdout and
// stderr, for error messages.
func (p *process) logTail() string {
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

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
