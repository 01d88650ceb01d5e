package prommetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Accessors for tests.

// withKey appends the key label's value for key to lv, when there is one.
func (m *Metrics) withKey(lv []string, key string) []string {
	if m.keyLabel == nil {
		return lv
	}
	return append(lv, m.keyLabel(key))
}

func (m *Metrics) ReservationsFor(source, band, key string) prometheus.Counter {
	return m.reservations.WithLabelValues(m.withKey([]string{source, band}, key)...)
}

func (m *Metrics) UnitsFor(source, key, unit string) prometheus.Counter {
	return m.units.WithLabelValues(append(m.withKey([]string{source}, key), unit)...)
}

// WaitFor is how many waits, and their sum in seconds, the histogram of
// source, band and key observed.
func (m *Metrics) WaitFor(source, band, key string) (uint64, float64) {
	var d dto.Metric
	if err := m.wait.WithLabelValues(m.withKey([]string{source, band}, key)...).(prometheus.Histogram).Write(&d); err != nil {
		panic(err)
	}
	return d.GetHistogram().GetSampleCount(), d.GetHistogram().GetSampleSum()
}

func (m *Metrics) MovedFor(why string) prometheus.Counter { return m.moved.WithLabelValues(why) }

func (m *Metrics) PausesFor(key string) prometheus.Counter {
	return m.pauses.WithLabelValues(m.withKey(nil, key)...)
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
