package reserve_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeQuickStart keeps README.md's quick start the body of Example,
// and docs/policies.md's example the body of ExampleLimiter_ReserveN, both of
// which compile (and run, with their output checked).
func TestReadmeQuickStart(t *testing.T) {
	readmetest.ShowsExamples(t, "../README.md", "example_test.go")
	readmetest.ShowsPart(t, "../docs/policies.md", "example_test.go", "ExampleLimiter_ReserveN")
}
