package main

import (
	"bytes"
	"flag"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// help returns pacer help's output for the command (all of them: "").
func help(t *testing.T, command string) string {
	t.Helper()
	args := []string{"help"}
	if command != "" {
		args = append(args, command)
	}
	var out, errOut bytes.Buffer
	if code := run(args, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("pacer %s = %d\n%s%s", strings.Join(args, " "), code, out.String(), errOut.String())
	}
	return out.String()
}

// TestUsageNamesEveryFlag: each command's usage line, the first thing an
// operator reads (pacer help, pacer help COMMAND), names every flag of its
// own that the flags below it list. A flag it leaves out is one the
// operator does not know of: set's line had no --per or --tz after
// calendar windows came.
func TestUsageNamesEveryFlag(t *testing.T) {
	global := map[string]bool{}
	(&cli{}).flagSet("").VisitAll(func(f *flag.Flag) { global[f.Name] = true })
	listed := regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`)
	all := help(t, "")
	for _, cmd := range commands {
		if cmd.name == "help" {
			continue // pacer help help is pacer help
		}
		out := help(t, cmd.name)
		usage, _, _ := strings.Cut(out, "\n")
		if !strings.HasPrefix(usage, "Usage: pacer "+cmd.name) {
			t.Fatalf("pacer help %s: first line %q, want its usage", cmd.name, usage)
		}
		if line := "  pacer " + cmd.name + " " + cmd.args; !strings.Contains(all, line) {
			t.Errorf("pacer help does not show %s's usage %q", cmd.name, line)
		}
		for _, m := range listed.FindAllStringSubmatch(out, -1) {
			if global[m[1]] {
				continue
			}
			if !regexp.MustCompile(`--` + regexp.QuoteMeta(m[1]) + `\b`).MatchString(usage) {
				t.Errorf("pacer %s: its flag -%s is not in its usage line %q", cmd.name, m[1], usage)
			}
		}
	}
}

// TestFormatUsageNamesEveryFormat: pacer format's usage line names exactly
// the formats the command takes, in order (it said 1|2 after format 3
// came). A format is taken when its command line is not refused as one
// (exit 2); the Redis given is unreachable, so nothing is changed anywhere.
func TestFormatUsageNamesEveryFormat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String() // nobody listens there once closed
	_ = ln.Close()
	var taken []string
	for _, v := range []string{"0", "1", "2", "3", "4", "5", "9", "10", "-1", "2.0", "three"} {
		var out, errOut bytes.Buffer
		code := run([]string{"-redis", closed, "format", v, "--reason", "a test"}, strings.NewReader(""), &out, &errOut)
		switch code {
		case exitUsage:
		case exitRuntime:
			taken = append(taken, v)
			if !strings.Contains(errOut.String(), "cannot reach Redis") {
				t.Errorf("pacer format %s: %q, want Redis unreachable", v, errOut.String())
			}
		default:
			t.Fatalf("pacer format %s against %s = %d\n%s%s", v, closed, code, out.String(), errOut.String())
		}
	}
	usage, _, _ := strings.Cut(help(t, "format"), "\n")
	m := regexp.MustCompile(`^Usage: pacer format \[([0-9|]+) `).FindStringSubmatch(usage)
	if m == nil {
		t.Fatalf("pacer format's usage %q names no formats", usage)
	}
	if named := strings.Split(m[1], "|"); !slices.Equal(named, taken) {
		t.Errorf("pacer format's usage names formats %v; the command takes %v", named, taken)
	}
}

// TestOpsListsEveryCommand: docs/ops.md's table of commands has a row for
// every command (it had none for format and version).
func TestOpsListsEveryCommand(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "ops.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range commands {
		if !regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(cmd.name) + "[ `]").Match(doc) {
			t.Errorf("docs/ops.md's table of commands has no row for %s", cmd.name)
		}
	}
}
