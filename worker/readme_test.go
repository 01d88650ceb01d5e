package worker_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeAsynq keeps docs/asynq.md (README's asynq section points
// there) showing the whole Examples of worker and scheduler, which
// compile.
func TestReadmeAsynq(t *testing.T) {
	readmetest.ShowsExamples(t, "../docs/asynq.md", "example_test.go", "../scheduler/example_test.go")
}
