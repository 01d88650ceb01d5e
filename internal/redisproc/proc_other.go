//go:build !linux

package redisproc

import (
	"errors"
	"syscall"
)

// sysProcAttr has nothing to add outside Linux: a server started by a
// program that dies without closing it is left running.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// setFIFO is Linux's only.
func setFIFO(pid, prio int) error {
	return errors.New("SCHED_FIFO is supported on Linux only")
}
