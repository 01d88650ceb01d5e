package main

import (
	"math"
	"strings"
	"time"
)

// sparkRunes are a sparkline's levels, lowest first.
var sparkRunes = []rune("▁▂▃▄▅▆▇█")

// window is how far back watch's sparklines reach.
const window = time.Minute

// maxSpark is the widest sparkline, in runes.
const maxSpark = 30

// A point is one frame's reading of a key.
type point struct {
	at    time.Time     // Redis's clock
	rate  float64       // slots granted per second since the frame before; NaN if unknown
	queue time.Duration // time to the last slot granted, 0 if none ahead
}

// trail is a key's points over the last window.
type trail []point

// add appends p and forgets the points older than the window.
func (t trail) add(p point) trail {
	t = append(t, p)
	i := 0
	for i < len(t) && p.at.Sub(t[i].at) > window {
		i++
	}
	return append(trail(nil), t[i:]...)
}

// sparkWidth is the number of runes of a sparkline for frames every
// interval: one per interval, at most maxSpark.
func sparkWidth(interval time.Duration) int {
	return max(1, min(maxSpark, int(window/interval)))
}

// buckets splits the window ending at now into width spans and folds the
// values of the points in each: f gives a point's value (NaN to skip it),
// and each span takes the mean (mean true) or the maximum of its values.
// A span without values is NaN.
func (t trail) buckets(now time.Time, width int, f func(point) float64, mean bool) []float64 {
	out := make([]float64, width)
	n := make([]int, width)
	span := window / time.Duration(width)
	start := now.Add(-window)
	for i := range out {
		out[i] = math.NaN()
	}
	for _, p := range t {
		v := f(p)
		if math.IsNaN(v) || p.at.Before(start) || p.at.After(now) {
			continue
		}
		i := min(width-1, int(p.at.Sub(start)/span))
		switch {
		case n[i] == 0:
			out[i] = v
		case mean:
			out[i] += v
		default:
			out[i] = math.Max(out[i], v)
		}
		n[i]++
	}
	if mean {
		for i := range out {
			if n[i] > 0 {
				out[i] /= float64(n[i])
			}
		}
	}
	return out
}

// sparkline draws values (NaN: a blank) on the scale 0 to top, or to the
// largest value if that is higher.
func sparkline(values []float64, top float64) string {
	for _, v := range values {
		if v > top {
			top = v
		}
	}
	var b strings.Builder
	for _, v := range values {
		switch {
		case math.IsNaN(v):
			b.WriteRune(' ')
		case top <= 0 || v <= 0:
			b.WriteRune(sparkRunes[0])
		default:
			i := int(math.Ceil(v/top*float64(len(sparkRunes)))) - 1
			b.WriteRune(sparkRunes[max(0, min(len(sparkRunes)-1, i))])
		}
	}
	return b.String()
}
