//go:build linux

package main

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stopMidCall stops the process (SIGSTOP) and reads every line it wrote
// before; with a call under way it leaves the process stopped (for the
// kill) and returns those calls' hosts, by count; with none it resumes the
// process. stopped is false when the process could not be stopped or its
// output not read to its end (then it runs on, and nothing is returned).
func (pr *proc) stopMidCall() (held map[string]int, stopped bool) {
	if pr.stdout == nil || pr.cmd.Process.Signal(syscall.SIGSTOP) != nil {
		return nil, false
	}
	for {
		if drained, ok := pr.drained(); !ok {
			_ = pr.cmd.Process.Signal(syscall.SIGCONT)
			return nil, false
		} else if drained {
			break
		}
		select {
		case <-pr.done:
			return nil, false
		case <-time.After(time.Millisecond):
		}
	}
	pr.mu.Lock()
	held = map[string]int{}
	for _, h := range pr.open {
		held[h]++
	}
	pr.mu.Unlock()
	if len(held) == 0 {
		_ = pr.cmd.Process.Signal(syscall.SIGCONT)
	}
	return held, true
}

// drained reports whether every byte the stopped process wrote to stdout
// has been read and its lines handled: none left in the pipe (TIOCINQ, Linux's FIONREAD),
// and the lines handled are all the bytes read. ok is false if the pipe
// cannot be asked.
func (pr *proc) drained() (drained, ok bool) {
	rc, err := pr.stdout.SyscallConn()
	if err != nil {
		return false, false
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || ierr != nil {
		return false, false
	}
	pr.mu.Lock()
	handled := pr.lines
	pr.mu.Unlock()
	return n == 0 && handled == pr.read.Load(), true
}
