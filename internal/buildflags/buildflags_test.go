package buildflags

import (
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"testing"
)

func TestFromSettings(t *testing.T) {
	for _, c := range []struct {
		name     string
		settings []debug.BuildSetting
		want     []string
	}{
		{"none", nil, nil},
		{"race only", []debug.BuildSetting{{Key: "-buildmode", Value: "exe"}, {Key: "-race", Value: "true"}}, []string{"-race"}},
		{"race off", []debug.BuildSetting{{Key: "-race", Value: "false"}}, nil},
		{"all four", []debug.BuildSetting{
			{Key: "-compiler", Value: "gc"},
			{Key: "-gcflags", Value: "github.com/pacer-go/pacer/...=-dwarf=false"},
			{Key: "-ldflags", Value: "-w"},
			{Key: "-race", Value: "true"},
			{Key: "-trimpath", Value: "true"},
			{Key: "CGO_ENABLED", Value: "1"},
		}, []string{"-race", "-trimpath", "-gcflags=github.com/pacer-go/pacer/...=-dwarf=false", "-ldflags=-w"}},
		{"trimpath off", []debug.BuildSetting{{Key: "-trimpath", Value: "false"}}, nil},
		{"a value with spaces stays one argument", []debug.BuildSetting{{Key: "-ldflags", Value: "-w -s"}}, []string{"-ldflags=-w -s"}},
	} {
		if got := fromSettings(c.settings); !slices.Equal(got, c.want) {
			t.Errorf("%s: fromSettings = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestSame: this test binary's own flags, as the README's test command
// builds it (-race) or not.
func TestSame(t *testing.T) {
	got := Same()
	if slices.Contains(got, "-race") != raceEnabled {
		t.Errorf("Same() = %q, and this binary's race detector is %v", got, raceEnabled)
	}
	// Built with -trimpath, a binary's source paths are import paths.
	_, file, _, _ := runtime.Caller(0)
	if trimmed := !filepath.IsAbs(file); slices.Contains(got, "-trimpath") != trimmed {
		t.Errorf("Same() = %q, and this binary's source file is %s", got, file)
	}
}
