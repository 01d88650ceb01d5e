package chart

import (
	"bytes"
	"encoding/xml"
	"errors"
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
	c := Chart{
		Title:         "a test run",
		Start:         start,
		Rate:          20,
		ProviderLimit: 21,
		Series: Hosts(map[string][]time.Time{
			"h1.example": paced(start.Add(time.Millisecond), 100, 20),
			"h0.example": paced(start, 200, 20),
		}, nil),
	}
	var buf bytes.Buffer
	if err := CallsPer100ms(&buf, c); err != nil {
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
	series := Hosts(map[string][]time.Time{"h0.example": paced(start, 40, 20)},
		map[string][]time.Time{"h0.example": paced(start.Add(time.Second), 3, 20), "h1.example": {start}})
	if len(series) != 2 || series[1].Name != "h1.example" || len(series[1].Calls) != 0 || len(series[1].Rejected) != 1 {
		t.Fatalf("Hosts = %+v, want h0.example and h1.example (429s only)", series)
	}
	var buf bytes.Buffer
	if err := CallsPer100ms(&buf, Chart{Start: start, Rate: 20, ProviderLimit: 18, Series: series}); err != nil {
		t.Fatalf("CallsPer100ms: %v", err)
	}
	text := parseSVG(t, buf.Bytes())
	for _, want := range []string{"h0.example (40 calls), 3 refused with 429", "h1.example (0 calls), 1 refused with 429", "429s it answered, per 100 ms"} {
		if !strings.Contains(text, want) {
			t.Errorf("the chart's text does not contain %q", want)
		}
	}
	buf.Reset()
	if err := CallsPer100ms(&buf, Chart{Start: start, Rate: 20, Series: series[:1]}); err != nil {
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
	learned := []Sample{{start, 5}, {start.Add(time.Second), 10}, {start.Add(2 * time.Second), 8}}
	c := Chart{Start: start, Rate: 20, ProviderLimit: 21, ProviderSteps: []Step{{start.Add(time.Second), 12}},
		Series: []Series{{Name: "h0.example", Calls: paced(start, 20, 10), Learned: learned}}}
	var buf bytes.Buffer
	if err := CallsPer100ms(&buf, c); err != nil {
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
	for name, bad := range map[string]Chart{
		"a step of 0":        {Start: start, Rate: 20, ProviderLimit: 21, ProviderSteps: []Step{{start, 0}}, Series: c.Series},
		"steps out of order": {Start: start, Rate: 20, ProviderLimit: 21, ProviderSteps: []Step{{start.Add(time.Second), 5}, {start, 6}}, Series: c.Series},
		"a step, no limit":   {Start: start, Rate: 20, ProviderSteps: []Step{{start, 6}}, Series: c.Series},
		"a NaN learned rate": {Start: start, Rate: 20, Series: []Series{{Name: "h", Calls: paced(start, 2, 10), Learned: []Sample{{start, math.NaN()}}}}},
	} {
		buf.Reset()
		if err := CallsPer100ms(&buf, bad); !errors.Is(err, ErrInvalidLimit) || buf.Len() != 0 {
			t.Errorf("%s: err %v, %d bytes written; want ErrInvalidLimit and nothing", name, err, buf.Len())
		}
	}
}

func TestWriteFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls.svg")
	now := time.Now()
	if err := WriteFile(path, Chart{Rate: 10, Series: []Series{{Name: "api", Calls: paced(now, 30, 10)}}}); err != nil {
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
	if err := WriteFile(bad, Chart{Rate: 10}); !errors.Is(err, ErrNoCalls) {
		t.Errorf("WriteFile(no calls) = %v, want ErrNoCalls", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("WriteFile(no calls) left a file: %v", err)
	}
}

func TestBadInput(t *testing.T) {
	now := time.Now()
	calls := []Series{{Name: "api", Calls: paced(now, 5, 10)}}
	tests := []struct {
		name string
		c    Chart
		want error // nil: any error
	}{
		{"no series", Chart{Rate: 10}, ErrNoCalls},
		{"empty series", Chart{Rate: 10, Series: []Series{{Name: "api"}}}, ErrNoCalls},
		{"zero rate", Chart{Series: calls}, ErrInvalidLimit},
		{"negative rate", Chart{Rate: -1, Series: calls}, ErrInvalidLimit},
		{"NaN rate", Chart{Rate: math.NaN(), Series: calls}, ErrInvalidLimit},
		{"infinite rate", Chart{Rate: math.Inf(1), Series: calls}, ErrInvalidLimit},
		{"negative provider limit", Chart{Rate: 10, ProviderLimit: -1, Series: calls}, ErrInvalidLimit},
		{"call before start", Chart{Rate: 10, Start: now.Add(time.Second), Series: calls}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			err := CallsPer100ms(&buf, tt.c)
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
// and tokens) title each with its total and unit, need no Chart.Rate, and
// refuse amounts that do not match the calls.
func TestBands(t *testing.T) {
	now := time.Now()
	calls := paced(now, 20, 10)
	tokens := make([]float64, len(calls))
	for i := range tokens {
		tokens[i] = 100
	}
	var buf bytes.Buffer
	err := CallsPer100ms(&buf, Chart{Start: now, Series: []Series{
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
	err = CallsPer100ms(io.Discard, Chart{Series: []Series{{Name: "tokens", Calls: calls, Amounts: tokens[:3], Rate: 1000}}})
	if err == nil || !strings.Contains(err.Error(), "3 amounts for 20 calls") {
		t.Errorf("3 amounts for 20 calls: %v", err)
	}
	err = CallsPer100ms(io.Discard, Chart{Series: []Series{{Name: "tokens", Calls: calls, Rate: math.NaN()}}})
	if !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("Rate NaN: %v, want ErrInvalidLimit", err)
	}
}
