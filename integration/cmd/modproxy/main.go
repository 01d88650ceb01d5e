// Command modproxy writes a Go module proxy (GOPROXY=file://DIR) serving the
// modules of this repository at a git tag, exactly as a public proxy would
// serve them once the tag is pushed: .info, .mod and .zip (made by
// golang.org/x/mod/zip from the tagged commit, with the go command's own
// rules: nested modules left out, file names checked). .ci/release-check
// uses it to run `go install github.com/pacer-go/pacer/cmd/pacer@VERSION`
// from a clean module cache before a tag leaves the machine.
//
//	go run ./integration/cmd/modproxy -repo . -version v0.1.0 -out /tmp/proxy
//
// Each module is taken at its own tag: the root at VERSION, the module in
// directory D at D/VERSION (Go's rule for modules in subdirectories).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func main() {
	repo := flag.String("repo", ".", "the git repository")
	version := flag.String("version", "", "the release, e.g. v0.1.0 (required)")
	out := flag.String("out", "", "the proxy's directory (required)")
	mods := flag.String("modules", ".,cmd/pacer,prommetrics", "the module directories to serve, comma-separated")
	flag.Parse()
	if *version == "" || *out == "" || flag.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: modproxy -repo DIR -version vX.Y.Z -out DIR [-modules .,cmd/pacer]")
		os.Exit(2)
	}
	if err := module.Check("github.com/pacer-go/pacer", *version); err != nil {
		fmt.Fprintf(os.Stderr, "modproxy: -version %q: %v\n", *version, err)
		os.Exit(2)
	}
	for _, dir := range strings.Split(*mods, ",") {
		if err := serve(*repo, strings.TrimSpace(dir), *version, *out); err != nil {
			fmt.Fprintf(os.Stderr, "modproxy: %s: %v\n", dir, err)
			os.Exit(1)
		}
	}
}

func serve(repo, dir, version, out string) error {
	tag := version
	if dir != "." {
		tag = dir + "/" + version
	}
	rev, err := git(repo, "rev-parse", "--verify", "--quiet", tag+"^{commit}")
	rev = strings.TrimSpace(rev)
	if err != nil {
		return fmt.Errorf("no tag %s: %v", tag, err)
	}
	gomod, err := git(repo, "show", rev+":"+filepath.ToSlash(filepath.Join(dir, "go.mod")))
	if err != nil {
		return err
	}
	path := modulePath(gomod)
	if path == "" {
		return fmt.Errorf("%s/go.mod at %s names no module", dir, tag)
	}
	when, err := git(repo, "show", "-s", "--format=%cI", rev)
	if err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339, strings.TrimSpace(when))
	if err != nil {
		return err
	}
	esc, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	base := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(base, 0o755); err != nil {
		return err
	}
	info, _ := json.Marshal(map[string]any{"Version": version, "Time": at.UTC()})
	if err := os.WriteFile(filepath.Join(base, version+".info"), info, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(base, version+".mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(base, "list"), []byte(version+"\n"), 0o644); err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(base, version+".zip"))
	if err != nil {
		return err
	}
	subdir := ""
	if dir != "." {
		subdir = dir
	}
	if err := modzip.CreateFromVCS(z, module.Version{Path: path, Version: version}, repo, rev, subdir); err != nil {
		z.Close()
		return err
	}
	fmt.Printf("%s@%s from %s (%s)\n", path, version, tag, rev[:12])
	return z.Close()
}

func modulePath(gomod string) string {
	for _, line := range strings.Split(gomod, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1]
		}
	}
	return ""
}

func git(repo string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
	if err != nil {
		if e, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, e.Stderr)
		}
		return "", err
	}
	return string(out), nil
}
