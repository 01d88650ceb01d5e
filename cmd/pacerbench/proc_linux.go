//go:build linux

package main

import "syscall"

// sysProcAttr makes the kernel kill the redis-server this program started if
// the program dies without stopping it (a panic, a signal), so no orphan
// keeps running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
