// Package hog is the body of a CPU hog process: the benchmark's busy and
// loaded phases and the combination runner start processes that spin on
// one CPU each beside the fleet.
package hog

import (
	"fmt"
	"io"
	"os"
	"runtime"
)

// Spin keeps one CPU busy until stdin ends (or the process is killed).
func Spin() {
	runtime.GOMAXPROCS(1)
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	x := uint64(1)
	for {
		select {
		case <-done:
			if x == 0 {
				fmt.Println(x) // keep the loop's work
			}
			return
		default:
		}
		for range 1 << 16 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
}
