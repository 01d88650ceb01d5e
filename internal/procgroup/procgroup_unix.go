//go:build unix

package procgroup

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// Own makes cmd, not yet started and made by exec.CommandContext, the
// leader of a process group of its own, and makes its Cancel (the context
// ending) kill the whole group. On Linux the kernel also kills cmd if the thread that started it
// dies (the program exits or crashes without killing it; the Go runtime ends
// a thread only if a goroutine exits while locked to it).
func Own(cmd *exec.Cmd) {
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error { return Kill(cmd) }
}

// Kill kills the process group of cmd, started after Own, with SIGKILL. It
// returns os.ErrProcessDone if no process of the group is left.
func Kill(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}

// Alive reports whether a process of cmd's group, started after Own, still
// runs (or is a zombie nobody reaped).
func Alive(cmd *exec.Cmd) bool {
	return cmd.Process != nil && syscall.Kill(-cmd.Process.Pid, 0) == nil
}
