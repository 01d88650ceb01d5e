// Package python_test runs the Python client's tests (clients/python/tests)
// from go test, so that CI's `go test ./...` runs them: Debian's
// /usr/bin/python3 (or $PACER_PYTHON) with redis-py and lupa, against a
// Redis from internal/redistest (REDIS_URL), and redis-servers of the
// tests' own from PATH (the fallback's, stopped and restarted). Without a
// python3 that imports redis and lupa the test is skipped, saying so, and
// fails when CI is set (.ci/run installs python3-redis and python3-lupa).
package python_test

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/redistest"
)

// python returns the interpreter to run the tests with.
func python(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("PACER_PYTHON")
	if bin == "" {
		bin = "/usr/bin/python3"
	}
	out, err := exec.Command(bin, "-c", "import redis, lupa, sys; assert sys.version_info >= (3, 11), sys.version").CombinedOutput()
	if err != nil {
		msg := "the Python client's tests need " + bin + " (3.11 or later) with redis-py and lupa " +
			"(Debian: python3-redis python3-lupa; or set PACER_PYTHON): " + strings.TrimSpace(string(out)) + " " + err.Error()
		if ci := os.Getenv("CI"); ci != "" {
			t.Fatalf("%s (CI=%q is set, so this is a failure, not a skip)", msg, ci)
		}
		t.Skip(msg)
	}
	return bin
}

// readmeCommand is the command README.md gives to run the tests by hand.
const readmeCommand = "cd clients/python && python3 -m unittest discover -s tests"

func TestPython(t *testing.T) {
	bin := python(t)
	s := redistest.New(t)
	cmd := exec.Command(bin, "-m", "unittest", "discover", "-s", "tests", "-v")
	cmd.Env = append(os.Environ(), "REDIS_URL="+s.URL, "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s\n%s", strings.Join(cmd.Args, " "), out)
	if err != nil {
		t.Fatalf("the Python client's tests failed: %v", err)
	}
	if !regexp.MustCompile(`(?m)^OK`).Match(out) {
		t.Fatalf("the Python client's tests did not say OK")
	}
	if strings.Contains(string(out), "skipped") {
		t.Errorf("some of the Python client's tests were skipped")
	}
}

// TestReadmeCommand: the README's sh block is the command TestPython runs.
func TestReadmeCommand(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?ms)^```sh\n(.*?)\n```$").FindSubmatch(b)
	if m == nil || string(m[1]) != readmeCommand {
		t.Errorf("README.md's sh block is %q, want %q (what TestPython runs)", m, readmeCommand)
	}
}
