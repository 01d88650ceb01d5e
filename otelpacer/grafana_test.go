package otelpacer_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaList: docs/grafana/otel-metrics.txt, which pacer-otel.json is
// checked against (prommetrics/dashboard_test.go), lists exactly the
// instruments otelpacer creates, each with its kind and unit. (The
// attributes each carries are pinned by this package's metric tests.)
func TestGrafanaList(t *testing.T) {
	src, err := os.ReadFile("otelpacer.go")
	if err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile("../docs/grafana/otel-metrics.txt")
	if os.IsNotExist(err) {
		t.Skip("not in the repository (no ../docs)")
	}
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]string{"Counter": "counter", "UpDownCounter": "updowncounter", "Histogram": "histogram", "Gauge": "gauge"}
	made := map[string]string{} // name -> "kind unit"
	re := regexp.MustCompile(`(?:Int64|Float64)(Counter|UpDownCounter|Histogram|Gauge)\("([^"]+)"(?:,\s*metric\.WithUnit\("([^"]*)"\))?`)
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		unit := m[3]
		if unit == "" || strings.HasPrefix(unit, "{") && strings.HasSuffix(unit, "}") {
			unit = "-" // no unit, or one in braces: the exported name is the same
		}
		made[m[2]] = kinds[m[1]] + " " + unit
	}
	if len(made) < 17 {
		t.Fatalf("found %d instruments in otelpacer.go, want the 17 of the package doc", len(made))
	}
	listed := map[string]string{}
	for _, line := range strings.Split(string(list), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) != 4 {
			t.Fatalf("otel-metrics.txt: %q: want name, kind, unit, attributes", line)
		}
		unit := f[2]
		if strings.HasPrefix(unit, "{") && strings.HasSuffix(unit, "}") {
			unit = "-"
		}
		listed[f[0]] = f[1] + " " + unit
	}
	for name, ku := range made {
		if listed[name] != ku {
			t.Errorf("otelpacer creates %s (%s); otel-metrics.txt lists %q", name, ku, listed[name])
		}
	}
	for name := range listed {
		if _, ok := made[name]; !ok {
			t.Errorf("otel-metrics.txt lists %s, which otelpacer does not create", name)
		}
	}
}
