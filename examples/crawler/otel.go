//go:build otel

package main

// Built with -tags otel, the crawler prints -trace's wait spans (package
// examples/internal/spanlines, on the OpenTelemetry SDK). The default build
// leaves the SDK out: a first `go run ./examples/crawler` fetches and
// compiles only what the run needs.
import _ "github.com/pacer-go/pacer/examples/internal/spanlines"
