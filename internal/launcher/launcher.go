// Package launcher runs the launcher programs of the internal/testkit
// module (cmd/miniredis, cmd/rediscontainer, cmd/redisproxy) as child
// processes. That way this module's tests use miniredis, testcontainers-go
// and Toxiproxy without importing them, and the library's go.mod lists none
// of them.
//
// A launcher prints one line, the address it serves (or "unavailable:
// <why>"), then answers each command line written to its stdin with one
// line, "ok" or "error: <why>", and exits when its stdin closes. Each is
// built and run with `go run` from the testkit module's directory, which
// this package finds from its own source file (or, built with -trimpath,
// above the working directory: Dir). The go command builds a
// launcher on its first use (about a minute for rediscontainer on a fresh
// machine; .ci/run builds them before the tests) and keeps the program in
// its build cache; a test process asks it where once per launcher, and
// runs the program from there after that (see program).
package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/procgroup"
	"github.com/pacer-go/pacer/internal/syncbuf"
)

const (
	replyTimeout = time.Minute      // for a command's answer
	closeTimeout = 30 * time.Second // for a launcher to clean up and exit
)

// Child is a running launcher.
type Child struct {
	First string // the launcher's first line: an address, or "unavailable: <why>"

	name   string
	cmd    *exec.Cmd
	cancel context.CancelFunc // kills the launcher's process group
	stdin  io.WriteCloser
	lines  chan string // stdout, a line at a time; closed at EOF
	stderr syncbuf.Buffer

	mu       sync.Mutex // serialises Do and Close
	closed   bool
	done     chan struct{} // closed when cmd.Wait has returned
	waitErr  error
	closeErr error
}

// Dir returns the directory of the internal/testkit module, found next to
// this package's source; in a binary built with -trimpath (the README's
// test command), whose source paths are the packages' import paths, it is
// looked for above the working directory (a test runs in its package's
// directory, and the children it starts inherit it).
func Dir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("launcher: cannot tell where its source is")
	}
	if filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "testkit")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
			return "", fmt.Errorf("launcher: no internal/testkit module next to %s: %w", file, err)
		}
		return dir, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("launcher: built with -trimpath, and no working directory to look from: %w", err)
	}
	return testkitAbove(wd)
}

// testkitAbove returns the internal/testkit module's directory in wd or the
// nearest directory above it that has one.
func testkitAbove(wd string) (string, error) {
	for d := wd; ; d = filepath.Dir(d) {
		dir := filepath.Join(d, "internal", "testkit")
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("launcher: built with -trimpath, and no internal/testkit module in %s or a directory above it", wd)
		}
	}
}

// Start runs the launcher internal/testkit/cmd/<name> with args and waits
// until it has printed its first line, or ctx ends (then it is killed). The
// launcher lives until Close, whatever becomes of ctx.
func Start(ctx context.Context, name string, args ...string) (*Child, error) {
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	goBin, err := exec.LookPath("go") // go test puts its own first on PATH
	if err != nil {
		return nil, fmt.Errorf("launcher: %s needs the go command: %w", name, err)
	}
	c := &Child{name: name, lines: make(chan string, 16), done: make(chan struct{})}
	life, cancel := context.WithCancel(context.Background()) // not ctx: it bounds the start only
	c.cancel = cancel
	if bin := program(ctx, goBin, dir, name); bin != "" {
		c.cmd = exec.CommandContext(life, bin, args...)
	} else {
		c.cmd = exec.CommandContext(life, goBin, append([]string{"run", "./cmd/" + name}, args...)...)
	}
	c.cmd.Dir = dir
	c.cmd.Stderr = &c.stderr
	procgroup.Own(c.cmd)
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		cancel()
		return nil, err
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := c.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("launcher: %s: %w", name, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.waitErr = c.cmd.Wait() // after every read from stdout
		cancel()
		close(c.done)
	}()
	select {
	case first, ok := <-c.lines:
		if ok {
			c.First = first
			return c, nil
		}
		<-c.done
		return nil, fmt.Errorf("launcher: %s exited before its first line (%v):\n%s", name, c.waitErr, c.Stderr())
	case <-ctx.Done():
		c.kill()
		return nil, fmt.Errorf("launcher: %s printed nothing before %w:\n%s", name, ctx.Err(), c.Stderr())
	}
}

// programs holds, by name, where each launcher's program is once program
// has found it in this process.
var programs = struct {
	sync.Mutex
	m map[string]*found
}{m: map[string]*found{}}

type found struct {
	sync.Mutex // held while the go command looks: one look per launcher
	path       string
}

// program returns the path of launcher name's program in the go command's
// build cache, or "" if it cannot tell: Start then runs the launcher with
// `go run`. `go run -exec echo ./cmd/<name>` builds the program if need be
// and prints where it is instead of running it: since Go 1.24, go run
// keeps the programs it builds in the build cache, under their content's
// hash, and they stay there. It is asked once per process and launcher: a
// go run costs about 0.3 s of CPU for the go command to check that the
// build is up to date, and seconds on a loaded machine, and a test binary
// starts launchers dozens of times (each example of package reserve starts
// a miniredis).
func program(ctx context.Context, goBin, dir, name string) string {
	programs.Lock()
	f := programs.m[name]
	if f == nil {
		f = &found{}
		programs.m[name] = f
	}
	programs.Unlock()
	f.Lock()
	defer f.Unlock()
	if f.path != "" {
		return f.path
	}
	cmd := exec.CommandContext(ctx, goBin, "run", "-exec", "echo", "./cmd/"+name)
	cmd.Dir = dir
	out, err := cmd.Output()
	p := strings.TrimSpace(string(out))
	if err != nil || !filepath.IsAbs(p) {
		return "" // go run says why, from Start
	}
	if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
		return "" // a Go that removes the program when go run exits
	}
	f.path = p
	return p
}

// Do sends one command line to the launcher and returns its answer's error.
func (c *Child) Do(command string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("launcher: %s: %q after Close", c.name, command)
	}
	if _, err := io.WriteString(c.stdin, command+"\n"); err != nil {
		return fmt.Errorf("launcher: %s: %q: %w", c.name, command, err)
	}
	select {
	case reply, ok := <-c.lines:
		switch {
		case !ok:
			return fmt.Errorf("launcher: %s exited on %q:\n%s", c.name, command, c.Stderr())
		case reply == "ok":
			return nil
		default:
			return fmt.Errorf("launcher: %s: %q: %s", c.name, command, strings.TrimPrefix(reply, "error: "))
		}
	case <-time.After(replyTimeout):
		return fmt.Errorf("launcher: %s: no answer to %q within %v", c.name, command, replyTimeout)
	}
}

// Close closes the launcher's stdin, which tells it to clean up and exit,
// and waits until it has; one that does not exit in time is killed, with
// every process of its group. It returns the launcher's exit error, if any.
// Later calls return the first's result.
func (c *Child) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.closeErr
	}
	c.closed = true
	_ = c.stdin.Close()
	go func() {
		for range c.lines { // what it prints while cleaning up
		}
	}()
	select {
	case <-c.done:
		if c.waitErr != nil {
			c.closeErr = fmt.Errorf("launcher: %s: %w\n%s", c.name, c.waitErr, c.Stderr())
		}
	case <-time.After(closeTimeout):
		c.kill()
		c.closeErr = fmt.Errorf("launcher: %s did not exit within %v of its stdin closing; killed", c.name, closeTimeout)
	}
	return c.closeErr
}

// kill kills the launcher's process group and waits for it.
func (c *Child) kill() {
	c.cancel()
	go func() {
		for range c.lines {
		}
	}()
	<-c.done
}

// Stderr returns what the go command and the launcher printed on stderr.
func (c *Child) Stderr() string { return strings.TrimSpace(c.stderr.String()) }
