//go:build !race

package buildflags

const raceEnabled = false
