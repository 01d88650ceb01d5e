package reserve_test

import (
	"runtime"
	"strings"
)

// countGoroutines counts the goroutines running the Limiter's code (its
// background loop, a coalesced call, a Redis call it stopped waiting for,
// a pipeline of calls),
// leaving out the Redis client's own and the tests'.
func countGoroutines() int {
	count := 0
	for _, g := range stacks() {
		ours := strings.Contains(g, "pacer/reserve.(*Limiter)") || strings.Contains(g, "pacer/reserve.(*pipeScripter)")
		if ours && !strings.Contains(g, "testing.tRunner") {
			count++
		}
	}
	return count
}

// countStacks counts the goroutines whose stacks name fn.
func countStacks(fn string) int {
	count := 0
	for _, g := range stacks() {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// stacks returns every goroutine's stack.
func stacks() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return strings.Split(string(buf), "\n\n")
}
