package worker_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeAsynq keeps README.md's asynq section showing the bodies of the
// Example functions of worker and scheduler, which compile.
func TestReadmeAsynq(t *testing.T) {
	readmetest.ShowsExamples(t, "../README.md", "example_test.go", "../scheduler/example_test.go")
}
