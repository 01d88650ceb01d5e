// Package spanlines prints each request's wait span (package otelpacer,
// on the OpenTelemetry SDK) as one line: the crawler's -trace. Linked in
// (the crawler built with -tags otel imports it), it registers itself with
// package demo (demo.Tracing); the default build leaves the OTel SDK out,
// so that a first go run ./examples/crawler fetches and compiles only what
// the run needs.
package spanlines

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/pacer-go/pacer/examples/internal/demo"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// With -trace, every request's wait for its slot is a span (package
// otelpacer, through pacehttp.Options.Tracer), and lineExporter prints
// each as it ends, one line: the key, the binding band (what the request
// waited for), the source of the slot, the wait, and its events. A real
// program would export the spans (OTLP) under its HTTP client spans.

func init() { demo.RegisterTracing(tracing) }

// tracing returns the Telemetry whose spans go to out, one line each, and
// a function that flushes and stops it.
func tracing(out io.Writer) (reserve.Tracer, func(), error) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(&lineExporter{out: out}))
	tel, err := otelpacer.New(otelpacer.Options{MeterProvider: noop.NewMeterProvider(), TracerProvider: tp})
	if err != nil {
		return nil, nil, err
	}
	return tel, func() { _ = tp.Shutdown(context.Background()) }, nil
}

// lineExporter is an sdktrace.SpanExporter that prints one line per span,
// such as "trace h1.example: waited 48.2ms for band permits (redis);
// reserved 48.2ms, slept 48.2ms, woke 120µs late".
type lineExporter struct {
	mu  sync.Mutex
	out io.Writer
}

func (e *lineExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		fmt.Fprintln(e.out, spanLine(s))
	}
	return nil
}

func (e *lineExporter) Shutdown(context.Context) error { return nil }

// spanLine is s in one line (see lineExporter).
func spanLine(s sdktrace.ReadOnlySpan) string {
	a := attrs(s.Attributes())
	var b strings.Builder
	fmt.Fprintf(&b, "trace %s: ", a["pacer.key"].Emit())
	if s.Status().Code == codes.Error {
		fmt.Fprintf(&b, "failed (band %s): %s", a["pacer.band"].Emit(), s.Status().Description)
		return b.String()
	}
	if band := a["pacer.band"].Emit(); band == "none" {
		fmt.Fprintf(&b, "waited %v, free at once (%s);", secs(a["pacer.wait"]), a["pacer.source"].Emit())
	} else {
		fmt.Fprintf(&b, "waited %v for band %s (%s);", secs(a["pacer.wait"]), band, a["pacer.source"].Emit())
	}
	for i, ev := range s.Events() {
		ea := attrs(ev.Attributes)
		sep := ","
		if i == 0 {
			sep = ""
		}
		switch ev.Name {
		case "reserved":
			fmt.Fprintf(&b, "%s reserved %v", sep, secs(ea["pacer.wait"]))
		case "slept":
			fmt.Fprintf(&b, "%s slept %v", sep, secs(ea["pacer.sleep"]))
		case "moved":
			fmt.Fprintf(&b, "%s moved (%s) %v more for band %s", sep, ea["pacer.moved.reason"].Emit(), secs(ea["pacer.wait"]), ea["pacer.band"].Emit())
		case "woke":
			fmt.Fprintf(&b, "%s woke %v late", sep, secs(ea["pacer.late"]))
		default:
			fmt.Fprintf(&b, "%s %s", sep, ev.Name)
		}
	}
	return b.String()
}

func attrs(kvs []attribute.KeyValue) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// secs is a value in seconds as a rounded duration.
func secs(v attribute.Value) time.Duration {
	d := time.Duration(v.AsFloat64() * float64(time.Second))
	if d >= time.Millisecond {
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
