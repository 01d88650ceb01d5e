// Package procgroup runs a child process in a process group of its own, so
// that the child and every process it starts can be killed together.
//
//	cmd := exec.CommandContext(ctx, bin, args...) // CommandContext: Own sets cmd.Cancel
//	procgroup.Own(cmd)                            // ctx's end kills the whole group
//
// Where the platform has no process groups, Own leaves cmd as it is and Kill
// kills cmd's process only.
package procgroup
