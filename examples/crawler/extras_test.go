package main

// The tests draw -plot's chart and print -trace's spans as
// `go run -tags chart,otel ./examples/crawler` does (chart.go, otel.go);
// integration's examples tests run the builds.
import (
	_ "github.com/pacer-go/pacer/examples/internal/chart/svg"
	_ "github.com/pacer-go/pacer/examples/internal/spanlines"
)
