module github.com/pacer-go/pacer/cmd/pacerbench

go 1.26.0

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/pacer-go/pacer v0.1.0
	github.com/pacer-go/pacer/otelpacer v0.0.0-00010101000000-000000000000
	github.com/redis/go-redis/v9 v9.23.0
	go.opentelemetry.io/otel/sdk v1.47.0
	go.opentelemetry.io/otel/sdk/metric v1.47.0
	golang.org/x/time v0.16.0
)

require (
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/yuin/gopher-lua v1.1.2 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)

replace github.com/pacer-go/pacer => ../..

replace github.com/pacer-go/pacer/otelpacer => ../../otelpacer
