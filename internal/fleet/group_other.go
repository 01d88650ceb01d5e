//go:build !unix

package fleet

import (
	"os/exec"
	"syscall"
)

// sysProcAttr has nothing to add without process groups.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// killGroup kills cmd's process; processes it started are left.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}
