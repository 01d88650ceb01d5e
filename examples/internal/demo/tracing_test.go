package demo

import (
	"errors"
	"io"
	"strings"
	"testing"
)

// TestNoTracing: this test binary does not link package spanlines, as the
// crawler's default build does not: -trace is refused with the command
// that traces.
func TestNoTracing(t *testing.T) {
	err := CheckTracing("./examples/crawler")
	if !errors.Is(err, ErrNoTracing) || !strings.Contains(err.Error(), "go run -tags otel ./examples/crawler -trace") {
		t.Errorf("CheckTracing = %v, want ErrNoTracing naming go run -tags otel ./examples/crawler -trace", err)
	}
	if _, _, err := Tracing(io.Discard); !errors.Is(err, ErrNoTracing) {
		t.Errorf("Tracing = %v, want ErrNoTracing", err)
	}
}
