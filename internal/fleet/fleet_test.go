package fleet

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const childEnv = "FLEET_TEST_CHILD"

// job is what a test child is told to do.
type job struct {
	Lines  []string // printed on stdout, the last without a newline unless Echo or Hang
	Stderr string
	Echo   bool // then copy stdin to stdout, line by line
	Hang   bool // then sleep until killed
	Exit   int
	// PrintIndex: first print "index <Index()>"
	PrintIndex bool
}

func TestMain(m *testing.M) {
	var j job
	if ok, err := Spec(childEnv, &j); ok {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(childMain(j))
	}
	os.Exit(m.Run())
}

func childMain(j job) int {
	if j.PrintIndex {
		fmt.Printf("index %d\n", Index())
	}
	fmt.Print(strings.Join(j.Lines, "\n"))
	if j.Echo || j.Hang {
		fmt.Println()
	}
	if j.Echo {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("echo " + sc.Text())
		}
	}
	fmt.Fprint(os.Stderr, j.Stderr)
	if j.Hang {
		time.Sleep(time.Hour)
	}
	return j.Exit
}

func TestLinesAndStderr(t *testing.T) {
	f, err := Start(t.Context(), Options{Env: childEnv, Procs: 3, Args: []string{"-test.run=^$"},
		Spec: job{Lines: []string{"a", "b c", "last"}, Stderr: "oops\n"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(); err != nil {
		t.Fatalf("Wait() = %v, want nil", err)
	}
	if len(f.Children()) != 3 {
		t.Fatalf("%d children, want 3", len(f.Children()))
	}
	for i, c := range f.Children() {
		if c.Index != i {
			t.Errorf("child %d has Index %d", i, c.Index)
		}
		if got := strings.Join(c.Lines(), "|"); got != "a|b c|last" {
			t.Errorf("child %d: Lines() = %q, want a|b c|last", i, got)
		}
		if got := c.Stderr(); got != "oops\n" {
			t.Errorf("child %d: Stderr() = %q, want %q", i, got, "oops\n")
		}
		first, err := c.FirstLine(t.Context())
		if err != nil || first != "a" {
			t.Errorf("child %d: FirstLine() = %q, %v, want a, nil", i, first, err)
		}
	}
}

// TestIndex: each child learns its Index; outside a fleet Index is -1.
func TestIndex(t *testing.T) {
	f, err := Start(t.Context(), Options{Env: childEnv, Procs: 3, Args: []string{"-test.run=^$"},
		Spec: job{PrintIndex: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	for i, c := range f.Children() {
		if got, want := strings.Join(c.Lines(), "|"), fmt.Sprintf("index %d", i); got != want {
			t.Errorf("child %d printed %q, want %q", i, got, want)
		}
	}
	if got := Index(); got != -1 {
		t.Errorf("Index() outside a fleet = %d, want -1", got)
	}
}

func TestExitError(t *testing.T) {
	f, err := Start(t.Context(), Options{Env: childEnv, Procs: 2, Spec: job{Stderr: "went wrong", Exit: 3}})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 {
		t.Fatalf("Wait() = %v, want exit status 3", err)
	}
	for _, want := range []string{"child 0: exit status 3\nwent wrong", "child 1: exit status 3\nwent wrong"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Wait() = %q, want it to say %q", err, want)
		}
	}
	if _, err := f.Children()[0].FirstLine(t.Context()); err == nil || !strings.Contains(err.Error(), "went wrong") {
		t.Errorf("FirstLine of a child that printed nothing = %v, want an error with its stderr", err)
	}
}

func TestStdin(t *testing.T) {
	f, err := Start(t.Context(), Options{Env: childEnv, Procs: 2, Stdin: true, Spec: job{Lines: []string{"ready"}, Echo: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Children() {
		if first, err := c.FirstLine(t.Context()); err != nil || first != "ready" {
			t.Fatalf("child %d: FirstLine() = %q, %v, want ready", c.Index, first, err)
		}
	}
	for _, c := range f.Children() {
		fmt.Fprintf(c.Stdin, "go %d\n", c.Index)
		c.Stdin.Close()
	}
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Children() {
		if got, want := strings.Join(c.Lines(), "|"), fmt.Sprintf("ready|echo go %d", c.Index); got != want {
			t.Errorf("child %d: Lines() = %q, want %q", c.Index, got, want)
		}
	}
}

// TestLine: a parent reads each answer to what it writes on the child's
// stdin as it comes; a line the child never prints is an error.
func TestLine(t *testing.T) {
	f, err := Start(t.Context(), Options{Env: childEnv, Procs: 1, Stdin: true, Spec: job{Lines: []string{"ready"}, Echo: true}})
	if err != nil {
		t.Fatal(err)
	}
	c := f.Children()[0]
	for i, req := range []string{"a", "b", "c"} {
		fmt.Fprintln(c.Stdin, req)
		if got, err := c.Line(t.Context(), i+1); err != nil || got != "echo "+req {
			t.Fatalf("Line(%d) = %q, %v, want %q", i+1, got, err, "echo "+req)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.Line(ctx, 4); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Line(4) before the child printed it, with a context that ends: %v, want its deadline", err)
	}
	c.Stdin.Close()
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Line(t.Context(), 2); err != nil || got != "echo b" {
		t.Errorf("Line(2) after the exit = %q, %v, want echo b", got, err)
	}
	if _, err := c.Line(t.Context(), 4); err == nil || !strings.Contains(err.Error(), "without line 4") {
		t.Errorf("Line(4) of a child that exited after 4 lines = %v, want an error", err)
	}
}

// TestCancelKills: a child that would hang is killed when the context ends.
func TestCancelKills(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	f, err := Start(ctx, Options{Env: childEnv, Procs: 2, Spec: job{Lines: []string{"up"}, Hang: true}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range f.Children() {
		if _, err := c.FirstLine(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	err = f.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != -1 {
		t.Fatalf("Wait() after cancel = %v, want the children killed", err)
	}
}

func TestSpecOutsideAChild(t *testing.T) {
	var j job
	if ok, err := Spec("FLEET_TEST_NO_SUCH_VARIABLE", &j); ok || err != nil {
		t.Errorf("Spec of an unset variable = %v, %v, want false, nil", ok, err)
	}
	t.Setenv("FLEET_TEST_BAD", "{")
	if ok, err := Spec("FLEET_TEST_BAD", &j); !ok || err == nil {
		t.Errorf("Spec of bad JSON = %v, %v, want true and an error", ok, err)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []Options{{Procs: 1}, {Env: childEnv}} {
		if _, err := Start(t.Context(), o); err == nil {
			t.Errorf("Start(%+v) = nil error, want one", o)
		}
	}
}
