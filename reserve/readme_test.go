package reserve_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeQuickStart keeps README.md's quick start the body of Example,
// which compiles.
func TestReadmeQuickStart(t *testing.T) {
	readmetest.ShowsExamples(t, "../README.md", "example_test.go")
}
