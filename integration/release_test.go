package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLastRelease runs .ci/last-release, which .ci/apicheck and
// .ci/release-check take the release before from, in a repository of its
// own: a release commit, the commit after that records it, and records
// that must be refused (docs/releasing.md, "Recording a release").
func TestLastRelease(t *testing.T) {
	t.Parallel()
	script, err := os.ReadFile("../.ci/last-release")
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(repo, ".ci"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, ".ci", "last-release"), script, 0o755); err != nil {
		t.Fatal(err)
	}
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "git", append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	changelog := func(text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(repo, "CHANGELOG.md"), []byte("# Changelog\n\n"+text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commit := func(msg string) string {
		t.Helper()
		git("add", "-A")
		git("commit", "-q", "-m", msg)
		return git("rev-parse", "HEAD")
	}
	lastRelease := func() (string, error) {
		cmd := exec.CommandContext(t.Context(), filepath.Join(repo, ".ci", "last-release"))
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	want := func(what, out string) {
		t.Helper()
		got, err := lastRelease()
		if err != nil || got != out {
			t.Errorf("%s: last-release = %q (%v), want %q", what, got, err, out)
		}
	}
	refuse := func(what, says string) {
		t.Helper()
		got, err := lastRelease()
		if err == nil || !strings.Contains(got, says) {
			t.Errorf("%s: last-release = %q (%v), want a failure saying %q", what, got, err, says)
		}
	}

	git("init", "-q", "-b", "main")
	changelog("## Unreleased\n\nAdded: a.\n")
	before := commit("before the release")
	want("no release", "")

	changelog("## v0.1.0 (2026-01-01)\n\nAdded: a.\n")
	release := commit("Release v0.1.0")
	want("the release commit itself, which cannot name itself", "")

	record := "## v0.1.0 (2026-01-01, commit " + release + ")\n\nAdded: a.\n"
	changelog("## Unreleased\n\nAdded: b.\n\n" + record)
	commit("record v0.1.0")
	want("the record", "v0.1.0 "+release)

	changelog("## v0.2.0 (2026-02-01)\n\nAdded: b.\n\n" + record)
	want("v0.2.0 being cut: the release before", "v0.1.0 "+release)

	changelog("## Unreleased\n\n## v0.2.0 (2026-02-01)\n\n" + record)
	refuse("v0.2.0 not recorded below the first section", `"## v0.2.0 (2026-02-01)" names no commit`)

	changelog("## Unreleased\n\n## v0.1.0 (2026-01-01, commit " + before + ")\n")
	refuse("the commit before the release", "is not v0.1.0's release")

	changelog("## Unreleased\n\n## v0.1.0 (2026-01-01, commit " + release[:12] + ")\n")
	refuse("an abbreviated commit", "written in full")

	changelog("## Unreleased\n\n## v0.1.0 (2026-01-01, commit " + strings.Repeat("0", 40) + ")\n")
	refuse("a commit this clone lacks", "is not in this clone")

	git("checkout", "-q", "-f", "-b", "side", before)
	changelog("## v0.1.0 (2026-01-01)\n\nAdded: c.\n")
	side := commit("another v0.1.0, on a branch")
	git("checkout", "-q", "-f", "main")
	changelog("## Unreleased\n\n## v0.1.0 (2026-01-01, commit " + side + ")\n")
	refuse("a commit off HEAD's history", "is not an ancestor of HEAD")

	changelog("## Unreleased\n\nAdded: b.\n\n" + record)
	git("tag", "v0.1.0", before)
	refuse("a tag elsewhere", "this clone's tag v0.1.0 is "+before)
	git("tag", "-f", "v0.1.0", release)
	want("a tag that agrees", "v0.1.0 "+release)
}

// TestReleaseRecordShown: the record docs/releasing.md shows is
// CHANGELOG.md's own, and this repository's newest record holds.
func TestReleaseRecordShown(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile("../docs/releasing.md")
	if err != nil {
		t.Fatal(err)
	}
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	var shown string
	for _, b := range codeBlocks(string(page)) {
		if strings.HasPrefix(b, "## v") {
			shown = b
		}
	}
	if shown == "" || !strings.Contains(string(changelog), "\n"+shown+"\n") {
		t.Errorf("docs/releasing.md shows the record %q, which CHANGELOG.md does not hold", shown)
	}
	out, err := exec.CommandContext(t.Context(), "../.ci/last-release").CombinedOutput()
	if err != nil {
		t.Fatalf(".ci/last-release: %v\n%s", err, out)
	}
	if len(strings.Fields(string(out))) != 2 {
		t.Errorf(".ci/last-release printed %q, want a version and its commit", out)
	}
}
