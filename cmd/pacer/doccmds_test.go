package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDocumentedCommands: every pacer command line a user reads in a code
// block of README.md or docs/ ("go run ./cmd/pacer ..." or "$ pacer ...")
// is one pacer accepts: run against a Redis address where nothing listens,
// it fails on Redis (exit 1), never on its command line (exit 2). So a
// flag renamed or an argument reordered breaks this test, not a reader.
func TestDocumentedCommands(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "redis://" + ln.Addr().String() + "/0"
	_ = ln.Close()

	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	command := regexp.MustCompile(`^\s*(?:\$ )?(?:go run \./cmd/pacer|pacer)\s+(.*)$`)
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
			m := command.FindStringSubmatch(line)
			if !inBlock || m == nil || (!strings.Contains(line, "$ pacer") && !strings.Contains(line, "./cmd/pacer")) {
				continue
			}
			args, err := shellWords(m[1])
			if err != nil {
				t.Errorf("%s:%d: %v: %s", file, i+1, err, line)
				continue
			}
			args = pointAt(args, closed)
			seen++
			code, stderr := runPacer(t, args)
			if code != exitRuntime {
				t.Errorf("%s:%d: pacer %s: exit %d, want %d (Redis unreachable): %s", file, i+1, strings.Join(args, " "), code, exitRuntime, stderr)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found only %d documented pacer commands", seen)
	}
	t.Logf("%d documented pacer commands accepted", seen)
}

// pointAt replaces the -redis flag's value with url (adding one if none),
// and the shell variable $P (docs/ops.md's prefix) with a prefix.
func pointAt(args []string, url string) []string {
	out := []string{"-redis", url}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-redis" || a == "--redis":
			i++
			continue
		case strings.HasPrefix(a, "-redis=") || strings.HasPrefix(a, "--redis="):
			continue
		}
		out = append(out, strings.ReplaceAll(a, "$P", "pacer:"))
	}
	return out
}

// shellWords splits a command line as a shell would, for the simple lines
// docs show: words, '...' and "..." quoting; it stops at an unquoted # (a
// comment) or | (a pipe: the rest is another command).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
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
		case (c == '#' || c == '|') && !inWord:
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

func runPacer(t *testing.T, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	// docs/ops.md exports a token before pacer web -write.
	cmd.Env = append(childEnv(), tokenEnv+"=doc-test-token-0123456789")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stderr.String()
	}
	t.Fatalf("pacer %s: %v", strings.Join(args, " "), err)
	return 0, ""
}
