package names_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pacer-go/pacer/internal/names"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// constants returns names.go's constants by identifier.
func constants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, id := range vs.Names {
			if i < len(vs.Values) {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					out[id.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
		return true
	})
	return out
}

// opArg is, for each function that takes a call's operation, the index of
// that argument (package reserve's own functions; hook.Run everywhere).
var opArg = map[string]int{
	"run": 1, "call": 1, "callDetached": 1, "reserve": 1, "reserveOnce": 1, "reserveFair": 1,
	"adjust": 1, "runLocal": 1, "RedisCall": 0, "localError": 0, "replyError": 0, "mapError": 0,
}

// TestOpsFromOneDefinition: every operation a call to Redis is made, and
// reported to Metrics, with comes from this package's constants, never a
// literal written at the call (reserve, adaptive, pacehttp); every
// constant in Ops is used, and every one used is in Ops. So the list
// docs/otel.md, reserve.Metrics and prommetrics give (checked below) is
// the set the code emits.
func TestOpsFromOneDefinition(t *testing.T) {
	consts := constants(t)
	used := map[string]bool{}
	for _, dir := range []string{"reserve", "adaptive", "pacehttp"} {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v %v", dir, files, err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.SelectorExpr:
					if x, ok := n.X.(*ast.Ident); ok && x.Name == "names" && strings.HasPrefix(n.Sel.Name, "Op") {
						used[n.Sel.Name] = true
					}
				case *ast.KeyValueExpr:
					if k, ok := n.Key.(*ast.Ident); ok && k.Name == "op" {
						if lit, ok := n.Value.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							t.Errorf("%s: op: %s, a literal: use a names.Op constant", fset.Position(n.Pos()), lit.Value)
						}
					}
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if !ok {
						return true
					}
					i, ok := opArg[sel.Sel.Name]
					if dir != "reserve" {
						x, isIdent := sel.X.(*ast.Ident)
						i, ok = 2, isIdent && x.Name == "hook" && sel.Sel.Name == "Run"
					}
					if !ok || i >= len(n.Args) {
						return true
					}
					if lit, ok := n.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						t.Errorf("%s: %s(... %s ...): the operation is a literal: use a names.Op constant", fset.Position(n.Pos()), sel.Sel.Name, lit.Value)
					}
				}
				return true
			})
		}
	}
	var usedOps []string
	for id := range used {
		v, ok := consts[id]
		if !ok {
			t.Errorf("names.%s is used but not a string constant of names.go", id)
			continue
		}
		usedOps = append(usedOps, v)
		if !slices.Contains(names.Ops, v) {
			t.Errorf("names.%s (%q) is used but not in names.Ops", id, v)
		}
	}
	for _, op := range names.Ops {
		if !slices.Contains(usedOps, op) {
			t.Errorf("names.Ops lists %q, which no call uses", op)
		}
	}
}

// backticked returns the `...` words of docs/otel.md's row of the
// attribute attr in its table of values that match word.
func backticked(t *testing.T, doc, attr string, word *regexp.Regexp) []string {
	t.Helper()
	for _, line := range strings.Split(doc, "\n") {
		if rest, ok := strings.CutPrefix(line, "| `"+attr+"` |"); ok {
			var out []string
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(rest, -1) {
				if word.MatchString(m[1]) && !slices.Contains(out, m[1]) {
					out = append(out, m[1])
				}
			}
			return out
		}
	}
	t.Fatalf("docs/otel.md has no row for %s", attr)
	return nil
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestDocsSayTheNames: the docs list the values the code emits, as this
// package defines them: docs/otel.md's table of attribute values,
// reserve.Metrics.RedisCall's doc, prommetrics' doc and the dashboards.
func TestDocsSayTheNames(t *testing.T) {
	otel := read(t, "docs/otel.md")
	plain := regexp.MustCompile(`^[a-z_]+$`)
	check := func(what string, got, want []string) {
		t.Helper()
		if !slices.Equal(sorted(got), sorted(want)) {
			t.Errorf("%s: %q, want %q", what, got, want)
		}
	}
	ops := backticked(t, otel, "pacer.redis.operation", plain)
	ops = slices.DeleteFunc(ops, func(s string) bool { return s == "op" }) // prommetrics' label's name
	check("docs/otel.md, pacer.redis.operation", ops, names.Ops)
	check("docs/otel.md, pacer.source", backticked(t, otel, "pacer.source", plain), names.Sources)
	check("docs/otel.md, pacer.fallback.to", backticked(t, otel, "pacer.fallback.to", plain), names.Modes)
	check("docs/otel.md, pacer.moved.reason", backticked(t, otel, "pacer.moved.reason", plain), names.Moved)
	check("docs/otel.md, pacer.seats.got", backticked(t, otel, "pacer.seats.got", plain), names.SeatsGot)
	bands := backticked(t, otel, "pacer.band", regexp.MustCompile(`^\(?[a-z]+\)?$`))
	bands = slices.DeleteFunc(bands, func(s string) bool { return s == "band" || s == "refused" }) // a label's and an instrument's names
	check("docs/otel.md, pacer.band", bands, []string{names.BandPause, names.BandNone, names.BandTurn, names.BandOutage, names.BandUnknown})

	// reserve.Metrics.RedisCall's doc: the quoted operations.
	metrics := read(t, "reserve/metrics.go")
	i := strings.Index(metrics, "// RedisCall is called")
	j := strings.Index(metrics[i:], "RedisCall(op string")
	var docOps []string
	for _, m := range regexp.MustCompile(`"([a-z]+)"`).FindAllStringSubmatch(metrics[i:i+j], -1) {
		docOps = append(docOps, m[1])
	}
	check("reserve.Metrics.RedisCall's doc", docOps, names.Ops)

	// prommetrics names the pause's band as everything else does.
	prom := read(t, "prommetrics/doc.go")
	if !strings.Contains(prom, `"`+names.BandPause+`" when a pause`) {
		t.Errorf("prommetrics/doc.go does not name the pause's band %q", names.BandPause)
	}
	// The dashboards and their README: no band "pause", no label mode
	// (the source of a grant is source), no leased_total.
	for _, path := range []string{"docs/grafana/pacer-prometheus.json", "docs/grafana/pacer-otel.json", "docs/grafana/README.md", "prommetrics/doc.go", "docs/otel.md", "docs/ops.md"} {
		text := read(t, path)
		for _, stale := range []string{`band=\"pause\"`, `band="pause"`, `mode=\"`, `mode="`, "by (mode)", "{{mode}}", "leased_total", "`pause` (a pause set", " pause (a pause did)", "? pause means"} {
			if strings.Contains(text, stale) {
				t.Errorf("%s says %q: an old name", path, stale)
			}
		}
	}
}
