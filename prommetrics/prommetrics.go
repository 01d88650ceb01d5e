package prommetrics

import (
	"fmt"
	"time"

	"github.com/pacer-go/pacer/internal/keyvalues"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/reserve"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure the metrics. The zero value is ready to use.
type Options struct {
	// Namespace is put before every metric name. Default "pacer".
	Namespace string
	// KeyLabel, if set, maps a key to the value of a "key" label. Keep the
	// number of distinct values small. Default nil: no key label.
	KeyLabel func(key string) string
	// MaxKeyValues bounds how many distinct key label values get series of
	// their own: the first MaxKeyValues values seen keep theirs for the
	// Metrics' lifetime, and every later one is counted as OtherKeyValue.
	// Each value is a series in each metric with the key label (and its
	// buckets, in a histogram), so a KeyLabel that maps each of a
	// crawler's hosts to itself would make millions. Default 0:
	// DefaultMaxKeyValues; -1: no bound. Below -1, New panics.
	MaxKeyValues int
	// TenantLabel, if set, maps a fair request's tenant to the value of a
	// "tenant" label on the fair metrics (reserve.FairMetrics): name the
	// few tenants to watch and map the rest to one value ("other"). Default
	// nil: the fair metrics are per lane only.
	TenantLabel func(tenant string) string
	// MaxTenantValues bounds how many distinct tenant label values get
	// series of their own, as MaxKeyValues does the key label's: later
	// values are counted as OtherKeyValue. Default 0: DefaultMaxKeyValues;
	// -1: no bound. Below -1, New panics.
	MaxTenantValues int
}

// Metrics implements reserve.Metrics with Prometheus collectors.
type Metrics struct {
	keyLabel     func(string) string
	reservations *prometheus.CounterVec
	units        *prometheus.CounterVec
	moved        *prometheus.CounterVec
	evictable    prometheus.Gauge
	wait         *prometheus.HistogramVec
	callDuration *prometheus.HistogramVec
	callErrors   *prometheus.CounterVec
	fallback     prometheus.Gauge
	switches     *prometheus.CounterVec
	pauses       *prometheus.CounterVec

	tenantLabel func(string) string
	turn        *prometheus.HistogramVec
	deferred    *prometheus.CounterVec

	seatsHeld   *prometheus.GaugeVec
	seatWaiters *prometheus.GaugeVec
	seatWait    *prometheus.HistogramVec
}

var (
	_ reserve.Metrics      = (*Metrics)(nil)
	_ reserve.GrantMetrics = (*Metrics)(nil)
	_ reserve.FairMetrics  = (*Metrics)(nil)
	_ reserve.SeatMetrics  = (*Metrics)(nil)
)

// WaitBuckets are the buckets of wait_seconds: from 1 ms to 30 minutes, for
// waits from a free slot to a long queue behind a provider's pause.
var WaitBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800}

// DefaultMaxKeyValues is Options.MaxKeyValues's default: the most distinct
// key label values with series of their own.
const DefaultMaxKeyValues = keyvalues.Default

// OtherKeyValue is the key label of a key whose KeyLabel value came after
// Options.MaxKeyValues others.
const OtherKeyValue = keyvalues.Other

// bounded returns label with its values bounded to max (option's value:
// 0, the default; -1, no bound), nil if label is. It panics below -1.
func bounded(label func(string) string, option string, max int) func(string) string {
	switch {
	case max < -1:
		panic(fmt.Sprintf("prommetrics: Options.%s %d (want -1 for no bound, 0 for the default, or more)", option, max))
	case max == 0:
		max = DefaultMaxKeyValues
	}
	if label == nil {
		return nil
	}
	values := keyvalues.New(max)
	return func(v string) string { return values.Admit(label(v)) }
}

// New creates the collectors and registers them with reg (if not nil). It
// panics, as reg.MustRegister does, if reg refuses them, or if
// opts.MaxKeyValues or opts.MaxTenantValues is below -1.
func New(reg prometheus.Registerer, opts Options) *Metrics {
	ns := opts.Namespace
	if ns == "" {
		ns = "pacer"
	}
	perKey := []string{}
	keyLabel := bounded(opts.KeyLabel, "MaxKeyValues", opts.MaxKeyValues)
	if keyLabel != nil {
		perKey = []string{"key"}
	}
	tenantLabel := bounded(opts.TenantLabel, "MaxTenantValues", opts.MaxTenantValues)
	perBand := append([]string{"source", "band"}, perKey...)
	perUnit := append(append([]string{"source"}, perKey...), "unit")
	m := &Metrics{
		keyLabel: keyLabel,
		reservations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "reservations_total",
			Help: "Reservations granted, by source (redis, local fallback, lease) and binding band (none when free at once, (pause) when a pause set the slot)."}, perBand),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "units_total",
			Help: "Cost reserved, by source and unit."}, perUnit),
		moved: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "moved_total",
			Help: "Sleepers that took a fresh slot: a pause covered theirs, or they woke too late."}, []string{"why"}),
		evictable: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "evictable",
			Help: "1 when the Redis server may evict pacer's keys under memory pressure."}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "wait_seconds",
			Help: "Wait granted to reservations, by source and binding band.", Buckets: WaitBuckets}, perBand),
		callDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "redis_call_duration_seconds",
			Help: "Duration of calls to Redis, by operation.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)}, []string{"op"}),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "redis_errors_total",
			Help: "Calls to Redis that failed, by operation."}, []string{"op"}),
		fallback: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "fallback_active",
			Help: "Limiters pacing locally because Redis is unavailable."}),
		switches: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "fallback_switches_total",
			Help: "Switches between Redis and local pacing, by destination."}, []string{"to"}),
		pauses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "pauses_total",
			Help: "Keys paused (a provider's 429)."}, perKey),
	}
	perLane := []string{"lane"}
	if tenantLabel != nil {
		perLane = []string{"lane", "tenant"}
	}
	m.tenantLabel = tenantLabel
	m.turn = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "fair_turn_seconds",
		Help: "Time fair requests waited for their turn before they were booked, by lane.", Buckets: WaitBuckets}, perLane)
	m.deferred = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "fair_deferred_total",
		Help: "Times a fair queue was told to ask again (not its turn, or beyond the booking horizon), by lane."}, perLane)
	perSeatBand := append([]string{"band"}, perKey...)
	m.seatsHeld = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "seats_held",
		Help: "Seats this process's Limiters hold on in-flight bands, by band."}, perSeatBand)
	m.seatWaiters = prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "seats_waiters",
		Help: "Calls of this process's Limiters waiting for seats on in-flight bands, by band."}, perSeatBand)
	m.seatWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "seats_wait_seconds",
		Help:    "Time calls waited for their seats on in-flight bands, by source, band and how they got them (handoff: handed by a call that ended; free).",
		Buckets: WaitBuckets}, append(append([]string{"source"}, perSeatBand...), "got"))
	if reg != nil {
		reg.MustRegister(m.reservations, m.units, m.moved, m.evictable, m.wait, m.callDuration, m.callErrors, m.fallback, m.switches, m.pauses,
			m.turn, m.deferred, m.seatsHeld, m.seatWaiters, m.seatWait)
	}
	return m
}

func (m *Metrics) laneLabels(tenant string, lane reserve.Lane) []string {
	if m.tenantLabel == nil {
		return []string{lane.String()}
	}
	return []string{lane.String(), m.tenantLabel(tenant)}
}

// Turn implements reserve.FairMetrics.
func (m *Metrics) Turn(_, tenant string, lane reserve.Lane, turn time.Duration) {
	m.turn.WithLabelValues(m.laneLabels(tenant, lane)...).Observe(turn.Seconds())
}

// Deferred implements reserve.FairMetrics.
func (m *Metrics) Deferred(_, tenant string, lane reserve.Lane) {
	m.deferred.WithLabelValues(m.laneLabels(tenant, lane)...).Inc()
}

// seatLabels are the labels of the seats metrics: band and, with
// Options.KeyLabel, key.
func (m *Metrics) seatLabels(key, band string) []string {
	if m.keyLabel == nil {
		return []string{band}
	}
	return []string{band, m.keyLabel(key)}
}

// SeatsTaken implements reserve.SeatMetrics: seats_wait_seconds.
func (m *Metrics) SeatsTaken(key, band string, _ int, waited time.Duration, handedOff, local bool) {
	source, got := names.SourceRedis, names.SeatsFree
	if local {
		source = names.SourceLocal
	}
	if handedOff {
		got = names.SeatsHandoff
	}
	lv := append(append([]string{source}, m.seatLabels(key, band)...), got)
	m.seatWait.WithLabelValues(lv...).Observe(waited.Seconds())
}

// SeatsHeld implements reserve.SeatMetrics: seats_held.
func (m *Metrics) SeatsHeld(key, band string, delta int) {
	m.seatsHeld.WithLabelValues(m.seatLabels(key, band)...).Add(float64(delta))
}

// SeatWaiters implements reserve.SeatMetrics: seats_waiters.
func (m *Metrics) SeatWaiters(key, band string, delta int) {
	m.seatWaiters.WithLabelValues(m.seatLabels(key, band)...).Add(float64(delta))
}

// bandLabel returns the band label's value for a binding band as
// reserve.Grant.Band gives it: the band's name, or reserve.PauseBinding
// ("(pause)") as it is, and "none" for "" (the slot was free at once).
func bandLabel(band string) string {
	if band == "" {
		return names.BandNone
	}
	return band
}

// Granted implements reserve.GrantMetrics: a Limiter calls it in place of
// Reserved.
func (m *Metrics) Granted(g reserve.Grant) {
	key := ""
	if m.keyLabel != nil {
		key = m.keyLabel(g.Key)
	}
	m.grant(g.Source.String(), bandLabel(g.Band), key, g.Units, g.Amounts, g.Wait)
}

// Reserved implements reserve.Metrics, for callers that report grants
// without their band (a Limiter calls Granted): band is "none".
func (m *Metrics) Reserved(key string, units []string, amounts []float64, wait time.Duration, local bool) {
	source := names.SourceRedis
	if local {
		source = names.SourceLocal
	}
	if m.keyLabel != nil {
		key = m.keyLabel(key)
	}
	m.grant(source, names.BandNone, key, units, amounts, wait)
}

// grant counts one reservation: key is the key label's value, unused
// without Options.KeyLabel.
func (m *Metrics) grant(source, band, key string, units []string, amounts []float64, wait time.Duration) {
	lv := [3]string{source, band, key}
	n := 2
	if m.keyLabel != nil {
		n = 3
	}
	m.reservations.WithLabelValues(lv[:n]...).Inc()
	m.wait.WithLabelValues(lv[:n]...).Observe(wait.Seconds())
	// units_total has no band: source, [key,] unit.
	ul := [3]string{source, key}
	for i, u := range units {
		ul[n-1] = u
		m.units.WithLabelValues(ul[:n]...).Add(amounts[i])
	}
}

// Moved implements reserve.Metrics.
func (m *Metrics) Moved(_ string, why string) { m.moved.WithLabelValues(why).Inc() }

// Evictable implements reserve.Metrics.
func (m *Metrics) Evictable(string) { m.evictable.Set(1) }

// RedisCall implements reserve.Metrics.
func (m *Metrics) RedisCall(op string, d time.Duration, err error) {
	m.callDuration.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		m.callErrors.WithLabelValues(op).Inc()
	}
}

// Fallback implements reserve.Metrics.
func (m *Metrics) Fallback(active bool) {
	if active {
		m.fallback.Inc()
		m.switches.WithLabelValues(names.ModeLocal).Inc()
	} else {
		m.fallback.Dec()
		m.switches.WithLabelValues(names.ModeRedis).Inc()
	}
}

// Paused implements reserve.Metrics.
func (m *Metrics) Paused(key string, _ time.Duration) {
	if m.keyLabel == nil {
		m.pauses.WithLabelValues().Inc()
		return
	}
	m.pauses.WithLabelValues(m.keyLabel(key)).Inc()
}
