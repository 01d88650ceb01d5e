package main

// The tests draw -plot's chart as `go run -tags chart ./examples/batch`
// does (chart.go); integration's examples tests run the two builds.
import _ "github.com/pacer-go/pacer/examples/internal/chart/svg"
