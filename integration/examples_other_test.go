//go:build !unix

package integration

import "os/exec"

// ownGroup leaves cmd as it is: without process groups, Cancel kills cmd's
// process only, and worker processes it started stop once their parent's
// provider is gone.
func ownGroup(*exec.Cmd) {}

// killGroup kills cmd's process.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}

// groupAlive cannot tell without process groups, and says no.
func groupAlive(*exec.Cmd) bool { return false }
