//go:build linux

package redisproc

import (
	"fmt"
	"syscall"
	"unsafe"
)

// sysProcAttr makes the kernel kill a started server if the program that
// started it dies without closing it (a panic, a signal, a test's -timeout),
// so no orphan keeps its port. The signal is tied to the thread that started the process, which
// the Go runtime only ends if a goroutine exits while locked to it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// setFIFO puts process pid's main thread under SCHED_FIFO at priority
// prio (sched_setscheduler(2)); threads it started before keep their
// policy.
func setFIFO(pid, prio int) error {
	if err := checkFIFO(prio); err != nil {
		return err
	}
	param := struct{ priority int32 }{int32(prio)}
	const schedFIFO = 1
	if _, _, e := syscall.Syscall(syscall.SYS_SCHED_SETSCHEDULER, uintptr(pid), schedFIFO, uintptr(unsafe.Pointer(&param))); e != 0 {
		if e == syscall.EPERM {
			return fmt.Errorf("%w (it needs root or CAP_SYS_NICE)", e)
		}
		return e
	}
	return nil
}
