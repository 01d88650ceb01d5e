package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/pacer-go/pacer/reserve"
)

// version prints this command's release, and the library's it was built
// with.
func (c *cli) version(ctx context.Context, args []string) error {
	fs := c.flagSet("version")
	pos, err := c.parse(fs, "version", args)
	if err != nil {
		return err
	}
	if err := positionals("version", pos, 0); err != nil {
		return err
	}
	v := reserve.Version
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		v = info.Main.Version // go install ...@VERSION
	} else {
		v += "+dev" // built from a checkout: the last release, and what came after
	}
	fmt.Fprintf(c.stdout, "pacer %s (library %s, %s)\n", v, reserve.Version, runtime.Version())
	return nil
}
