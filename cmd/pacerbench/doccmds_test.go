package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocumentedCommands: every pacerbench command a reader finds in
// README.md, BENCHMARKS.md or docs/ (a "go run ./cmd/pacerbench ..." line
// of a code block, or one in `backticks` on one line) is one parseFlags
// accepts: so a flag renamed or a phase dropped breaks this test, not a
// reader's rerun. It runs nothing.
func TestDocumentedCommands(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md", "../../BENCHMARKS.md")
	block := regexp.MustCompile(`^\s*(?:\$ )?go run \./cmd/pacerbench(\s.*)?$`)
	inline := regexp.MustCompile("`go run \\./cmd/pacerbench((?:\\s[^`]*)?)`")
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
			var cmds []string
			if m := block.FindStringSubmatch(line); inBlock && m != nil {
				cmds = append(cmds, m[1])
			}
			for _, m := range inline.FindAllStringSubmatch(line, -1) {
				cmds = append(cmds, m[1])
			}
			for _, cmd := range cmds {
				seen++
				args, err := shellWords(cmd)
				if err == nil {
					_, err = parseFlags(args)
				}
				if err != nil {
					t.Errorf("%s:%d: go run ./cmd/pacerbench%s: %v", file, i+1, cmd, err)
				}
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d documented pacerbench commands", seen)
	}
	t.Logf("%d documented pacerbench commands parse", seen)
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
