package fleet

import "syscall"

// sysProcAttr puts a child in a process group of its own, and makes the
// kernel kill it if the thread that started it dies (the parent exits or
// crashes). The Go runtime ends a thread only if a goroutine exits while
// locked to it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
