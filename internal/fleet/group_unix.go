//go:build unix

package fleet

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// killGroup kills the process group of cmd, which sysProcAttr made its own.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return os.ErrProcessDone
	}
	return err
}
