//go:build !linux

package redisproc

import "syscall"

// sysProcAttr has nothing to add outside Linux: a server started by a
// program that dies without closing it is left running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
