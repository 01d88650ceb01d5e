// Package protocol is how the launchers of this module talk to the program
// that runs them (package internal/launcher of the root module): a launcher
// prints one line on stdout, the address of what it serves (or
// "unavailable: <why>"), then runs each line it reads on stdin as a command
// and answers it with one line, "ok" or "error: <why>". It exits when its
// stdin closes (or on SIGINT or SIGTERM), after cleaning up.
package protocol

import (
	"bufio"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// Do runs one command: its name and its arguments (the line's words).
type Do func(name string, args []string) error

// Serve prints first as the first line on stdout, then runs each line read
// from stdin with do (nil: every command is refused) and answers it, until
// stdin ends or SIGINT or SIGTERM arrives. The caller cleans up after.
func Serve(first string, do Do) {
	fmt.Println(first)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sig)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	for {
		select {
		case <-sig:
			return
		case line, ok := <-lines:
			if !ok {
				return
			}
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			err := fmt.Errorf("unknown command %q", f[0])
			if do != nil {
				err = do(f[0], f[1:])
			}
			if err != nil {
				fmt.Println("error: " + strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				fmt.Println("ok")
			}
		}
	}
}

// Fail prints err on stderr and exits with status 1: the launcher could not
// start what it serves.
func Fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
