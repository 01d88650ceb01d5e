package otelpacer_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/launcher"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/pacehttp"
	"github.com/pacer-go/pacer/reserve"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Every Wait a span, every grant counted. The SDK's in-memory recorder and
// reader stand for a program's exporters (OTLP, Prometheus), set as the
// global providers, which otelpacer.Options{} takes. The second call waits
// for the tokens band: its span says so.
func Example() {
	rdb, stop := embeddedRedis()
	defer stop()
	// README:begin
	spans := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader())))

	tel, err := otelpacer.New(otelpacer.Options{}) // the global providers
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := reserve.New(rdb, reserve.Options{Metrics: tel, Tracer: tel})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	policy := reserve.Policy{
		{Name: "requests", Limit: reserve.Limit{Rate: 2, Burst: 10}},
		{Name: "tokens", Limit: reserve.Limit{Rate: 10, Burst: 10}},
	}
	ctx := context.Background()
	for _, tokens := range []float64{10, 5} { // the second waits 0.5 s for 5 tokens
		req := reserve.Request{Key: "api.example.com", Policy: policy, Cost: reserve.Cost{"requests": 1, "tokens": tokens}}
		if err := limiter.WaitN(ctx, req); err != nil {
			log.Fatal(err)
		}
	}
	// README:end
	for _, s := range spans.Ended() {
		fmt.Printf("%s %s: band %s\n", s.Name(), value(s.Attributes(), "pacer.key"), value(s.Attributes(), "pacer.band"))
	}
	// Output:
	// pacer.wait api.example.com: band none
	// pacer.wait api.example.com: band tokens
}

// value returns the value of the attribute key in kvs.
func value(kvs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range kvs {
		if kv.Key == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// A pacehttp Transport's waits, under the HTTP client spans of otelhttp's
// Transport: pacehttp.Options.Tracer is the Limiter's Telemetry.
func Example_pacehttp() {
	rdb, stop := embeddedRedis()
	defer stop()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	defer api.Close()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	// README:begin
	tel, err := otelpacer.New(otelpacer.Options{TracerProvider: tp})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := reserve.New(rdb, reserve.Options{Metrics: tel, Tracer: tel})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()
	paced, err := pacehttp.New(limiter, pacehttp.Options{Limit: reserve.Limit{Rate: 10, Burst: 1}, Tracer: tel})
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: otelhttp.NewTransport(paced, otelhttp.WithTracerProvider(tp))}
	// README:end

	resp, err := client.Get(api.URL)
	if err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	client.CloseIdleConnections()
	names := map[trace.SpanID]string{}
	for _, s := range spans.Ended() {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range spans.Ended() {
		if s.Name() == otelpacer.SpanName {
			fmt.Printf("%s, child of %q\n", s.Name(), names[s.Parent().SpanID()])
		}
	}
	// Output:
	// pacer.wait, child of "HTTP GET"
}

// The fleet's learned rate of a key, on the pacer.adaptive.rate gauge.
func ExampleTelemetry_ObserveRate() {
	rdb, stop := embeddedRedis()
	defer stop()
	reader := sdkmetric.NewManualReader()
	tel, err := otelpacer.New(otelpacer.Options{
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		KeyAttribute:  func(key string) string { return key }, // a few keys
	})
	if err != nil {
		log.Fatal(err)
	}
	limiter, err := reserve.New(rdb, reserve.Options{Metrics: tel, Tracer: tel})
	if err != nil {
		log.Fatal(err)
	}
	defer limiter.Close()

	cfg := adaptive.Config{Start: 50, Min: 1, Max: 50}
	cfg.Observer = tel
	rate, err := adaptive.New(limiter, "api.example.com", cfg)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := rate.Limit(context.Background()); err != nil {
		log.Fatal(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == "pacer.adaptive.rate" {
				for _, p := range g.DataPoints {
					key, _ := p.Attributes.Value("pacer.key")
					fmt.Printf("%s{pacer.key=%s} %g %s\n", m.Name, key.Emit(), p.Value, m.Unit)
				}
			}
		}
	}
	// Output:
	// pacer.adaptive.rate{pacer.key=api.example.com} 50 {request}/s
}

// embeddedRedis starts an embedded Redis (miniredis, in a child process that
// internal/launcher runs) so the examples run anywhere. Use a real Redis in
// production.
func embeddedRedis() (*redis.Client, func()) {
	mr, err := launcher.Start(context.Background(), "miniredis")
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.First})
	return rdb, func() { rdb.Close(); mr.Close() }
}
