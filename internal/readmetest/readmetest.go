// Package readmetest keeps README.md's code blocks true: each must be the
// body of a compiled Example function.
package readmetest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// ShowsExamples fails t unless the file readme holds, as a ```go block, the
// body of func Example in each of the given Go files.
func ShowsExamples(t testing.TB, readme string, files ...string) {
	t.Helper()
	for _, file := range files {
		Shows(t, readme, file, "Example")
	}
}

// Shows fails t unless the file readme holds, as a ```go block, the body of
// the example function name in file.
func Shows(t testing.TB, readme, file, name string) {
	t.Helper()
	shows(t, readme, file, name, unmarked(FuncBody(t, file, name)))
}

// unmarked returns body without its README:begin and README:end lines.
func unmarked(body string) string {
	var keep []string
	for _, line := range strings.Split(body, "\n") {
		if t := strings.TrimSpace(line); t != "// README:begin" && t != "// README:end" {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// ShowsPart is Shows for the part of the body between the lines
// "// README:begin" and "// README:end" (the setup the README shows
// elsewhere, such as a test's embedded Redis, stays out).
func ShowsPart(t testing.TB, readme, file, name string) {
	t.Helper()
	shows(t, readme, file, name, Shown(FuncBody(t, file, name)))
}

func shows(t testing.TB, readme, file, name, body string) {
	t.Helper()
	text, err := os.ReadFile(readme)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(text), "```go\n"+body+"\n```") {
		t.Errorf("%s does not show the body of %s in %s:\n%s", readme, name, file, body)
	}
}

// Shown returns the part of body between the lines "// README:begin" and
// "// README:end" (to the end without the latter), or all of body without
// the former.
func Shown(body string) string {
	const begin, end = "// README:begin\n", "// README:end"
	i := strings.Index(body, begin)
	if i < 0 {
		return body
	}
	part := body[i+len(begin):]
	if j := strings.Index(part, end); j >= 0 {
		part = part[:j]
	}
	return strings.TrimRight(part, "\t\n")
}

// FuncBody returns the source between the braces of func name in file.
func FuncBody(t testing.TB, file, name string) string {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == name {
			lbrace := fset.Position(fn.Body.Lbrace).Offset
			rbrace := fset.Position(fn.Body.Rbrace).Offset
			return strings.Trim(string(src[lbrace+1:rbrace]), "\n")
		}
	}
	t.Fatalf("no func %s in %s", name, file)
	return ""
}
