package reserve_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart keeps README.md's quick start the body of Example,
// which compiles.
func TestReadmeQuickStart(t *testing.T) {
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var body string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "Example" {
			lbrace := fset.Position(fn.Body.Lbrace).Offset
			rbrace := fset.Position(fn.Body.Rbrace).Offset
			body = strings.Trim(string(src[lbrace+1:rbrace]), "\n")
		}
	}
	if body == "" {
		t.Fatal("no func Example in example_test.go")
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), "```go\n"+body+"\n```") {
		t.Errorf("README.md's quick start is not the body of Example in reserve/example_test.go:\n%s", body)
	}
}
