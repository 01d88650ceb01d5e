package lua_test

// The limit the rule tests hold slots to: over every interval, at most
// burst + rate*T units on a bucket band; at most N units in each window of
// a window band.

// overBucket returns the first interval [slots[i], slots[j]] of sorted
// slots (Unix ns, one unit each) that holds more than burst + rate*T
// units, T its length in seconds; over is false if none does.
func overBucket(slots []int64, rate, burst float64) (i, j int, over bool) {
	for i = range slots {
		for j = i; j < len(slots); j++ {
			T := float64(slots[j]-slots[i]) / 1e9
			if n := float64(j - i + 1); n > burst+rate*T+1e-6 {
				return i, j, true
			}
		}
	}
	return 0, 0, false
}

// perWindow counts slots (Unix ns, one unit each) by window, windows of
// lenUS µs whose boundaries lie at originUS modulo lenUS.
func perWindow(slots []int64, lenUS, originUS int64) map[int64]int {
	per := map[int64]int{}
	for _, s := range slots {
		per[(s/1000-originUS)/lenUS]++
	}
	return per
}
