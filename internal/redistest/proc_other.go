//go:build !linux

package redistest

import "syscall"

// sysProcAttr has nothing to add outside Linux: a server started by a test
// binary that dies without running its cleanups is left running.
func sysProcAttr() *syscall.SysProcAttr { return nil }
