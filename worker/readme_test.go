package worker_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadmeAsynq keeps the README's asynq section (README-asynq.md until it
// is merged into README.md) showing the bodies of the Example functions of
// worker and scheduler, which compile.
func TestReadmeAsynq(t *testing.T) {
	readme, err := os.ReadFile("../README-asynq.md")
	if os.IsNotExist(err) {
		readme, err = os.ReadFile("../README.md")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"example_test.go", "../scheduler/example_test.go"} {
		body := exampleBody(t, file)
		if !strings.Contains(string(readme), "```go\n"+body+"\n```") {
			t.Errorf("the README's asynq section does not show the body of Example in %s:\n%s", file, body)
		}
	}
}

func exampleBody(t *testing.T, file string) string {
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
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			lbrace := fset.Position(fn.Body.Lbrace).Offset
			rbrace := fset.Position(fn.Body.Rbrace).Offset
			return strings.Trim(string(src[lbrace+1:rbrace]), "\n")
		}
	}
	t.Fatalf("no func Example in %s", file)
	return ""
}
