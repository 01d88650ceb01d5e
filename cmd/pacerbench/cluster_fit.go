package main

import (
	"fmt"
	"strings"
)

// The cluster phase's fit: each cost of the steady segment against the
// fleet's size N, a least-squares line through the runs, and the line at
// N = clusterExtrapolate. The cold load is the same at every size, so
// what grows with N is what the processes cost by living: heartbeats,
// connections, the client's own loops.

// clusterExtrapolate is the fleet size the fit extrapolates to.
const clusterExtrapolate = 1000

// lineFit is y = Intercept + Slope × x by least squares.
type lineFit struct {
	X, Y             []float64
	MeanX, MeanY     float64
	Sxy, Sxx         float64
	Slope, Intercept float64
}

func fitLine(x, y []float64) lineFit {
	f := lineFit{X: x, Y: y}
	n := float64(len(x))
	for i := range x {
		f.MeanX += x[i] / n
		f.MeanY += y[i] / n
	}
	for i := range x {
		f.Sxy += (x[i] - f.MeanX) * (y[i] - f.MeanY)
		f.Sxx += (x[i] - f.MeanX) * (x[i] - f.MeanX)
	}
	if f.Sxx > 0 {
		f.Slope = f.Sxy / f.Sxx
	}
	f.Intercept = f.MeanY - f.Slope*f.MeanX
	return f
}

func (f lineFit) at(x float64) float64 { return f.Intercept + f.Slope*x }

// arithmetic shows how the line came out of the rows.
func (f lineFit) arithmetic() string {
	return fmt.Sprintf("mean N = %.4g, mean y = %.4g; slope = Σ(N − %.4g)(y − %.4g) / Σ(N − %.4g)² = %.6g / %.6g = %.6g; intercept = %.4g − %.6g × %.4g = %.6g",
		f.MeanX, f.MeanY, f.MeanX, f.MeanY, f.MeanX, f.Sxy, f.Sxx, f.Slope, f.MeanY, f.Slope, f.MeanX, f.Intercept)
}

// clusterCost is one cost the fit follows.
type clusterCost struct {
	Name  string // what y is
	Unit  string
	Total string // how the line gives the cost of a fleet of N
	y     func(r *clusterRun, rows []shardRow) float64
	// total returns the fleet's cost at N from the line's value there.
	total func(n, y float64) float64
}

var clusterCosts = []clusterCost{
	{Name: "heartbeat.lua's Redis time on the fleet's shard, per process", Unit: "µs/s", Total: "N × y µs/s",
		y: func(r *clusterRun, rows []shardRow) float64 {
			for _, s := range rows {
				if s.Fleet {
					return s.BeatUsec / float64(r.Procs)
				}
			}
			return 0
		}, total: func(n, y float64) float64 { return n * y }},
	{Name: "the fleet's shard's CPU above the other masters' mean, per process", Unit: "µs/s", Total: "N × y µs/s",
		y: func(r *clusterRun, rows []shardRow) float64 {
			fleet, others, n := 0.0, 0.0, 0
			for _, s := range rows {
				if s.Fleet {
					fleet = s.CPU
				} else {
					others += s.CPU
					n++
				}
			}
			if n == 0 {
				return 0
			}
			return (fleet - others/float64(n)) * 1e6 / float64(r.Procs)
		}, total: func(n, y float64) float64 { return n * y }},
	{Name: "each other master's CPU above idle (their mean)", Unit: "µs/s", Total: "y µs/s",
		y: func(r *clusterRun, rows []shardRow) float64 {
			others, n := 0.0, 0
			for _, s := range rows {
				if !s.Fleet {
					others += s.CPU
					n++
				}
			}
			if n == 0 {
				return 0
			}
			return others * 1e6 / float64(n)
		}, total: func(_, y float64) float64 { return y }},
	{Name: "connections per master (their mean)", Unit: "connections", Total: "y",
		y: func(r *clusterRun, rows []shardRow) float64 {
			sum := 0.0
			for _, s := range rows {
				sum += float64(s.Clients)
			}
			return sum / float64(len(rows))
		}, total: func(_, y float64) float64 { return y }},
	{Name: "the whole fleet's client CPU", Unit: "µs/s", Total: "y µs/s",
		y: func(r *clusterRun, _ []shardRow) float64 {
			if s := r.segment("steady"); s != nil {
				return s.ClientCPU * 1e6 * float64(r.Procs)
			}
			return 0
		}, total: func(_, y float64) float64 { return y }},
}

// fitTables returns the fit of each cost against the fleet's size.
func (res *clusterResults) fitTables() string {
	var b strings.Builder
	b.WriteString("\n### Cluster: the costs against the fleet's size\n\n")
	fmt.Fprintf(&b, "The steady segment of each run above (the same cold load, %.0f calls/s, and judged keys at every size), a least-squares line through the rows, and that line at N = %d: an extrapolation, since the largest fleet measured had %d processes.\n\n",
		res.Runs[0].ColdRate, clusterExtrapolate, res.Runs[len(res.Runs)-1].Procs)
	b.WriteString("| N |")
	for _, c := range clusterCosts {
		fmt.Fprintf(&b, " %s (%s) |", c.Name, c.Unit)
	}
	b.WriteString("\n|--:|")
	for range clusterCosts {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	ys := make([][]float64, len(clusterCosts))
	var xs []float64
	for _, r := range res.Runs {
		rows := r.shardRows()
		xs = append(xs, float64(r.Procs))
		fmt.Fprintf(&b, "| %d |", r.Procs)
		for i, c := range clusterCosts {
			y := c.y(r, rows)
			ys[i] = append(ys[i], y)
			fmt.Fprintf(&b, " %.1f |", y)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for i, c := range clusterCosts {
		f := fitLine(xs, ys[i])
		var pred []string
		for j, x := range xs {
			pred = append(pred, fmt.Sprintf("%.1f at N = %.0f (measured %.1f)", f.at(x), x, ys[i][j]))
		}
		y1k := f.at(clusterExtrapolate)
		fmt.Fprintf(&b, "- %s: y = %.4g + %.4g × N %s. %s. The line gives %s; at N = %d, y = %.1f %s, so %s = %.4g.\n",
			c.Name, f.Intercept, f.Slope, c.Unit, f.arithmetic(), strings.Join(pred, ", "), clusterExtrapolate, y1k, c.Unit,
			strings.ReplaceAll(c.Total, "N", fmt.Sprint(clusterExtrapolate)), c.total(clusterExtrapolate, y1k))
	}
	return b.String()
}
