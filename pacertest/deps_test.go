package pacertest_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// pacertest brings nothing into a user's build beyond what reserve does
// and the standard library: no test-only module (testify, miniredis,
// testcontainers), none of the repository's test helpers.
func TestDeps(t *testing.T) {
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Skipf("go list: %v", err)
		}
		return strings.Fields(string(out))
	}
	reserve := deps("github.com/pacer-go/pacer/reserve")
	for _, p := range deps("github.com/pacer-go/pacer/pacertest") {
		first, _, _ := strings.Cut(p, "/")
		std := !strings.Contains(first, ".")
		if !std && !slices.Contains(reserve, p) && p != "github.com/pacer-go/pacer/pacertest" {
			t.Errorf("pacertest depends on %s, which reserve does not", p)
		}
	}
}
