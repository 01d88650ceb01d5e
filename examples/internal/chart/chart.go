// Package chart draws what the provider saw during an example's run: the
// calls in each 100 ms, one line per host, against the limit. The examples
// write it with -plot FILE.svg.
//
// It uses gonum.org/v1/plot and writes SVG without embedded fonts, so a
// chart of a run of a few minutes is tens of kilobytes.
package chart

import (
	"bytes"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Bucket is the width of one bar of the chart.
const Bucket = 100 * time.Millisecond

// Errors for a Chart that cannot be drawn.
var (
	ErrNoCalls      = errors.New("chart: no calls to draw")
	ErrInvalidLimit = errors.New("chart: invalid limit")
)

// Series is one line of the chart: the times of the calls one host accepted.
type Series struct {
	Name  string
	Calls []time.Time
}

// Chart is a chart of calls per 100 ms.
type Chart struct {
	// Title is printed above the chart. Default: "calls per 100 ms".
	Title string

	// Start is time 0 on the x axis, the start of the run; no call may
	// come before it. Default (zero): the first call.
	Start time.Time

	// Rate is pacer's limit in calls per second, drawn as a horizontal
	// line at Rate/10 calls per 100 ms. Required: positive and finite.
	Rate float64

	// ProviderLimit, if positive, is the calls the provider accepts in any
	// 1 s, drawn as a dashed line at ProviderLimit/10 per 100 ms (the
	// provider counts over 1 s, so a single 100 ms may hold more). Default
	// (0): not drawn.
	ProviderLimit int

	// Series are the lines, one per host, in legend order. At least one
	// call is required.
	Series []Series
}

// Hosts turns the calls per host (as provider.Server.Calls returns them)
// into one Series per host, sorted by name.
func Hosts(calls map[string][]time.Time) []Series {
	out := make([]Series, 0, len(calls))
	for h, c := range calls {
		out = append(out, Series{Name: h, Calls: c})
	}
	slices.SortFunc(out, func(a, b Series) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Size of the chart.
const (
	width  = 8 * vg.Inch
	height = 4 * vg.Inch
)

// CallsPer100ms writes c as an SVG document to w. It fails with an error
// wrapping ErrInvalidLimit if c.Rate is not positive and finite or
// c.ProviderLimit is negative, with ErrNoCalls if no series has a call, and
// with an error if a call comes before c.Start.
func CallsPer100ms(w io.Writer, c Chart) error {
	p, err := c.plot()
	if err != nil {
		return err
	}
	wt, err := p.WriterTo(width, height, "svg")
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
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

// plot validates c and builds the plot.
func (c Chart) plot() (*plot.Plot, error) {
	if c.Rate <= 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) {
		return nil, fmt.Errorf("%w: Rate %v, want a positive finite rate", ErrInvalidLimit, c.Rate)
	}
	if c.ProviderLimit < 0 {
		return nil, fmt.Errorf("%w: ProviderLimit %d is negative", ErrInvalidLimit, c.ProviderLimit)
	}
	var first, last time.Time
	for _, s := range c.Series {
		for _, t := range s.Calls {
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
	}
	if first.IsZero() {
		return nil, ErrNoCalls
	}
	start := c.Start
	if start.IsZero() {
		start = first
	}
	if first.Before(start) {
		return nil, fmt.Errorf("chart: a call at %v comes %v before Start", first.Format(time.RFC3339Nano), start.Sub(first))
	}
	buckets := int(last.Sub(start)/Bucket) + 1

	p := plot.New()
	p.Title.Text = c.Title
	if p.Title.Text == "" {
		p.Title.Text = "calls per 100 ms"
	}
	p.X.Label.Text = "time since start (s)"
	p.Y.Label.Text = "calls per 100 ms"
	p.Legend.Top = true
	// On the left: viewers draw the text with fonts of their own, often
	// wider than the metrics it was laid out with, and text running over
	// the plot reads better than text cut off at the edge.
	p.Legend.Left = true
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())

	// The limits first, so that a series exactly at the limit shows on top.
	end := (time.Duration(buckets) * Bucket).Seconds()
	limit := hline(end, c.Rate/10, color.RGBA{R: 200, A: 255}, nil)
	p.Add(limit)
	top := c.Rate / 10
	var provider *plotter.Line
	if c.ProviderLimit > 0 {
		provider = hline(end, float64(c.ProviderLimit)/10, color.Black, []vg.Length{vg.Points(4), vg.Points(3)})
		p.Add(provider)
		top = math.Max(top, float64(c.ProviderLimit)/10)
	}

	for i, s := range c.Series {
		counts := make([]int, buckets)
		for _, t := range s.Calls {
			counts[t.Sub(start)/Bucket]++
		}
		// A step per bucket, held until the bucket's end.
		xys := make(plotter.XYs, buckets+1)
		for b, n := range counts {
			xys[b] = plotter.XY{X: (time.Duration(b) * Bucket).Seconds(), Y: float64(n)}
			top = math.Max(top, float64(n))
		}
		xys[buckets] = plotter.XY{X: end, Y: float64(counts[buckets-1])}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("chart: %s: %w", s.Name, err)
		}
		l.StepStyle = plotter.PostStep
		l.Color = palette[i%len(palette)]
		l.Dashes = plotutil.Dashes(i / len(palette))
		l.Width = vg.Points(1)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s (%d calls)", s.Name, len(s.Calls)), l)
	}
	p.Legend.Add(fmt.Sprintf("pacer's limit: %g/s = %g per 100 ms", c.Rate, c.Rate/10), limit)
	if provider != nil {
		p.Legend.Add(fmt.Sprintf("provider: %d in any 1 s, /10", c.ProviderLimit), provider)
	}
	p.X.Min, p.X.Max = 0, end
	p.Y.Min, p.Y.Max = 0, math.Ceil(top*1.4)+1 // room for the legend
	return p, nil
}

// palette colours the series; red is the limit's.
var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},  // blue
	color.RGBA{R: 44, G: 160, B: 44, A: 255},   // green
	color.RGBA{R: 255, G: 127, B: 14, A: 255},  // orange
	color.RGBA{R: 148, G: 103, B: 189, A: 255}, // purple
	color.RGBA{R: 140, G: 86, B: 75, A: 255},   // brown
	color.RGBA{R: 23, G: 190, B: 207, A: 255},  // cyan
}

// hline is a horizontal line at y from x = 0 to end.
func hline(end, y float64, clr color.Color, dashes []vg.Length) *plotter.Line {
	l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: end, Y: y}}) // finite points: no error
	l.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(1.5), Dashes: dashes}
	return l
}
