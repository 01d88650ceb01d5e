package otelpacer

import (
	"context"
	"errors"
	"fmt"

	"github.com/pacer-go/pacer/adaptive"
	"github.com/pacer-go/pacer/internal/keyvalues"
	"github.com/pacer-go/pacer/reserve"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the instrumentation scope of the meter and the tracer.
const ScopeName = "github.com/pacer-go/pacer/otelpacer"

// Options configure a Telemetry. The zero value is ready to use.
type Options struct {
	// MeterProvider makes the instruments. Default (nil): the global one,
	// otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// TracerProvider makes the pacer.wait spans. Default (nil): the global
	// one, otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// KeyAttribute, if set, maps a key to the value of a pacer.key
	// attribute on the metrics that concern one key (requests,
	// time_in_queue, queued_requests, units, refused, moved, pauses,
	// adaptive.rate, seats.*). Keep the number of distinct values small (a host, a
	// provider, "other"). Default nil: no pacer.key on metrics. Spans always
	// carry the key.
	KeyAttribute func(key string) string
	// MaxKeyValues bounds how many distinct pacer.key values get series of
	// their own: the first MaxKeyValues values the Telemetry sees keep
	// theirs for its lifetime, and every later one is recorded as
	// OtherKeyValue. Each value is a series in each instrument that has
	// pacer.key (and its buckets, in a histogram), so a KeyAttribute that
	// maps each of a crawler's hosts to itself would make millions.
	// Default 0: DefaultMaxKeyValues; -1: no bound (the SDK's own
	// cardinality limit, 2,000 series an instrument by default, still
	// applies). Below -1: New fails.
	MaxKeyValues int
	// TenantAttribute, if set, maps a fair request's tenant to the value of
	// a pacer.tenant attribute on the fair metrics: name the few tenants to
	// watch and map the rest to one value. Default nil: per lane only.
	TenantAttribute func(tenant string) string
	// MaxTenantValues bounds how many distinct pacer.tenant values get
	// series of their own, as MaxKeyValues does pacer.key's: later values
	// are recorded as OtherKeyValue. Default 0: DefaultMaxKeyValues; -1:
	// no bound. Below -1: New fails.
	MaxTenantValues int
}

// Telemetry implements reserve.Metrics (with reserve.GrantMetrics and
// reserve.FairMetrics), reserve.Tracer and adaptive.Observer on
// OpenTelemetry. Pass it as both
// reserve.Options.Metrics and reserve.Options.Tracer; one Telemetry may
// serve several Limiters. It is safe for concurrent use.
type Telemetry struct {
	keyAttr    func(string) string
	tenantAttr func(string) string
	tracer     trace.Tracer

	requests     metric.Int64Counter
	timeInQueue  metric.Float64Histogram
	queued       metric.Int64UpDownCounter
	units        metric.Float64Counter
	refused      metric.Int64Counter
	moved        metric.Int64Counter
	pauses       metric.Int64Counter
	fallback     metric.Int64UpDownCounter
	switches     metric.Int64Counter
	callDuration metric.Float64Histogram
	turn         metric.Float64Histogram
	deferred     metric.Int64Counter
	evictable    metric.Int64Gauge
	adaptiveRate metric.Float64Gauge
	seatsHeld    metric.Int64UpDownCounter
	seatWaiters  metric.Int64UpDownCounter
	seatWait     metric.Float64Histogram

	// sets caches the attribute sets of the hot paths (sets.go).
	sets setCache
	// values are the pacer.key values with series of their own
	// (Options.MaxKeyValues), tenants the pacer.tenant values
	// (Options.MaxTenantValues).
	values, tenants *keyvalues.Set
}

var (
	_ reserve.Metrics      = (*Telemetry)(nil)
	_ reserve.GrantMetrics = (*Telemetry)(nil)
	_ reserve.FairMetrics  = (*Telemetry)(nil)
	_ reserve.SeatMetrics  = (*Telemetry)(nil)
	_ reserve.Tracer       = (*Telemetry)(nil)
	_ adaptive.Observer    = (*Telemetry)(nil)
)

// DefaultMaxKeyValues is Options.MaxKeyValues's default: the most distinct
// pacer.key values with series of their own.
const DefaultMaxKeyValues = keyvalues.Default

// OtherKeyValue is the pacer.key of a key whose KeyAttribute value came
// after Options.MaxKeyValues others.
const OtherKeyValue = keyvalues.Other

// ErrInvalidOptions is New's error for Options out of range.
var ErrInvalidOptions = errors.New("otelpacer: invalid options")

// WaitBuckets are the bucket boundaries, in seconds, of the histograms of
// waits (time_in_queue, fair.turn): from 1 ms to 30 minutes, for waits
// from a free slot to a long queue behind a provider's pause, as
// prommetrics.WaitBuckets.
var WaitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// CallBuckets are the bucket boundaries, in seconds, of
// pacer.redis.call.duration: from 100 µs to 0.8 s, doubling (a call is
// bounded by reserve.Options.CallTimeout, 250 ms by default).
var CallBuckets = []float64{0.0001, 0.0002, 0.0004, 0.0008, 0.0016, 0.0032, 0.0064, 0.0128, 0.0256, 0.0512, 0.1024, 0.2048, 0.4096, 0.8192}

// The attributes.
const (
	attrSource      = attribute.Key("pacer.source")
	attrBand        = attribute.Key("pacer.band")
	attrKey         = attribute.Key("pacer.key")
	attrUnit        = attribute.Key("pacer.unit")
	attrReason      = attribute.Key("pacer.rate_limiting.reason")
	attrMovedReason = attribute.Key("pacer.moved.reason")
	attrFallbackTo  = attribute.Key("pacer.fallback.to")
	attrOperation   = attribute.Key("pacer.redis.operation")
	attrErrorType   = attribute.Key("error.type")
	attrLane        = attribute.Key("pacer.lane")
	attrTenant      = attribute.Key("pacer.tenant")
	attrSeatsGot    = attribute.Key("pacer.seats.got")
)

// bound returns a values bound option's value (0: the default), or
// ErrInvalidOptions below -1.
func bound(option string, max int) (int, error) {
	switch {
	case max < -1:
		return 0, fmt.Errorf("%w: %s %d (want -1 for no bound, 0 for the default, or more)", ErrInvalidOptions, option, max)
	case max == 0:
		return DefaultMaxKeyValues, nil
	}
	return max, nil
}

// New makes the instruments on opts.MeterProvider and the tracer on
// opts.TracerProvider. It fails if opts.MaxKeyValues or
// opts.MaxTenantValues is below -1 (ErrInvalidOptions) or the
// MeterProvider refuses an instrument.
func New(opts Options) (*Telemetry, error) {
	maxValues, err := bound("MaxKeyValues", opts.MaxKeyValues)
	if err != nil {
		return nil, err
	}
	maxTenants, err := bound("MaxTenantValues", opts.MaxTenantValues)
	if err != nil {
		return nil, err
	}
	mp, tp := opts.MeterProvider, opts.TracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	version := trace.WithInstrumentationVersion(reserve.Version)
	t := &Telemetry{keyAttr: opts.KeyAttribute, tenantAttr: opts.TenantAttribute, tracer: tp.Tracer(ScopeName, version)}
	t.sets.init(MaxCachedSets)
	t.values, t.tenants = keyvalues.New(maxValues), keyvalues.New(maxTenants)
	m := mp.Meter(ScopeName, metric.WithInstrumentationVersion(reserve.Version))
	var errs []error
	check := func(err error) { errs = append(errs, err) }
	t.requests, err = m.Int64Counter("pacer.rate_limiting.requests", metric.WithUnit("{request}"),
		metric.WithDescription("Reservations granted, by source (redis, local, lease) and binding band."))
	check(err)
	t.timeInQueue, err = m.Float64Histogram("pacer.rate_limiting.request.time_in_queue", metric.WithUnit("s"),
		metric.WithDescription("Wait granted to reservations, by source and binding band."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	check(err)
	t.queued, err = m.Int64UpDownCounter("pacer.rate_limiting.queued_requests", metric.WithUnit("{request}"),
		metric.WithDescription("Waits sleeping until their slot now."))
	check(err)
	t.units, err = m.Float64Counter("pacer.rate_limiting.units", metric.WithUnit("{unit}"),
		metric.WithDescription("Cost reserved, by unit and source."))
	check(err)
	t.refused, err = m.Int64Counter("pacer.rate_limiting.refused", metric.WithUnit("{request}"),
		metric.WithDescription("Waits refused because their slot came after the deadline or the maximum wait, by binding band and reason."))
	check(err)
	t.moved, err = m.Int64Counter("pacer.rate_limiting.moved", metric.WithUnit("{request}"),
		metric.WithDescription("Sleepers that took a fresh slot: a pause covered theirs, or they woke too late."))
	check(err)
	t.pauses, err = m.Int64Counter("pacer.rate_limiting.pauses", metric.WithUnit("{pause}"),
		metric.WithDescription("Keys paused (a provider's 429)."))
	check(err)
	t.fallback, err = m.Int64UpDownCounter("pacer.rate_limiting.fallback.active", metric.WithUnit("{limiter}"),
		metric.WithDescription("Limiters pacing locally because Redis is unavailable."))
	check(err)
	t.switches, err = m.Int64Counter("pacer.rate_limiting.fallback.switches", metric.WithUnit("{switch}"),
		metric.WithDescription("Switches between Redis and local pacing, by destination."))
	check(err)
	t.callDuration, err = m.Float64Histogram("pacer.redis.call.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of calls to Redis, by operation, and error type when they failed."),
		metric.WithExplicitBucketBoundaries(CallBuckets...))
	check(err)
	t.turn, err = m.Float64Histogram("pacer.rate_limiting.fair.turn", metric.WithUnit("s"),
		metric.WithDescription("Time fair requests waited for their turn before they were booked, by lane."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	check(err)
	t.deferred, err = m.Int64Counter("pacer.rate_limiting.fair.deferred", metric.WithUnit("{request}"),
		metric.WithDescription("Times a fair queue was told to ask again (not its turn, or beyond the booking horizon), by lane."))
	check(err)
	// 0 from New on: a Limiter that finds its server may evict sets it to
	// 1 (reserve.Metrics.Evictable), for good.
	t.evictable, err = m.Int64Gauge("pacer.redis.evictable",
		metric.WithDescription("1 when the Redis server's maxmemory-policy may evict pacer's keys."))
	check(err)
	t.adaptiveRate, err = m.Float64Gauge("pacer.adaptive.rate", metric.WithUnit("{request}/s"),
		metric.WithDescription("The fleet's learned rate of a key (package adaptive)."))
	check(err)
	t.seatsHeld, err = m.Int64UpDownCounter("pacer.rate_limiting.seats.held", metric.WithUnit("{seat}"),
		metric.WithDescription("Seats this process's Limiters hold on in-flight bands, by band."))
	check(err)
	t.seatWaiters, err = m.Int64UpDownCounter("pacer.rate_limiting.seats.waiters", metric.WithUnit("{request}"),
		metric.WithDescription("Calls of this process's Limiters waiting for seats on in-flight bands, by band."))
	check(err)
	t.seatWait, err = m.Float64Histogram("pacer.rate_limiting.seats.time_in_queue", metric.WithUnit("s"),
		metric.WithDescription("Time calls waited for their seats on in-flight bands, by source, band and how they got them (handoff, free)."),
		metric.WithExplicitBucketBoundaries(WaitBuckets...))
	check(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	t.evictable.Record(context.Background(), 0)
	return t, nil
}
