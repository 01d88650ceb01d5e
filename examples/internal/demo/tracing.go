package demo

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/pacer-go/pacer/reserve"
)

// ErrNoTracing is Tracing's error in a build without package
// examples/internal/spanlines (-tags otel).
var ErrNoTracing = errors.New("this build has no OpenTelemetry (build with -tags otel)")

var (
	tracingMu sync.Mutex
	tracingFn func(io.Writer) (reserve.Tracer, func(), error)
)

// RegisterTracing makes f what Tracing returns: package
// examples/internal/spanlines calls it when it is linked in.
func RegisterTracing(f func(out io.Writer) (reserve.Tracer, func(), error)) {
	tracingMu.Lock()
	defer tracingMu.Unlock()
	tracingFn = f
}

// CheckTracing is nil if this build can trace; otherwise an error telling
// how to run example (such as "./examples/crawler") with -trace. The OTel
// SDK is left out of the default build, which would otherwise fetch and
// compile it for a flag that is off by default.
func CheckTracing(example string) error {
	tracingMu.Lock()
	defer tracingMu.Unlock()
	if tracingFn == nil {
		return fmt.Errorf("-trace: %w: run go run -tags otel %s -trace", ErrNoTracing, example)
	}
	return nil
}

// Tracing returns a Tracer whose wait spans go to out, one line each, and
// a function that flushes and stops it; ErrNoTracing without package
// spanlines.
func Tracing(out io.Writer) (reserve.Tracer, func(), error) {
	tracingMu.Lock()
	f := tracingFn
	tracingMu.Unlock()
	if f == nil {
		return nil, nil, ErrNoTracing
	}
	return f(out)
}
