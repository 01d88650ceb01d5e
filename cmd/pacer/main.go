// Command pacer is the operator's tool for a fleet paced by
// github.com/pacer-go/pacer: it shows each key's limit, queue, pause and
// slots granted per second, and the fleet's Limiters (status, watch,
// history; web, a live view of them in a browser), and it changes what the
// whole fleet shares in Redis (set any band of a key's limit, unset,
// pause, resume, weight), each change recorded with who made it and why.
//
//	pacer -redis redis://127.0.0.1:6379/0 status
//	pacer set api.example.com --rate 5 --burst 1 --reason "provider lowered us (ticket 123)"
//	pacer set api.openai.com --band tokens --rate 500 --burst 2000 --reason "tier 2"
//	pacer pause api.example.com 10m --reason "incident"
//	pacer watch 'api.*'
//	pacer web 'api.*'   # the same in a browser, on http://127.0.0.1:8080/
//
// Run "pacer help" for every command and flag; docs/ops.md shows sample
// screens. It is built on admin.Client.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK      = 0
	exitRuntime = 1 // Redis unreachable, an unknown key, a refused change
	exitUsage   = 2 // bad command line: nothing was sent to Redis
)

// usageError is a bad command line, found before anything reaches Redis.
type usageError struct {
	msg string
	err error // the error it says in its words, if any
}

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// run runs the command line args and returns the exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	c := &cli{stdin: stdin, stdout: stdout, stderr: stderr}
	err := c.main(args)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errHelp):
		return exitOK
	}
	fmt.Fprintf(stderr, "pacer: %s\n", oneLine(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	return exitRuntime
}

// errHelp ends a run that printed the help it was asked for.
var errHelp = errors.New("help printed")
