package otelpacer_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/otelpacer"
	"github.com/pacer-go/pacer/reserve"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// attributeValues returns, for each attribute key, the values it took on
// any data point of any of g's instruments.
func (g *rig) attributeValues(t *testing.T) map[string]map[string]bool {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, g.reader.Collect(context.Background(), &rm))
	out := map[string]map[string]bool{}
	add := func(s attribute.Set) {
		for _, kv := range s.ToSlice() {
			k := string(kv.Key)
			if out[k] == nil {
				out[k] = map[string]bool{}
			}
			out[k][kv.Value.Emit()] = true
		}
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Sum[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					add(p.Attributes)
				}
			default:
				t.Fatalf("%s: data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

func setOf(vs ...string) map[string]bool {
	m := map[string]bool{}
	for _, v := range vs {
		m[v] = true
	}
	return m
}

// TestNames: the values of the attributes that name what pacer did are the
// ones every surface uses (package internal/names: prommetrics' labels,
// reserve's API, pacer status and web): pacer.source, the band's own
// values, pacer.fallback.to, pacer.moved.reason, pacer.redis.operation,
// pacer.seats.got.
func TestNames(t *testing.T) {
	g := newRig(t, otelpacer.Options{})
	tel := g.tel
	units, one := []string{reserve.PermitsUnit}, []float64{1}
	for _, src := range []reserve.Source{reserve.SourceRedis, reserve.SourceLocal, reserve.SourceLease} {
		for _, band := range []string{"", reserve.PauseBinding, "day"} {
			tel.Granted(reserve.Grant{Key: "k", Units: units, Amounts: one, Wait: time.Second, Source: src, Band: band})
		}
	}
	for _, why := range names.Moved {
		tel.Moved("k", why)
	}
	tel.Fallback(true)
	tel.Fallback(false)
	for _, op := range names.Ops {
		tel.RedisCall(op, time.Millisecond, nil)
	}
	for _, band := range []string{"", reserve.PauseBinding, reserve.TurnBinding, reserve.OutageBinding} {
		_, w := tel.StartWait(context.Background(), "k")
		w.End(fmt.Errorf("refused: %w", &reserve.WaitTooLongError{Wait: time.Hour, MaxWait: time.Second, Band: band}), 0)
	}
	_, w := tel.StartWait(context.Background(), "k")
	w.End(errors.New("other"), 0)
	tel.SeatsTaken("k", "day", 1, time.Second, true, false)
	tel.SeatsTaken("k", "day", 1, 0, false, true)

	v := g.attributeValues(t)
	assert.Equal(t, setOf(names.Sources...), v["pacer.source"], "pacer.source")
	assert.Equal(t, setOf(names.BandNone, names.BandPause, "day", names.BandUnknown, names.BandTurn, names.BandOutage), v["pacer.band"], "pacer.band")
	assert.Equal(t, setOf(names.Modes...), v["pacer.fallback.to"], "pacer.fallback.to")
	assert.Equal(t, setOf(names.Moved...), v["pacer.moved.reason"], "pacer.moved.reason")
	assert.Equal(t, setOf(names.Ops...), v["pacer.redis.operation"], "pacer.redis.operation")
	assert.Equal(t, setOf(names.SeatsGot...), v["pacer.seats.got"], "pacer.seats.got")
}
