//go:build !unix

package main

import "time"

// cpuTime is not measured here: the fleet's client CPU reads 0.
func cpuTime() time.Duration { return 0 }

// ownCPUTime is not measured here.
func ownCPUTime() time.Duration { return -1 }
