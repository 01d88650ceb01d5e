package otelpacer_test

import (
	"os"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/readmetest"
)

// TestDocs: docs/otel.md shows the examples' code, and the package doc's
// code block is lines of Example, as they are there.
func TestDocs(t *testing.T) {
	readmetest.ShowsPart(t, "../docs/otel.md", "example_test.go", "Example")
	readmetest.ShowsPart(t, "../docs/otel.md", "example_test.go", "Example_pacehttp")

	body := readmetest.FuncBody(t, "example_test.go", "Example")
	lines := strings.Split(body, "\n")
	var block []string
	for _, l := range lines {
		if strings.Contains(l, "otelpacer.New(") || len(block) > 0 {
			block = append(block, "//\t"+strings.TrimPrefix(l, "\t"))
		}
		if strings.Contains(l, "reserve.New(") {
			break
		}
	}
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(block, "\n"); len(block) < 2 || !strings.Contains(string(doc), want) {
		t.Errorf("doc.go does not show these lines of Example:\n%s", want)
	}
}
