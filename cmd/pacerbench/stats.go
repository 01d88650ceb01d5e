package main

import (
	"slices"
	"time"

	"github.com/pacer-go/pacer/internal/provider"
)

// quantile returns the q-quantile (0..1) of sorted by the nearest-rank
// method, or 0 for no values.
func quantile[T int64 | time.Duration](sorted []T, q float64) T {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// busiest returns the most of the call times (Unix ns) in any window
// [t, t+w), the provider's own measure.
func busiest(calls []int64, w time.Duration) int {
	times := make([]time.Time, len(calls))
	for i, c := range calls {
		times[i] = time.Unix(0, c)
	}
	return provider.Busiest(times, w)
}

// leakyRejections returns how many of calls (Unix ns) a leaky-bucket
// provider at rate would refuse.
func leakyRejections(calls []int64, rate float64) int {
	times := make([]time.Time, len(calls))
	for i, c := range calls {
		times[i] = time.Unix(0, c)
	}
	return provider.LeakyRejections(times, rate)
}

// gaps returns the sorted differences between consecutive sorted times.
func gaps(sorted []int64) []time.Duration {
	if len(sorted) < 2 {
		return nil
	}
	g := make([]time.Duration, len(sorted)-1)
	for i := range g {
		g[i] = time.Duration(sorted[i+1] - sorted[i])
	}
	slices.Sort(g)
	return g
}
