//go:build chart

package main

// Built with -tags chart, the example draws -plot's chart (package chart/svg,
// on gonum.org/v1/plot). The default build leaves it out: a first
// `go run ./examples/llm` fetches and compiles only what the run needs.
import _ "github.com/pacer-go/pacer/examples/internal/chart/svg"
