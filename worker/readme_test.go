package worker_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeAsynq keeps README.md's asynq section showing the body of
// worker's Example, and docs/asynq.md those of worker and scheduler, all of
// which compile.
func TestReadmeAsynq(t *testing.T) {
	readmetest.ShowsExamples(t, "../README.md", "example_test.go")
	readmetest.ShowsExamples(t, "../docs/asynq.md", "example_test.go", "../scheduler/example_test.go")
}
