// Package fleet runs copies of the running program as child processes: the
// fleet of workers that cross-process tests and benchmarks need.
//
// The parent calls Start: N children, each the same binary (a test binary or
// a command) re-run with a spec, as JSON, in an environment variable. Early
// in main (or TestMain) the binary calls Spec: in a child it returns the
// spec, the child does its work, prints its report on stdout and exits. The
// parent collects each child's stdout lines and its stderr.
//
// Each child runs in a process group of its own, killed when the context
// given to Start ends (a test's t.Context ends before its cleanups run), so
// no child, nor any process it started, outlives the run. On Linux a child
// is also killed if its parent dies.
package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/internal/procgroup"
)

// IndexEnv is the environment variable that tells each child its Index.
const IndexEnv = "PACER_FLEET_INDEX"

// Index returns the running child's Index (IndexEnv), or -1 outside a fleet.
func Index() int {
	i, err := strconv.Atoi(os.Getenv(IndexEnv))
	if err != nil {
		return -1
	}
	return i
}

// Options says what children to start.
type Options struct {
	// Env is the environment variable that carries the spec, such as
	// "PACER_FLEET_CHILD". Required.
	Env string
	// Spec is given to every child, marshalled as JSON into Env.
	Spec any
	// Procs is how many children to start; at least 1.
	Procs int
	// Args are every child's arguments. For a test binary, "-test.run=^$"
	// keeps a child that fails to notice Env from running the tests.
	Args []string
	// Stdin gives each child a pipe on its standard input (Child.Stdin).
	// Default: the children read from the null device.
	Stdin bool
}

// waitDelay bounds how long Wait waits for a killed child's output pipes,
// should a process it started still hold them.
const waitDelay = 5 * time.Second

// Fleet is the children Start started.
type Fleet struct {
	children []*Child
}

// Child is one process of the fleet.
type Child struct {
	Index int            // 0 to Procs-1, in start order
	Stdin io.WriteCloser // with Options.Stdin; close it to send EOF

	cmd    *exec.Cmd
	stdout lineWriter
	stderr bytes.Buffer // written by exec's copying goroutine; read after done
	done   chan struct{}
	err    error // cmd.Wait's result, readable after done
}

// Start starts o.Procs copies of the running program. They are killed, with
// every process of their groups, when ctx ends. If a start fails, the
// children already started are killed and reaped.
func Start(ctx context.Context, o Options) (*Fleet, error) {
	if o.Env == "" || o.Procs < 1 {
		return nil, fmt.Errorf("fleet: Options.Env %q and Procs %d: want a variable name and at least 1", o.Env, o.Procs)
	}
	spec, err := json.Marshal(o.Spec)
	if err != nil {
		return nil, fmt.Errorf("fleet: spec: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	env := append(os.Environ(),
		o.Env+"="+string(spec),
		// A -race binary otherwise sleeps a second before exiting.
		strings.TrimSpace("GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0"),
	)
	f := &Fleet{}
	for i := range o.Procs {
		c, err := start(ctx, i, exe, o.Args, env, o.Stdin)
		if err != nil {
			for _, c := range f.children {
				_ = procgroup.Kill(c.cmd)
			}
			f.Wait()
			return nil, fmt.Errorf("fleet: child %d: %w", i, err)
		}
		f.children = append(f.children, c)
	}
	return f, nil
}

func start(ctx context.Context, i int, exe string, args, env []string, stdin bool) (*Child, error) {
	c := &Child{Index: i, done: make(chan struct{})}
	c.stdout.more = make(chan struct{})
	c.cmd = exec.CommandContext(ctx, exe, args...)
	c.cmd.Env = append(env[:len(env):len(env)], fmt.Sprintf("%s=%d", IndexEnv, i))
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	procgroup.Own(c.cmd)
	c.cmd.WaitDelay = waitDelay
	if stdin {
		w, err := c.cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		c.Stdin = w
	}
	if err := c.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		c.err = c.cmd.Wait()
		c.stdout.close()
		close(c.done)
	}()
	return c, nil
}

// Children returns the children, in start order.
func (f *Fleet) Children() []*Child { return f.children }

// Wait waits until every child has exited and returns the errors of those
// that failed, each with its stderr.
func (f *Fleet) Wait() error {
	var errs []error
	for _, c := range f.children {
		if err := c.Wait(); err != nil {
			errs = append(errs, fmt.Errorf("child %d: %w\n%s", c.Index, err, strings.TrimSpace(c.Stderr())))
		}
	}
	return errors.Join(errs...)
}

// Wait waits until the child has exited and returns its exit error, if any.
func (c *Child) Wait() error {
	<-c.done
	return c.err
}

// FirstLine waits until the child has printed its first line on stdout and
// returns it, or an error if the child closed its stdout first or ctx ended.
func (c *Child) FirstLine(ctx context.Context) (string, error) { return c.Line(ctx, 0) }

// Line waits until the child has printed its line number n (from 0) on
// stdout and returns it, or an error if the child closed its stdout first
// or ctx ended: a parent that writes a request to Stdin reads the answer
// with it.
func (c *Child) Line(ctx context.Context, n int) (string, error) {
	for {
		lines, more, closed := c.stdout.since(n)
		if len(lines) > 0 {
			return lines[0], nil
		}
		if closed {
			<-c.done // stdout closed: the child has exited or is about to
			return "", fmt.Errorf("fleet: child %d exited after %d lines, without line %d (%v)\n%s",
				c.Index, len(c.Lines()), n, c.err, strings.TrimSpace(c.Stderr()))
		}
		select {
		case <-more:
		case <-ctx.Done():
			return "", fmt.Errorf("fleet: child %d printed no line %d: %w", c.Index, n, ctx.Err())
		}
	}
}

// Lines returns the lines the child has printed on stdout so far: all of
// them once Wait has returned. A last line without a newline counts.
func (c *Child) Lines() []string { return c.stdout.get() }

// Stderr returns what the child printed on stderr. Call it after Wait.
func (c *Child) Stderr() string {
	select {
	case <-c.done:
		return c.stderr.String()
	default:
		return ""
	}
}

// Spec reports whether this process is a child started with env set, and
// if so decodes its spec into v (a pointer).
func Spec(env string, v any) (bool, error) {
	js, ok := os.LookupEnv(env)
	if !ok {
		return false, nil
	}
	if err := json.Unmarshal([]byte(js), v); err != nil {
		return true, fmt.Errorf("fleet: %s: %w", env, err)
	}
	return true, nil
}

// lineWriter keeps what is written to it as lines.
type lineWriter struct {
	mu      sync.Mutex
	lines   []string
	partial []byte
	more    chan struct{} // closed, and replaced, at each complete line; closed by close
	closed  bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	for {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.partial = append(w.partial, p...)
			return n, nil
		}
		w.lines = append(w.lines, string(append(w.partial, p[:i]...)))
		w.partial = w.partial[:0]
		p = p[i+1:]
		w.signal()
	}
}

// close keeps a last line without a newline and wakes Line.
func (w *lineWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.lines = append(w.lines, string(w.partial))
		w.partial = nil
	}
	w.signal()
	w.closed = true
}

// signal wakes those waiting for a line. w.mu is held.
func (w *lineWriter) signal() {
	if !w.closed {
		close(w.more)
		w.more = make(chan struct{})
	}
}

// since returns the lines from number n on, a channel closed at the next
// line, and whether no more will come.
func (w *lineWriter) since(n int) (lines []string, more <-chan struct{}, closed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n < len(w.lines) {
		lines = w.lines[n:]
	}
	return lines, w.more, w.closed
}

func (w *lineWriter) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}
