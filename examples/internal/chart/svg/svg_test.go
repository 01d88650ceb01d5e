package svg

import (
	"bytes"
	"encoding/xml"
	"errors"
	"github.com/pacer-go/pacer/examples/internal/chart"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// paced returns n calls spaced 1/rate apart from start.
func paced(start time.Time, n int, rate float64) []time.Time {
	out := make([]time.Time, n)
	for i := range out {
		out[i] = start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
	}
	return out
}

// parseSVG checks that b is a well-formed XML document whose root is an
// svg element, and returns its text content.
func parseSVG(t *testing.T, b []byte) string {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	var text strings.Builder
	root := ""
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not valid XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = tok.Name.Local
			}
		case xml.CharData:
			text.Write(tok)
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return text.String()
}

func TestCallsPer100ms(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := chart.Chart{
		Title:         "a test run",
		Start:         start,
		Rate:          20,
		ProviderLimit: 21,
		Series: chart.Hosts(map[string][]time.Time{
			"h1.example": paced(start.Add(time.Millisecond), 100, 20),
			"h0.example": paced(start, 200, 20),
		}, nil),
	}
	var buf bytes.Buffer
	if err := chart.CallsPer100ms(&buf, c); err != nil {
		t.Fatalf("CallsPer100ms: %v", err)
	}
	text := parseSVG(t, buf.Bytes())
	for _, want := range []string{"a test run", "h0.example (200 calls)", "h1.example (100 calls)", "pacer's limit: 20/s = 2 per 100 ms", "provider: 21 in any 1 s", "calls per 100 ms", "time since start (s)"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chart's text does not contain %q", want)
		}
	}
	// A 10 s run: tens of kilobytes, not megabytes.
	if n := buf.Len(); n < 1000 || n > 100_000 {
		t.Errorf("the chart is %d bytes, want 1 kB to 100 kB", n)
	}
	t.Logf("%d bytes", buf.Len())
}

// TestRejections: 429s are counted in their host's panel title and marked,
// with a legend entry; a host that only got 429s has a panel too.
func TestRejections(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	series := chart.Hosts(map[string][]time.Time{"h0.example": paced(start, 40, 20)},
		map[string][]time.Time{"h0.example": paced(start.Add(time.Second), 3, 20), "h1.example": {start}})
	if len(series) != 2 || series[1].Name != "h1.example" || len(series[1].Calls) != 0 || len(series[1].Rejected) != 1 {
		t.Fatalf("Hosts = %+v, want h0.example and h1.example (429s only)", series)
	}
	var buf bytes.Buffer
	if err := chart.CallsPer100ms(&buf, chart.Chart{Start: start, Rate: 20, ProviderLimit: 18, Series: series}); err != nil {
		t.Fatalf("CallsPer100ms: %v", err)
	}
	text := parseSVG(t, buf.Bytes())
	for _, want := range []string{"h0.example (40 calls), 3 refused with 429", "h1.example (0 calls), 1 refused with 429", "429s it answered, per 100 ms"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chart's text does not contain %q", want)
		}
	}
	buf.Reset()
	if err := chart.CallsPer100ms(&buf, chart.Chart{Start: start, Rate: 20, Series: series[:1]}); err != nil {
		t.Fatal(err)
	}
	if text := parseSVG(t, buf.Bytes()); strings.Contains(text, "provider:") {
		t.Error("a chart without ProviderLimit has a provider line in its legend")
	}
}

// TestLearned: a host with a learned rate draws it instead of the flat
// limit, and the provider's limit changes as its steps say.
func TestLearned(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	learned := []chart.Sample{{At: start, Rate: 5}, {At: start.Add(time.Second), Rate: 10}, {At: start.Add(2 * time.Second), Rate: 8}}
	c := chart.Chart{Start: start, Rate: 20, ProviderLimit: 21, ProviderSteps: []chart.Step{{At: start.Add(time.Second), Limit: 12}},
		Series: []chart.Series{{Name: "h0.example", Calls: paced(start, 20, 10), Learned: learned}}}
	var buf bytes.Buffer
	if err := chart.CallsPer100ms(&buf, c); err != nil {
		t.Fatalf("CallsPer100ms: %v", err)
	}
	text := parseSVG(t, buf.Bytes())
	for _, want := range []string{"the rate pacer learned, per second, /10", "provider: 21 in any 1 s, /10, then 12"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chart's text does not contain %q", want)
		}
	}
	if strings.Contains(text, "pacer's limit") {
		t.Error("a chart of learned rates draws a flat limit")
	}
	for name, bad := range map[string]chart.Chart{
		"a step of 0":        {Start: start, Rate: 20, ProviderLimit: 21, ProviderSteps: []chart.Step{{At: start, Limit: 0}}, Series: c.Series},
		"steps out of order": {Start: start, Rate: 20, ProviderLimit: 21, ProviderSteps: []chart.Step{{At: start.Add(time.Second), Limit: 5}, {At: start, Limit: 6}}, Series: c.Series},
		"a step, no limit":   {Start: start, Rate: 20, ProviderSteps: []chart.Step{{At: start, Limit: 6}}, Series: c.Series},
		"a NaN learned rate": {Start: start, Rate: 20, Series: []chart.Series{{Name: "h", Calls: paced(start, 2, 10), Learned: []chart.Sample{{At: start, Rate: math.NaN()}}}}},
	} {
		buf.Reset()
		if err := chart.CallsPer100ms(&buf, bad); !errors.Is(err, chart.ErrInvalidLimit) || buf.Len() != 0 {
			t.Errorf("%s: err %v, %d bytes written; want chart.ErrInvalidLimit and nothing", name, err, buf.Len())
		}
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.svg")
	now := time.Now()
	if err := chart.WriteFile(path, chart.Chart{Rate: 10, Series: []chart.Series{{Name: "api", Calls: paced(now, 30, 10)}}}); err != nil {
		t.Fatalf("WriteFile: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if text := parseSVG(t, b); !strings.Contains(text, "calls per 100 ms") {
		t.Error("the default title is missing")
	}
	// Bad input writes no file.
	bad := filepath.Join(t.TempDir(), "bad.svg")
	if err := chart.WriteFile(bad, chart.Chart{Rate: 10}); !errors.Is(err, chart.ErrNoCalls) {
		t.Errorf("WriteFile(no calls) = %v, want chart.ErrNoCalls", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("WriteFile(no calls) left a file: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	now := time.Now()
	calls := []chart.Series{{Name: "api", Calls: paced(now, 5, 10)}}
	tests := []struct {
		name string
		c    chart.Chart
		want error // nil: any error
	}{
		{"no series", chart.Chart{Rate: 10}, chart.ErrNoCalls},
		{"empty series", chart.Chart{Rate: 10, Series: []chart.Series{{Name: "api"}}}, chart.ErrNoCalls},
		{"zero rate", chart.Chart{Series: calls}, chart.ErrInvalidLimit},
		{"negative rate", chart.Chart{Rate: -1, Series: calls}, chart.ErrInvalidLimit},
		{"NaN rate", chart.Chart{Rate: math.NaN(), Series: calls}, chart.ErrInvalidLimit},
		{"infinite rate", chart.Chart{Rate: math.Inf(1), Series: calls}, chart.ErrInvalidLimit},
		{"negative provider limit", chart.Chart{Rate: 10, ProviderLimit: -1, Series: calls}, chart.ErrInvalidLimit},
		{"call before start", chart.Chart{Rate: 10, Start: now.Add(time.Second), Series: calls}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := chart.CallsPer100ms(&buf, tt.c)
			if err == nil || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Errorf("CallsPer100ms(%s) = %v, want %v", tt.name, err, tt.want)
			}
			if buf.Len() != 0 {
				t.Errorf("CallsPer100ms(%s) wrote %d bytes, want none", tt.name, buf.Len())
			}
		})
	}
}

// TestBands: panels with amounts and rates of their own (an LLM's requests
// and tokens) title each with its total and unit, need no chart.Chart.Rate, and
// refuse amounts that do not match the calls.
func TestBands(t *testing.T) {
	now := time.Now()
	calls := paced(now, 20, 10)
	tokens := make([]float64, len(calls))
	for i := range tokens {
		tokens[i] = 100
	}
	var buf bytes.Buffer
	err := chart.CallsPer100ms(&buf, chart.Chart{Start: now, Series: []chart.Series{
		{Name: "requests", Calls: calls, Rate: 10, Quota: 12},
		{Name: "tokens", Calls: calls, Amounts: tokens, Unit: "tokens", Rate: 1000, Quota: 1000},
	}})
	if err != nil {
		t.Fatal(err)
	}
	text := parseSVG(t, buf.Bytes())
	for _, want := range []string{"requests (20 calls)", "tokens (2000 tokens)", "tokens per 100 ms", "pacer's limit per second, /10", "the provider's quota per second, /10"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chart lacks %q", want)
		}
	}
	err = chart.CallsPer100ms(io.Discard, chart.Chart{Series: []chart.Series{{Name: "tokens", Calls: calls, Amounts: tokens[:3], Rate: 1000}}})
	if err == nil || !strings.Contains(err.Error(), "3 amounts for 20 calls") {
		t.Errorf("3 amounts for 20 calls: %v", err)
	}
	err = chart.CallsPer100ms(io.Discard, chart.Chart{Series: []chart.Series{{Name: "tokens", Calls: calls, Rate: math.NaN()}}})
	if !errors.Is(err, chart.ErrInvalidLimit) {
		t.Errorf("Rate NaN: %v, want chart.ErrInvalidLimit", err)
	}
}

// TestRegistered: linked in, package svg is what chart.WriteFile draws with.
func TestRegistered(t *testing.T) {
	if err := chart.Check("./examples/crawler"); err != nil {
		t.Errorf("chart.Check with package svg linked: %v", err)
	}
}
