package reserve_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/pacer-go/pacer/reserve"
)

// TestVersion: reserve.Version is the newest release CHANGELOG.md names,
// and the published modules that build on the root one (cmd/pacer,
// prommetrics) require that release (docs/releasing.md).
func TestVersion(t *testing.T) {
	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## (v\d+\.\d+\.\d+)\b`).FindSubmatch(changelog)
	if m == nil {
		t.Fatal("CHANGELOG.md names no release (## vX.Y.Z)")
	}
	if got := string(m[1]); got != reserve.Version {
		t.Errorf("reserve.Version = %s, CHANGELOG.md's newest release %s", reserve.Version, got)
	}
	for _, mod := range []string{"../cmd/pacer/go.mod", "../prommetrics/go.mod", "../otelpacer/go.mod"} {
		b, err := os.ReadFile(mod)
		if err != nil {
			t.Fatal(err)
		}
		want := regexp.MustCompile(`(?m)^\s*github\.com/pacer-go/pacer ` + regexp.QuoteMeta(reserve.Version) + `$`)
		if !want.Match(b) {
			t.Errorf("%s does not require github.com/pacer-go/pacer %s", mod, reserve.Version)
		}
		if regexp.MustCompile(`(?m)^replace github\.com/pacer-go/pacer\b`).Match(b) {
			t.Errorf("%s replaces github.com/pacer-go/pacer: go install ...@version refuses it (go.work gives the code here)", mod)
		}
	}
}
