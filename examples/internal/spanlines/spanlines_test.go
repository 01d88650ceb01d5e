package spanlines

import (
	"io"
	"testing"

	"github.com/pacer-go/pacer/examples/internal/demo"
)

// TestRegistered: linked in, package spanlines is what demo.Tracing
// returns.
func TestRegistered(t *testing.T) {
	if err := demo.CheckTracing("./examples/crawler"); err != nil {
		t.Fatalf("demo.CheckTracing with package spanlines linked: %v", err)
	}
	tr, stop, err := demo.Tracing(io.Discard)
	if err != nil || tr == nil {
		t.Fatalf("demo.Tracing = %v, %v", tr, err)
	}
	stop()
}
