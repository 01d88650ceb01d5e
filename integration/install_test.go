package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestInstallFromClone is docs/install.md as a user follows it: the
// repository's files (those a clone has: tracked, or new and not ignored)
// copied to dir/pacer, and a user's module in dir/app whose go.mod has the
// page's require and replace lines, built with GOFLAGS=-mod=mod through the
// configured GOPROXY after go mod tidy. Its program imports a package of
// each module the page names; what it links must hold no test or demo
// tooling. Then the page's command installs the ops tool from the clone.
func TestInstallFromClone(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/install.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := codeBlocks(string(page))
	var gomod, install string
	for _, b := range blocks {
		switch {
		case strings.HasPrefix(b, "require ("):
			gomod = b
		case strings.Contains(b, "go install ./cmd/pacer"):
			install = b
		}
	}
	if gomod == "" || install == "" {
		t.Fatalf("docs/install.md has no go.mod block (require ...) or no go install ./cmd/pacer block; its blocks: %q", blocks)
	}
	modules := regexp.MustCompile(`(?m)^\s*(github\.com/pacer-go/pacer\S*) => \.\./pacer(\S*)$`).FindAllStringSubmatch(gomod, -1)
	if len(modules) != 3 {
		t.Fatalf("docs/install.md's go.mod block replaces %d modules, want the root, prommetrics and otelpacer:\n%s", len(modules), gomod)
	}

	dir := t.TempDir()
	clone := filepath.Join(dir, "pacer")
	copyCheckout(t, "..", clone)
	app := filepath.Join(dir, "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(app, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/app\n\ngo 1.26.0\n\n"+gomod+"\n")
	write("main.go", `package main

import (
	"fmt"

	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/prommetrics"
	"github.com/pacer-go/pacer/reserve"
	"github.com/pacer-go/pacer/worker"
)

func main() {
	fmt.Println(reserve.Version, prommetrics.New != nil, otelpacer.New != nil, pacehttp.New != nil, worker.New != nil)
}
`)
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	run := func(dir string, env []string, name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir, cmd.Env = dir, env
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
		}
		t.Logf("%s %s: %.1fs", name, strings.Join(args, " "), time.Since(start).Seconds())
		return string(out)
	}
	run(app, env, "go", "mod", "tidy")
	// pacer's packages compile again from the copy (the build cache's keys
	// hold their directory); their dependencies come from the cache.
	run(app, env, "go", "build", "-o", filepath.Join(dir, "app.bin"), ".")
	out := run(app, env, filepath.Join(dir, "app.bin"))
	if want := " true true true true"; !strings.Contains(out, want) {
		t.Errorf("the user's program printed %q, want %q", out, want)
	}
	deps := run(app, env, "go", "list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}} {{.Replace}}{{end}}", ".")
	for _, m := range modules {
		if !strings.Contains(deps, m[1]+" ") {
			t.Errorf("the user's build does not link %s:\n%s", m[1], deps)
		}
	}
	if !strings.Contains(deps, filepath.Join("..", "pacer")) {
		t.Errorf("the user's build does not take pacer from ../pacer:\n%s", deps)
	}
	for _, tool := range []string{"testcontainers", "miniredis", "testify", "golang.org/x/mod", "creack/pty", "docker", "gonum"} {
		if strings.Contains(deps, tool) {
			t.Errorf("the user's build links %s (test or demo tooling):\n%s", tool, deps)
		}
	}

	// The ops tool, with the page's command, run from the user's module.
	bin := filepath.Join(dir, "bin")
	toolEnv := append(os.Environ(), "GOBIN="+bin, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	out = run(app, toolEnv, "bash", "-euc", install)
	if !regexp.MustCompile(`(?m)^pacer v\d+\.\d+\.\d+\S* \(library v\d+\.\d+\.\d+`).MatchString(out) {
		t.Errorf("%s printed %q, want pacer vX.Y.Z... (library vX.Y.Z, ...)", install, out)
	}
}

// codeBlocks returns the fenced code blocks of a Markdown text.
func codeBlocks(text string) []string {
	var blocks, cur []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// copyCheckout copies the files of the checkout at root that a clone of
// it would have once committed (tracked, or untracked and not ignored) to
// dst, as they are in the working tree.
func copyCheckout(t *testing.T, root, dst string) {
	t.Helper()
	out, err := exec.CommandContext(t.Context(), "git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files in %s: %v", root, err)
	}
	n := 0
	for name := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // deleted, not yet committed
		}
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, info.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n < 50 {
		t.Fatalf("copied %d files from %s: not a checkout of pacer?", n, root)
	}
}
