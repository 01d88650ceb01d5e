//go:build !unix

package redisproc

import (
	"errors"
	"os"
)

// pause would stop p with SIGSTOP, which this platform does not have.
func pause(*os.Process) error { return errors.ErrUnsupported }

// resume would continue p with SIGCONT, which this platform does not have.
func resume(*os.Process) error { return errors.ErrUnsupported }

// procState cannot tell without /proc.
func procState(int) (byte, bool) { return 0, false }
