// Package chart is what an example records of its run for a chart: for
// each host, the calls the provider accepted and the 429s it answered,
// pacer's limit and the provider's. The examples write it with -plot
// FILE.svg.
//
// The drawing (package chart/svg, on gonum.org/v1/plot and its fonts) is
// not in an example's default build: `go run ./examples/crawler` would
// otherwise download and compile a dozen modules for a chart that is off by
// default. An example built with -tags chart imports chart/svg, which
// registers itself here; without it, -plot is refused before the run
// (Check) with the command that draws:
//
//	go run -tags chart ./examples/crawler -plot calls.svg
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// Bucket is the width of one step of the chart.
const Bucket = 100 * time.Millisecond

// Errors for a Chart that cannot be drawn.
var (
	ErrNoCalls      = errors.New("chart: no calls to draw")
	ErrInvalidLimit = errors.New("chart: invalid limit")
)

// Series is one panel of the chart: the calls one host accepted, and the
// calls it refused with 429.
type Series struct {
	Name     string
	Calls    []time.Time
	Rejected []time.Time // optional

	// Amounts, if set, weigh each call (tokens, points): the panel draws
	// the amount per 100 ms instead of the calls. One per call.
	Amounts []float64
	// Unit names what the panel counts. Default: "calls".
	Unit string
	// Rate, if positive, is this panel's pacer limit per second instead of
	// the Chart's, and Quota (per second, dashed) its provider's; the
	// panel then has a y range of its own.
	Rate, Quota float64

	// Learned, if set, is the rate pacer learned for this host over the
	// run (package adaptive), drawn /10 instead of the flat limit line.
	Learned []Sample
}

// A Sample is a rate at a moment of the run.
type Sample struct {
	At   time.Time
	Rate float64 // per second
}

// A Step is a change of the provider's limit: Limit calls in any 1 s from
// At on.
type Step struct {
	At    time.Time
	Limit int
}

// Chart is a chart of calls per 100 ms.
type Chart struct {
	// Title is printed above the chart. Default: "calls per 100 ms".
	Title string

	// Start is time 0 on the x axis, the start of the run; no call may
	// come before it. Default (zero): the first call.
	Start time.Time

	// Rate is pacer's limit in calls per second, drawn as a horizontal
	// line at Rate/10 calls per 100 ms. Required (positive and finite)
	// unless every series has a Rate of its own.
	Rate float64

	// ProviderLimit, if positive, is the calls the provider accepts in any
	// 1 s, drawn as a dashed line at ProviderLimit/10 per 100 ms (the
	// provider counts over 1 s, so a single 100 ms may hold more). Default
	// (0): not drawn.
	ProviderLimit int
	// ProviderSteps are later changes of ProviderLimit, in time order.
	ProviderSteps []Step

	// Series are the panels, one per host, from top to bottom. At least
	// one accepted call is required.
	Series []Series
}

// Hosts turns the calls per host (as provider.Server.Calls returns them)
// and the 429s per host (provider.Server.Rejections; nil for none) into one
// Series per host, sorted by name.
func Hosts(calls, rejected map[string][]time.Time) []Series {
	out := make([]Series, 0, len(calls))
	for h, c := range calls {
		out = append(out, Series{Name: h, Calls: c, Rejected: rejected[h]})
	}
	for h, r := range rejected {
		if _, ok := calls[h]; !ok {
			out = append(out, Series{Name: h, Rejected: r})
		}
	}
	slices.SortFunc(out, func(a, b Series) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ErrNotBuilt is the error of WriteFile and CallsPer100ms in a build
// without the drawing (package chart/svg, -tags chart).
var ErrNotBuilt = errors.New("chart: this build cannot draw (build with -tags chart)")

var (
	mu     sync.Mutex
	drawer func(io.Writer, Chart) error
)

// Register makes draw the function that writes a chart as SVG. Package
// chart/svg calls it when it is linked in.
func Register(draw func(io.Writer, Chart) error) {
	mu.Lock()
	defer mu.Unlock()
	drawer = draw
}

// Check is nil if this build can draw; otherwise an error telling how to
// run example (such as "./examples/crawler") with the chart. The examples
// call it before their run when -plot is given.
func Check(example string) error {
	mu.Lock()
	defer mu.Unlock()
	if drawer == nil {
		return fmt.Errorf("-plot: %w: the chart is left out of the default build, which would otherwise fetch gonum/plot and its fonts; run go run -tags chart %s -plot FILE.svg", ErrNotBuilt, example)
	}
	return nil
}

// CallsPer100ms writes c as an SVG document to w. It fails with an error
// wrapping ErrInvalidLimit if c.Rate is not positive and finite or
// c.ProviderLimit is negative, with ErrNoCalls if no series has an
// accepted call, with an error if a call comes before c.Start, and with
// ErrNotBuilt in a build without package chart/svg.
func CallsPer100ms(w io.Writer, c Chart) error {
	mu.Lock()
	draw := drawer
	mu.Unlock()
	if draw == nil {
		return ErrNotBuilt
	}
	return draw(w, c)
}

// WriteFile writes c as an SVG document to the file path (see
// CallsPer100ms). Nothing is written if c cannot be drawn.
func WriteFile(path string, c Chart) error {
	var buf bytes.Buffer
	if err := CallsPer100ms(&buf, c); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}
