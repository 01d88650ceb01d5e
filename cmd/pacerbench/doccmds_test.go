package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedCommands: every pacerbench command a reader finds in
// README.md, BENCHMARKS.md or docs/ (a "go run ./cmd/pacerbench ..." line
// of a code block, or one in `backticks` on one line, after any
// environment assignments) is one parseFlags accepts, and each
// PACERBENCH_ variable it sets is one pacerbench reads, with a value it
// takes: so a flag or variable renamed or a phase dropped breaks this
// test, not a reader's rerun. It runs nothing.
func TestDocumentedCommands(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../BENCHMARKS.md")
	block := regexp.MustCompile(`^\s*(?:\$ )?((?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*)go run \./cmd/pacerbench(\s.*)?$`)
	inline := regexp.MustCompile("`((?:[A-Za-z_][A-Za-z0-9_]*=\\S*\\s+)*)go run \\./cmd/pacerbench((?:\\s[^`]*)?)`")
	seen := 0
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		inBlock := false
		for i, line := range strings.Split(string(text), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inBlock = !inBlock
				continue
			}
			var cmds [][]string // environment, arguments
			if m := block.FindStringSubmatch(line); inBlock && m != nil {
				cmds = append(cmds, m[1:])
			}
			for _, m := range inline.FindAllStringSubmatch(line, -1) {
				cmds = append(cmds, m[1:])
			}
			for _, cmd := range cmds {
				seen++
				args, err := shellWords(cmd[1])
				if err == nil {
					_, err = parseFlags(args)
				}
				if err == nil {
					err = documentedEnv(t, strings.Fields(cmd[0]))
				}
				if err != nil {
					t.Errorf("%s:%d: %sgo run ./cmd/pacerbench%s: %v", file, i+1, cmd[0], cmd[1], err)
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d documented pacerbench commands", seen)
	}
	t.Logf("%d documented pacerbench commands parse", seen)
}

// documentedEnv checks the assignments (NAME=value) before a documented
// command: a PACERBENCH_ variable must be one a reader may set, with a
// value pacerbench takes; the others (GOMAXPROCS, ...) are the reader's.
func documentedEnv(t *testing.T, assigns []string) error {
	check := map[string]func() error{
		waitRatesEnv: func() error { _, err := phaseRates(); return err },
		waitQuickEnv: func() error { _, err := quickTuning(); return err },
		waitTurnsEnv: func() error { _, err := waitTurns(); return err },
	}
	// Read as "set or not", or a file to write: any value.
	for _, name := range []string{leaseTraceEnv, leaseProfileEnv, coldProfileEnv, otelProfileEnv, clusterProfileEnv, clusterKeepEnv, hogEnv} {
		check[name] = func() error { return nil }
	}
	for _, a := range assigns {
		name, value, _ := strings.Cut(a, "=")
		if !strings.HasPrefix(name, "PACERBENCH_") {
			continue
		}
		f, ok := check[name]
		if !ok {
			return fmt.Errorf("%s: not a variable pacerbench reads", name)
		}
		t.Setenv(name, value)
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

// shellWords splits a command line as a shell would, for the simple lines
// docs show: words and '...' or "..." quoting; it stops at an unquoted #
// (a comment).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, errors.New("unterminated quote")
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return words, nil
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
