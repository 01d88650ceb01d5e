//go:build unix

package redisproc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// pause stops p with SIGSTOP and, where /proc tells, waits until the kernel
// reports it stopped, so that nothing sent after pause returns is answered.
func pause(p *os.Process) error {
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		state, ok := procState(p.Pid)
		if !ok || state == 'T' {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("process %d still in state %q after SIGSTOP", p.Pid, state)
		}
		time.Sleep(time.Millisecond)
	}
}

// resume continues p with SIGCONT; it does nothing to a running process.
func resume(p *os.Process) error { return p.Signal(syscall.SIGCONT) }

// procState returns the state letter of process pid from /proc/pid/stat
// ('R', 'S', 'T'...), and false where there is no such file.
func procState(pid int) (byte, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// "pid (comm) S ...": comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0, false
	}
	return data[i+2], true
}
