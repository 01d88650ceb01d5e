//go:build unix && !linux

package fleet

import "syscall"

// sysProcAttr puts a child in a process group of its own.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
