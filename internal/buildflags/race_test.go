//go:build race

package buildflags

const raceEnabled = true
