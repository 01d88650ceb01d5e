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
	spec
	port int
	dir  string // --dir; holds redis.log and output.log
	cmd  *exec.Cmd

	done     chan struct{} // closed once cmd.Wait has returned
	waitErr  error         // cmd.Wait's result, readable after done
	stopOnce sync.Once
}

// spec says how to start a redis-server; a restart reuses it.
type spec struct {
	bin     string
	withBus bool     // port+10000 is reserved for the cluster bus too
	extra   []string // arguments after the package's own
	// config, if not empty, is written to a file in the process's directory
	// whose path becomes redis-server's first argument (Sentinel needs one).
	config string
}

func (p *process) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// startProcess starts bin (a redis-server) on a free loopback port with
// persistence off and the given extra arguments, waits until it answers, and
// stops it on t.Cleanup. A start that fails, for example because someone
// took the port first, is retried on another port a few times.
func startProcess(t testing.TB, bin string, withBus bool, extra ...string) (*process, error) {
	t.Helper()
	return startSpec(t, spec{bin: bin, withBus: withBus, extra: extra})
}

// startSpec is startProcess for any spec.
func startSpec(t testing.TB, sp spec) (*process, error) {
	t.Helper()
	base := t.TempDir() // removed after the cleanup below has run (LIFO)
	var errs []error
	for attempt := 1; attempt <= startAttempts; attempt++ {
		p, err := tryStart(base, attempt, sp)
		if err == nil {
			t.Cleanup(p.stop)
			return p, nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w", attempt, err))
	}
	return nil, fmt.Errorf("could not start %s: %w", sp.bin, errors.Join(errs...))
}

// tryStart reserves a free port and starts sp on it in a new directory under
// base. The port is released again if the start fails.
func tryStart(base string, attempt int, sp spec) (*process, error) {
	port, err := pickPort(sp.withBus)
	if err != nil {
		return nil, err
	}
	p, err := launch(sp, filepath.Join(base, fmt.Sprintf("%d-%d", attempt, port)), port)
	if err != nil {
		releasePort(port, sp.withBus)
		return nil, err
	}
	return p, nil
}

// launch starts sp on port in the new directory dir and waits until it
// answers. It neither reserves nor releases the port: the caller owns it.
func launch(sp spec, dir string, port int) (*process, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	var args []string
	if sp.config != "" {
		conf := filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(conf, []byte(sp.config), 0o600); err != nil {
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
	cmd := exec.Command(sp.bin, append(args, sp.extra...)...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out // an *os.File: no copying goroutine
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close() // the child has its own descriptor
	if err != nil {
		return nil, err
	}
	p := &process{spec: sp, port: port, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	if err := p.waitReady(readyTimeout); err != nil {
		p.terminate()
		return nil, fmt.Errorf("%s on %s: %w\n%s", filepath.Base(sp.bin), p.addr(), err, p.logTail())
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
func (p *process) stop() {
	p.stopOnce.Do(func() {
		p.terminate()
		releasePort(p.port, p.withBus)
	})
}

// terminate kills the process (resuming it first, should it be stopped by
// SIGSTOP) and waits until it has been reaped. Its ports stay reserved. It
// may be called any number of times.
func (p *process) terminate() {
	select {
	case <-p.done:
		return // already exited
	default:
	}
	_ = resume(p.cmd.Process)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has exited and been reaped.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
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
