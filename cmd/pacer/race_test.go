//go:build race

package main

// raceEnabled makes TestMain build the binary with -race too.
const raceEnabled = true
