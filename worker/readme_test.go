package worker_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeAsynq keeps README.md's asynq section showing the server's
// setup from worker's Example, and docs/asynq.md the whole Examples of
// worker and scheduler, all of which compile.
func TestReadmeAsynq(t *testing.T) {
	readmetest.ShowsPart(t, "../README.md", "example_test.go", "Example")
	readmetest.ShowsExamples(t, "../docs/asynq.md", "example_test.go", "../scheduler/example_test.go")
}
