// Package buildflags gives the go build flags this binary was built with
// that change what a build compiles: -race, -trimpath, -gcflags and
// -ldflags. A test that builds a program of the repository passes them to
// its go build, so that the program is built as the test binary was (with
// the race detector when it has it) and its packages come from the build
// cache the test's build filled, not compiled again with other flags
// (docs/testing.md, the README's test command).
package buildflags

import (
	"runtime/debug"
	"slices"
)

// Same returns the flags, for go build: "-race" when this binary has the
// race detector, "-trimpath" when it was built with it, and
// "-gcflags=<value>" and "-ldflags=<value>" when it was built with them.
// Empty when the binary carries no build information.
func Same() []string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return fromSettings(info.Settings)
}

// fromSettings is Same on a binary's build settings.
func fromSettings(settings []debug.BuildSetting) []string {
	var out []string
	if slices.Contains(settings, debug.BuildSetting{Key: "-race", Value: "true"}) {
		out = append(out, "-race")
	}
	if slices.Contains(settings, debug.BuildSetting{Key: "-trimpath", Value: "true"}) {
		out = append(out, "-trimpath")
	}
	for _, s := range settings {
		if (s.Key == "-gcflags" || s.Key == "-ldflags") && s.Value != "" {
			out = append(out, s.Key+"="+s.Value)
		}
	}
	return out
}
