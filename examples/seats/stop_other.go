//go:build !linux

package main

// stopMidCall cannot stop a process here: the victim is killed as it runs
// (a call it ended just before the kill may then be counted as under way).
func (pr *proc) stopMidCall() (map[string]int, bool) { return nil, false }
