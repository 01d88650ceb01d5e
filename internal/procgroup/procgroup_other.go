//go:build !unix

package procgroup

import "os/exec"

// Own leaves cmd as it is: without process groups, its Cancel kills cmd's
// process only.
func Own(*exec.Cmd) {}

// Kill kills cmd's process; processes it started are left running.
func Kill(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}

// Alive cannot tell without process groups, and says no.
func Alive(*exec.Cmd) bool { return false }
