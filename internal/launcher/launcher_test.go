package launcher

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 5*time.Minute) // the first run builds the launcher
	t.Cleanup(cancel)
	return c
}

// TestCommands runs the miniredis launcher: its first line is the address
// it serves, commands are answered, and Close makes it exit.
func TestCommands(t *testing.T) {
	c, err := Start(ctx(t), "miniredis")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", c.First, time.Second)
	if err != nil {
		t.Fatalf("the first line %q is not an address that answers: %v", c.First, err)
	}
	conn.Close()
	if err := c.Do("fastforward 1s"); err != nil {
		t.Errorf("Do(fastforward 1s) = %v", err)
	}
	for _, bad := range []string{"fastforward", "fastforward soon", "no-such-command"} {
		if err := c.Do(bad); err == nil {
			t.Errorf("Do(%q) = nil error, want the launcher's", bad)
		}
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("a second Close() = %v", err)
	}
	if err := c.Do("fastforward 1s"); err == nil {
		t.Error("Do after Close = nil error")
	}
	if conn, err := net.DialTimeout("tcp", c.First, time.Second); err == nil {
		conn.Close()
		t.Errorf("%s still answers after Close", c.First)
	}
}

// TestNoSuchLauncher: a launcher that cannot run says why.
func TestNoSuchLauncher(t *testing.T) {
	_, err := Start(ctx(t), "no-such-launcher")
	if err == nil || !strings.Contains(err.Error(), "exited before its first line") || !strings.Contains(err.Error(), "no-such-launcher") {
		t.Errorf("Start(no-such-launcher) = %v, want an error that says so, with the go command's output", err)
	}
}

// TestStartTimeout: a launcher that prints nothing before ctx ends is killed.
func TestStartTimeout(t *testing.T) {
	short, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Start(short, "miniredis"); err == nil || !strings.Contains(err.Error(), "printed nothing") {
		t.Errorf("Start with an ended context = %v, want an error", err)
	}
}

// TestProgramFromCache: a launcher runs as the program the go command
// built and keeps in its build cache, found once per process, not through
// `go run` at each start.
func TestProgramFromCache(t *testing.T) {
	for range 2 {
		c, err := Start(ctx(t), "miniredis")
		if err != nil {
			t.Fatal(err)
		}
		if got := filepath.Base(c.cmd.Path); got != "miniredis" {
			t.Errorf("the launcher ran as %s %q, want the miniredis program itself", c.cmd.Path, c.cmd.Args)
		}
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
}

// TestTestkitAbove: built with -trimpath (the README's test command), Dir
// finds the testkit module above the working directory: from this
// package's directory and from the repository's root alike, and not from
// a directory outside the repository.
func TestTestkitAbove(t *testing.T) {
	want, err := filepath.Abs(filepath.Join("..", "testkit"))
	if err != nil {
		t.Fatal(err)
	}
	for _, wd := range []string{".", filepath.Join("..", "..")} {
		abs, err := filepath.Abs(wd)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := testkitAbove(abs); err != nil || got != want {
			t.Errorf("testkitAbove(%s) = %q, %v; want %q", abs, got, err, want)
		}
	}
	if got, err := testkitAbove(t.TempDir()); err == nil {
		t.Errorf("testkitAbove(a temporary directory) = %q, want an error", got)
	}
	got, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := filepath.EvalSymlinks(got); err != nil || filepath.Clean(got) != want {
		t.Errorf("Dir() = %q (%v), want %q", got, err, want)
	}
}
