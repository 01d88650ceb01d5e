package readmetest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// TestEveryGoBlockIsAnExample: every Go code block a user reads (a ```go
// block in README.md or docs/, a code block of Go in the doc comment of a
// package a user imports) is
// a run of lines of a compiled Example function somewhere in the
// repository, so it compiles, and calls nothing a user does not have (the
// Example's own setup, such as a test's embedded Redis, stays outside the
// lines shown).
func TestEveryGoBlockIsAnExample(t *testing.T) {
	examples := exampleBodies(t)
	if len(examples) < 5 {
		t.Fatalf("found only %d Example functions under %s", len(examples), root)
	}
	shown := func(where, block string) {
		t.Helper()
		want := normalize(block)
		if want == "" {
			return
		}
		for _, body := range examples {
			if strings.Contains(body, want) {
				return
			}
		}
		t.Errorf("%s shows a Go block that is in no Example function:\n%s", where, block)
	}
	mds, _ := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	sub, _ := filepath.Glob(filepath.Join(root, "docs", "*", "*.md")) // docs/grafana/README.md
	mds = append(mds, sub...)
	mds = append(mds, filepath.Join(root, "README.md"))
	for _, md := range mds {
		text, err := os.ReadFile(md)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range goBlocks(string(text)) {
			shown(filepath.Base(md)+" block "+string(rune('1'+i)), block)
		}
	}
	for dir, doc := range packageDocs(t) {
		if !library(dir) {
			continue
		}
		for i, block := range docBlocks(doc) {
			shown("package doc of "+dir+" block "+string(rune('1'+i)), block)
		}
	}
}

// normalize trims each line and drops blank ones and README:begin and
// README:end marks (see ShowsPart), so that a block matches an Example's
// lines whatever their indentation.
func normalize(s string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" && line != "// README:begin" && line != "// README:end" {
			out = append(out, line)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "\n" + strings.Join(out, "\n") + "\n"
}

// goBlocks returns the ```go blocks of a Markdown text.
func goBlocks(text string) []string {
	var blocks []string
	var cur []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```go":
			in, cur = true, nil
		case in && strings.TrimSpace(line) == "```":
			in = false
			blocks = append(blocks, strings.Join(cur, "\n"))
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

// docBlocks returns the code blocks (indented runs) of a doc comment's text.
func docBlocks(doc string) []string {
	var blocks []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
		}
		cur = nil
	}
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "\t") || strings.HasPrefix(line, "    ") {
			cur = append(cur, line)
			continue
		}
		if strings.TrimSpace(line) == "" && len(cur) > 0 {
			continue
		}
		flush()
	}
	flush()
	// A list item's continuation, a table or shell lines are indented
	// too: keep only the blocks that parse as Go statements.
	var code []string
	for _, b := range blocks {
		if isGo(b) {
			code = append(code, b)
		}
	}
	return code
}

// isGo reports whether block parses as the body of a Go function.
func isGo(block string) bool {
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+block+"\n}\n", 0)
	return err == nil
}

// library reports whether dir (relative to the root) is a package a user
// of the library imports: not a command, an example, a test harness or an
// internal package.
func library(dir string) bool {
	for _, part := range strings.Split(filepath.ToSlash(dir), "/") {
		switch part {
		case "internal", "cmd", "examples", "integration", "testdata":
			return false
		}
	}
	return true
}

// walkGo calls fn for every .go file of the repository (nested modules
// included), skipping testdata and hidden directories.
func walkGo(t *testing.T, fn func(path string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".go") {
			fn(path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// exampleBodies returns the normalized bodies of every Example function.
func exampleBodies(t *testing.T) []string {
	var bodies []string
	walkGo(t, func(path string) {
		if !strings.HasSuffix(path, "_test.go") {
			return
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Example") {
				a, b := fset.Position(fn.Body.Lbrace).Offset, fset.Position(fn.Body.Rbrace).Offset
				bodies = append(bodies, normalize(string(src[a+1:b])))
			}
		}
	})
	return bodies
}

// packageDocs returns each package's doc comment, by directory.
func packageDocs(t *testing.T) map[string]string {
	docs := map[string]string{}
	walkGo(t, func(path string) {
		if strings.HasSuffix(path, "_test.go") {
			return
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			docs[rel] += f.Doc.Text()
		}
	})
	return docs
}

// TestCIRunsREADMETestCommand: .ci/run runs README's test command (the
// first line of the block under "## Tests") exactly, as a line of its own.
func TestCIRunsREADMETestCommand(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "\n## Tests\n")
	if !ok {
		t.Fatal(`README.md has no "## Tests" section`)
	}
	_, block, ok := strings.Cut(after, "```\n")
	if !ok {
		t.Fatal(`README.md's "## Tests" section has no code block`)
	}
	cmd, _, _ := strings.Cut(block, "\n")
	if !strings.HasPrefix(cmd, "go test ") {
		t.Fatalf("README's test command is %q, want a go test command", cmd)
	}
	run, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(run), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), cmd+" ") || strings.TrimSpace(line) == cmd {
			return
		}
	}
	t.Errorf(".ci/run does not run README's test command %q", cmd)
}
