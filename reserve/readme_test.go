package reserve_test

import (
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestReadmeQuickStart keeps README.md's quick start the body of Example,
// which compiles (and runs, with its output checked). docs/policies.md's
// first example is the OpenAI profile's (package profile's Example), not
// a policy written by hand (issue 42: its Window bands of a minute got
// 177 429s from a provider of that name); internal/readmetest checks it.
func TestReadmeQuickStart(t *testing.T) {
	readmetest.ShowsExamples(t, "../README.md", "example_test.go")
}
