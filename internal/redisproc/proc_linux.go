//go:build linux

package redisproc

import "syscall"

// sysProcAttr makes the kernel kill a started server if the program that
// started it dies without closing it (a panic, a signal, a test's -timeout),
// so no orphan keeps its port. The signal is tied to the thread that started the process, which
// the Go runtime only ends if a goroutine exits while locked to it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
