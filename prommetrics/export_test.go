package prommetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Accessors for tests.

func (m *Metrics) ReservationsFor(mode, key string) prometheus.Counter {
	return m.reservations.WithLabelValues(m.labels(mode, key)...)
}

func (m *Metrics) UnitsFor(mode, key, unit string) prometheus.Counter {
	return m.units.WithLabelValues(append(m.labels(mode, key), unit)...)
}

func (m *Metrics) MovedFor(why string) prometheus.Counter { return m.moved.WithLabelValues(why) }

func (m *Metrics) PausesFor(key string) prometheus.Counter {
	if m.keyLabel == nil {
		return m.pauses.WithLabelValues()
	}
	return m.pauses.WithLabelValues(m.keyLabel(key))
}

func (m *Metrics) FallbackActive() prometheus.Gauge { return m.fallback }

func (m *Metrics) SwitchesTo(to string) prometheus.Counter { return m.switches.WithLabelValues(to) }

func (m *Metrics) DeferredFor(lane, tenant string) prometheus.Counter {
	return m.deferred.WithLabelValues(lane, tenant)
}

// TurnCount is how many turns the histogram of lane and tenant observed.
func (m *Metrics) TurnCount(lane, tenant string) uint64 {
	var d dto.Metric
	if err := m.turn.WithLabelValues(lane, tenant).(prometheus.Histogram).Write(&d); err != nil {
		panic(err)
	}
	return d.GetHistogram().GetSampleCount()
}
