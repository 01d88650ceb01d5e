// Package svg draws what the provider saw during an example's run: for
// each host, a panel of its own with the calls it accepted in each 100 ms
// (a filled step), the 429s it answered (red crosses), pacer's limit (a red
// line drawn over the calls, so that calls at the limit touch it) and the
// provider's limit (dashed). The legend sits above the panels, over no
// data. Linked in (an example built with -tags chart imports it), it
// registers itself with package chart: chart.WriteFile draws with it.
//
// It uses gonum.org/v1/plot and writes SVG without embedded fonts, so a
// chart of a run of a few minutes is tens of kilobytes.
package svg

import (
	"cmp"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"time"

	"github.com/pacer-go/pacer/examples/internal/chart"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The chart's layout.
const (
	width       = 8 * vg.Inch
	headerH     = 0.9 * vg.Inch // the title and the legend
	panelH      = 1.7 * vg.Inch // each panel, when there are several
	lonePanelH  = 3 * vg.Inch   // a single panel
	marginWidth = 0.15 * vg.Inch
)

// Colours: the hosts' fills come from palette; red is pacer's limit and the
// 429s.
var (
	limitColor  = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	rejectColor = color.RGBA{R: 214, G: 39, B: 40, A: 255}
	palette     = []color.RGBA{
		{R: 31, G: 119, B: 180, A: 255},  // blue
		{R: 44, G: 160, B: 44, A: 255},   // green
		{R: 255, G: 127, B: 14, A: 255},  // orange
		{R: 148, G: 103, B: 189, A: 255}, // purple
		{R: 140, G: 86, B: 75, A: 255},   // brown
		{R: 23, G: 190, B: 207, A: 255},  // cyan
	}
)

func init() { chart.Register(callsPer100ms) }

// callsPer100ms writes c as an SVG document to w (chart.CallsPer100ms).
func callsPer100ms(w io.Writer, c chart.Chart) error {
	l, err := newLayout(c)
	if err != nil {
		return err
	}
	h := headerH + vg.Length(len(l.panels))*panelH
	if len(l.panels) == 1 {
		h = headerH + lonePanelH
	}
	canvas := vgsvg.New(width, h)
	dc := draw.New(canvas)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	header := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: dc.Min.X + marginWidth, Y: dc.Max.Y - headerH},
		Max: vg.Point{X: dc.Max.X - marginWidth, Y: dc.Max.Y},
	}}
	l.drawHeader(header)

	body := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: dc.Min,
		Max: vg.Point{X: dc.Max.X, Y: dc.Max.Y - headerH},
	}}
	rows := make([][]*plot.Plot, len(l.panels))
	for i, p := range l.panels {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(rows), Cols: 1, PadY: vg.Points(6), PadLeft: vg.Points(4), PadRight: marginWidth, PadBottom: vg.Points(4)}
	for i, cs := range plot.Align(rows, tiles, body) {
		rows[i][0].Draw(cs[0])
	}
	if _, err := canvas.WriteTo(w); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// layout is a chart ready to draw: its panels and the legend's entries.
type layout struct {
	title  string
	panels []*plot.Plot
	legend [2]plot.Legend // two columns
}

// newLayout validates c and builds the panels and the legend.
func newLayout(c chart.Chart) (*layout, error) {
	shared := slices.ContainsFunc(c.Series, func(s chart.Series) bool { return s.Rate == 0 })
	if shared && (c.Rate <= 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0)) {
		return nil, fmt.Errorf("%w: Rate %v, want a positive finite rate", chart.ErrInvalidLimit, c.Rate)
	}
	if c.ProviderLimit < 0 {
		return nil, fmt.Errorf("%w: ProviderLimit %d is negative", chart.ErrInvalidLimit, c.ProviderLimit)
	}
	for i, st := range c.ProviderSteps {
		if st.Limit < 1 || c.ProviderLimit == 0 || (i > 0 && st.At.Before(c.ProviderSteps[i-1].At)) {
			return nil, fmt.Errorf("%w: ProviderSteps[%d] %d at %v (want a limit of 1 or more, in time order, after a ProviderLimit)",
				chart.ErrInvalidLimit, i, st.Limit, st.At)
		}
	}
	var first, last time.Time
	accepted := 0
	for _, s := range c.Series {
		accepted += len(s.Calls)
		for _, t := range slices.Concat(s.Calls, s.Rejected) {
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
	}
	if accepted == 0 {
		return nil, chart.ErrNoCalls
	}
	start := c.Start
	if start.IsZero() {
		start = first
	}
	if first.Before(start) {
		return nil, fmt.Errorf("chart: a call at %v comes %v before Start", first.Format(time.RFC3339Nano), start.Sub(first))
	}
	buckets := int(last.Sub(start)/chart.Bucket) + 1
	end := (time.Duration(buckets) * chart.Bucket).Seconds()

	// The same y range in every panel, so that they compare at a glance,
	// except in panels with a rate of their own.
	top := c.Rate / 10
	if c.ProviderLimit > 0 {
		top = math.Max(top, float64(c.ProviderLimit)/10)
	}
	for _, st := range c.ProviderSteps {
		top = math.Max(top, float64(st.Limit)/10)
	}
	counts := make([][2][]float64, len(c.Series)) // per series: accepted, rejected per bucket
	tops := make([]float64, len(c.Series))
	for i, s := range c.Series {
		if s.Amounts != nil && len(s.Amounts) != len(s.Calls) {
			return nil, fmt.Errorf("chart: %s: %d amounts for %d calls", s.Name, len(s.Amounts), len(s.Calls))
		}
		if s.Rate < 0 || s.Quota < 0 || math.IsNaN(s.Rate+s.Quota) || math.IsInf(s.Rate+s.Quota, 0) {
			return nil, fmt.Errorf("%w: %s: Rate %v, Quota %v", chart.ErrInvalidLimit, s.Name, s.Rate, s.Quota)
		}
		for _, l := range s.Learned {
			if !(l.Rate >= 0) || math.IsInf(l.Rate, 0) {
				return nil, fmt.Errorf("%w: %s: learned rate %v", chart.ErrInvalidLimit, s.Name, l.Rate)
			}
		}
		counts[i] = [2][]float64{perBucket(s.Calls, s.Amounts, start, buckets), perBucket(s.Rejected, nil, start, buckets)}
		tops[i] = math.Max(slices.Max(counts[i][0]), slices.Max(counts[i][1]))
		if s.Rate == 0 {
			top = math.Max(top, tops[i])
		} else {
			tops[i] = math.Max(tops[i], math.Max(s.Rate, s.Quota)/10)
		}
	}

	l := &layout{title: c.Title}
	if l.title == "" {
		l.title = "calls per 100 ms"
	}
	limit := hline(end, c.Rate/10, limitColor, nil)
	var provider *plotter.Line
	if c.ProviderLimit > 0 {
		provider = hline(end, float64(c.ProviderLimit)/10, color.Black, []vg.Length{vg.Points(4), vg.Points(3)})
		if len(c.ProviderSteps) > 0 {
			xy := plotter.XYs{{X: 0, Y: float64(c.ProviderLimit) / 10}}
			for _, st := range c.ProviderSteps {
				x := math.Min(end, math.Max(0, st.At.Sub(start).Seconds()))
				xy = append(xy, plotter.XY{X: x, Y: xy[len(xy)-1].Y}, plotter.XY{X: x, Y: float64(st.Limit) / 10})
			}
			xy = append(xy, plotter.XY{X: end, Y: xy[len(xy)-1].Y})
			provider, _ = plotter.NewLine(xy) // finite points: no error
			provider.LineStyle = draw.LineStyle{Color: color.Black, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
		}
	}
	var learned plot.Thumbnailer // the first learned line, for the legend
	var fill0 plot.Thumbnailer   // the first host's, for the legend
	var marks *plotter.Scatter
	own := false                            // a panel with a rate of its own
	var ownLimit, ownQuota plot.Thumbnailer // the first such panel's lines
	for i, s := range c.Series {
		unit, limit, provider, top := cmp.Or(s.Unit, "calls"), limit, provider, top
		if s.Rate > 0 {
			own = true
			top = tops[i]
			limit = hline(end, s.Rate/10, limitColor, nil)
			provider = nil
			if s.Quota > 0 {
				provider = hline(end, s.Quota/10, color.Black, []vg.Length{vg.Points(4), vg.Points(3)})
			}
			if ownLimit == nil {
				ownLimit = limit
			}
			if ownQuota == nil && provider != nil {
				ownQuota = provider
			}
		}
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s (%d calls)", s.Name, len(s.Calls))
		if s.Amounts != nil {
			p.Title.Text = fmt.Sprintf("%s (%g %s)", s.Name, sum(s.Amounts), unit)
		}
		if len(s.Rejected) > 0 {
			p.Title.Text += fmt.Sprintf(", %d refused with 429", len(s.Rejected))
		} else {
			p.Title.Text += ", no 429"
		}
		p.Title.Padding = vg.Points(2)
		p.Title.TextStyle.Font.Size = vg.Points(10)
		p.Y.Label.Text = unit + " per 100 ms"
		p.Y.Label.TextStyle.Font.Size = vg.Points(9)
		p.X.Label.TextStyle.Font.Size = vg.Points(10)
		if i == len(c.Series)-1 {
			p.X.Label.Text = "time since start (s)"
		}
		p.X.Min, p.X.Max = 0, end
		p.Y.Min, p.Y.Max = 0, math.Ceil(top*1.15)+0.5
		p.Add(plotter.NewGrid())

		fill, err := plotter.NewPolygon(steps(counts[i][0], end))
		if err != nil {
			return nil, fmt.Errorf("chart: %s: %w", s.Name, err)
		}
		clr := palette[i%len(palette)]
		fill.Color = color.NRGBA{R: clr.R, G: clr.G, B: clr.B, A: 80} // not premultiplied, unlike RGBA
		fill.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(0.75)}
		p.Add(fill)
		if fill0 == nil {
			fill0 = fill
		}
		// Over the calls: calls exactly at the limit touch the line.
		if s.Learned != nil {
			xy := make(plotter.XYs, 0, len(s.Learned))
			for _, l := range s.Learned {
				if x := l.At.Sub(start).Seconds(); x >= 0 && x <= end {
					xy = append(xy, plotter.XY{X: x, Y: l.Rate / 10})
				}
			}
			if len(xy) > 0 {
				ll, err := plotter.NewLine(xy)
				if err != nil {
					return nil, fmt.Errorf("chart: %s: %w", s.Name, err)
				}
				ll.LineStyle = draw.LineStyle{Color: limitColor, Width: vg.Points(1.5)}
				p.Add(ll)
				if learned == nil {
					learned = ll
				}
			}
		} else {
			p.Add(limit)
		}
		if provider != nil {
			p.Add(provider)
		}
		if len(s.Rejected) > 0 {
			sc, err := plotter.NewScatter(points(counts[i][1]))
			if err != nil {
				return nil, fmt.Errorf("chart: %s: %w", s.Name, err)
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: rejectColor, Radius: vg.Points(4), Shape: boldCross{}}
			p.Add(sc)
			marks = sc
		}
		l.panels = append(l.panels, p)
	}

	for i := range l.legend {
		l.legend[i] = plot.NewLegend()
		l.legend[i].Top, l.legend[i].Left = true, true
		l.legend[i].TextStyle.Font.Size = vg.Points(9)
		l.legend[i].Padding = vg.Points(3)
	}
	if own {
		l.legend[0].Add("what the provider accepted, per 100 ms (one panel per band)", fill0)
	} else {
		l.legend[0].Add("calls the provider accepted, per 100 ms (one panel per host)", fill0)
	}
	if marks != nil {
		l.legend[0].Add("429s it answered, per 100 ms", marks)
	}
	if own {
		l.legend[1].Add("pacer's limit per second, /10", ownLimit)
		if ownQuota != nil {
			l.legend[1].Add("the provider's quota per second, /10", ownQuota)
		}
	} else {
		if learned != nil {
			l.legend[1].Add("the rate pacer learned, per second, /10", learned)
		} else {
			l.legend[1].Add(fmt.Sprintf("pacer's limit: %g/s = %g per 100 ms", c.Rate, c.Rate/10), limit)
		}
		if provider != nil {
			what := fmt.Sprintf("provider: %d in any 1 s, /10", c.ProviderLimit)
			for _, st := range c.ProviderSteps {
				what += fmt.Sprintf(", then %d", st.Limit)
			}
			l.legend[1].Add(what, provider)
		}
	}
	return l, nil
}

// drawHeader draws the title and, under it, the legend in two columns.
func (l *layout) drawHeader(c draw.Canvas) {
	title := plot.New().Title.TextStyle
	title.XAlign, title.YAlign = draw.XCenter, draw.YTop
	c.FillText(title, vg.Point{X: (c.Min.X + c.Max.X) / 2, Y: c.Max.Y - vg.Points(6)}, l.title)
	below := c.Max.Y - vg.Points(6) - title.Height(l.title) - vg.Points(6)
	split := c.Min.X + (c.Max.X-c.Min.X)*0.58
	for i, r := range []vg.Rectangle{
		{Min: vg.Point{X: c.Min.X, Y: c.Min.Y}, Max: vg.Point{X: split, Y: below}},
		{Min: vg.Point{X: split, Y: c.Min.Y}, Max: vg.Point{X: c.Max.X, Y: below}},
	} {
		l.legend[i].Draw(draw.Canvas{Canvas: c.Canvas, Rectangle: r})
	}
}

// perBucket sums the amounts (nil: 1 each) of the times in each bucket
// from start.
func perBucket(times []time.Time, amounts []float64, start time.Time, buckets int) []float64 {
	n := make([]float64, buckets)
	for i, t := range times {
		a := 1.0
		if amounts != nil {
			a = amounts[i]
		}
		n[t.Sub(start)/chart.Bucket] += a
	}
	return n
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// steps is the outline of the area under counts, a step per bucket held
// until the bucket's end, from 0 to end.
func steps(counts []float64, end float64) plotter.XYs {
	xys := plotter.XYs{{X: 0, Y: 0}}
	for b, n := range counts {
		x := (time.Duration(b) * chart.Bucket).Seconds()
		xys = append(xys, plotter.XY{X: x, Y: n}, plotter.XY{X: math.Min(x+chart.Bucket.Seconds(), end), Y: n})
	}
	return append(xys, plotter.XY{X: end, Y: 0})
}

// points places a mark in the middle of each bucket with a count, at its
// count.
func points(counts []float64) plotter.XYs {
	var xys plotter.XYs
	for b, n := range counts {
		if n > 0 {
			xys = append(xys, plotter.XY{X: (time.Duration(b)*chart.Bucket + chart.Bucket/2).Seconds(), Y: n})
		}
	}
	return xys
}

// boldCross is draw.CrossGlyph with strokes thick enough to see at a glance.
type boldCross struct{}

func (boldCross) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1.6)})
	r := sty.Radius * 0.8
	for _, d := range []vg.Point{{X: r, Y: r}, {X: r, Y: -r}} {
		var p vg.Path
		p.Move(pt.Sub(d))
		p.Line(pt.Add(d))
		c.Stroke(p)
	}
}

// hline is a horizontal line at y from x = 0 to end.
func hline(end, y float64, clr color.Color, dashes []vg.Length) *plotter.Line {
	l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: end, Y: y}}) // finite points: no error
	l.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(1.5), Dashes: dashes}
	return l
}
