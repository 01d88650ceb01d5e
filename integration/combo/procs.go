package combo

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pacer-go/pacer/internal/fleet"
	"github.com/pacer-go/pacer/internal/hog"
)

// The environment variables that make the running binary a fleet process
// or the provider (see package internal/fleet).
const (
	childEnv    = "PACER_COMBO_CHILD"
	providerEnv = "PACER_COMBO_PROVIDER"
	hogEnv      = "PACER_COMBO_HOG"
)

// Main runs the child or the provider side when this process is one (the
// runner re-runs its own binary), and then exits; otherwise it returns at
// once. Call it first thing in main or TestMain.
func Main() {
	var spec ChildSpec
	if ok, err := fleet.Spec(childEnv, &spec); ok {
		if err == nil && spec.Script != "" {
			err = execPython(spec) // returns only if it failed
		}
		if err == nil {
			err = childMain(spec)
		}
		exit(err)
	}
	var ps providerSpec
	if ok, err := fleet.Spec(providerEnv, &ps); ok {
		if err == nil {
			err = providerMain(ps)
		}
		exit(err)
	}
	var none struct{}
	if ok, err := fleet.Spec(hogEnv, &none); ok {
		if err == nil {
			hog.Spin()
		}
		exit(err)
	}
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "combo:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// proc is a child process of the runner: a fleet process or the provider.
// Its context's end kills it (SIGKILL to its process group).
type proc struct {
	id     string
	slot   int // a fleet process's slot
	python bool
	cancel context.CancelFunc
	f      *fleet.Fleet
	done   chan struct{} // closed once it has exited
	killed bool          // by the runner, on purpose
	// from: when a fleet process was told to start; to: when the runner
	// killed it or told it to close (Unix ns; 0: still running).
	from, to int64
	pid      int // from its ready note
}

func (p *proc) child() *fleet.Child { return p.f.Children()[0] }

// kill kills the process and waits until it has exited.
func (p *proc) kill() {
	p.cancel()
	_ = p.f.Wait()
}

// startProc re-runs this binary with env set to spec.
func startProc(ctx context.Context, id, env string, spec any, args []string) (*proc, error) {
	ctx, cancel := context.WithCancel(ctx)
	f, err := fleet.Start(ctx, fleet.Options{Env: env, Spec: spec, Procs: 1, Args: args, Stdin: true})
	if err != nil {
		cancel()
		return nil, err
	}
	p := &proc{id: id, cancel: cancel, f: f, done: make(chan struct{})}
	go func() { _ = p.child().Wait(); close(p.done) }()
	return p, nil
}

// firstLine waits for the process's first line.
func (p *proc) firstLine(timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return p.child().FirstLine(ctx)
}

// startProvider starts the provider and returns it and its base URL.
func startProvider(ctx context.Context, spec providerSpec, args []string) (*proc, string, error) {
	p, err := startProc(ctx, "provider", providerEnv, spec, args)
	if err != nil {
		return nil, "", err
	}
	line, err := p.firstLine(30 * time.Second)
	addr, ok := strings.CutPrefix(line, "addr ")
	if err != nil || !ok {
		p.kill()
		return nil, "", fmt.Errorf("provider: %q, %v\n%s", line, err, p.child().Stderr())
	}
	return p, "http://" + addr, nil
}

// startChild starts a fleet process and waits until it is ready (it may
// note a switch to local pacing first, when Redis is down).
func startChild(ctx context.Context, spec ChildSpec, args []string) (*proc, error) {
	p, err := startProc(ctx, spec.ID, childEnv, spec, args)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		lines := p.child().Lines()
		if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, `"t":"ready"`) }); i >= 0 {
			var n Note
			if err := json.Unmarshal([]byte(lines[i]), &n); err == nil {
				p.pid = n.Pid
			}
			return p, nil
		}
		exited := p.exited()
		if exited || time.Now().After(deadline) || ctx.Err() != nil {
			p.kill()
			return nil, fmt.Errorf("child %s: not ready (exited %v): %q\n%s", spec.ID, exited, lines, p.child().Stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// begin tells a ready fleet process when to run.
func (p *proc) begin(at, end time.Time) error {
	p.from = at.UnixNano()
	_, err := io.WriteString(p.child().Stdin, fmt.Sprintf("go %d %d\n", at.UnixNano(), end.UnixNano()))
	return err
}

// command sends a running fleet process one of the runner's commands
// (commands.go).
func (p *proc) command(line string) error {
	_, err := io.WriteString(p.child().Stdin, line+"\n")
	return err
}

// signal sends a fleet process sig (SIGSTOP, SIGCONT: FaultStall).
func (p *proc) signal(sig syscall.Signal) error {
	if p == nil || p.pid == 0 {
		return fmt.Errorf("no process to signal %v", sig)
	}
	return syscall.Kill(p.pid, sig)
}
