package otelpacer

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/pacer-go/pacer/internal/layout"
	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/reserve"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// keyValue returns key's attribute value, and whether there is one
// (Options.KeyAttribute): OtherKeyValue once Options.MaxKeyValues others
// were seen.
func (t *Telemetry) keyValue(key string) (string, bool) {
	if t.keyAttr == nil {
		return "", false
	}
	return t.values.Admit(t.keyAttr(key)), true
}

// keyOption returns the attribute set of key alone: pacer.key, or none.
func (t *Telemetry) keyOption(key string) metric.MeasurementOption {
	v, ok := t.keyValue(key)
	return t.sets.get(setKey{kind: keySet, key: v, hasKey: ok})
}

// withKey returns kv and, with Options.KeyAttribute, pacer.key.
func (t *Telemetry) withKey(key string, kv ...attribute.KeyValue) metric.MeasurementOption {
	if v, ok := t.keyValue(key); ok {
		kv = append(kv, attrKey.String(v))
	}
	return metric.WithAttributes(kv...)
}

// bandValue is the pacer.band of a grant: the binding band (a band's name,
// or "(pause)", reserve.PauseBinding), "none" when the slot was free at
// once.
func bandValue(band string) string {
	if band == "" {
		return names.BandNone
	}
	return band
}

// Granted implements reserve.GrantMetrics: the requests counter, the
// time_in_queue histogram and the units counter.
func (t *Telemetry) Granted(g reserve.Grant) {
	ctx := context.Background()
	kv, hasKey := t.keyValue(g.Key)
	opt := t.sets.get(setKey{kind: grantSet, source: g.Source, band: bandValue(g.Band), key: kv, hasKey: hasKey})
	t.requests.Add(ctx, 1, opt)
	t.timeInQueue.Record(ctx, g.Wait.Seconds(), opt)
	for i, u := range g.Units {
		t.units.Add(ctx, g.Amounts[i], t.sets.get(setKey{kind: unitSet, source: g.Source, unit: u, key: kv, hasKey: hasKey}))
	}
}

// Reserved implements reserve.Metrics. A Limiter calls Granted instead;
// Reserved counts a grant whose band is not known.
func (t *Telemetry) Reserved(key string, units []string, amounts []float64, wait time.Duration, local bool) {
	src := reserve.SourceRedis
	if local {
		src = reserve.SourceLocal
	}
	t.Granted(reserve.Grant{Key: key, Units: units, Amounts: amounts, Wait: wait, Source: src})
}

// Moved implements reserve.Metrics.
func (t *Telemetry) Moved(key, why string) {
	t.moved.Add(context.Background(), 1, t.withKey(key, attrMovedReason.String(why)))
}

// Paused implements reserve.Metrics.
func (t *Telemetry) Paused(key string, _ time.Duration) {
	t.pauses.Add(context.Background(), 1, t.keyOption(key))
}

// Evictable implements reserve.Metrics: the gauge goes to 1.
func (t *Telemetry) Evictable(string) { t.evictable.Record(context.Background(), 1) }

// Fallback implements reserve.Metrics.
func (t *Telemetry) Fallback(active bool) {
	ctx := context.Background()
	if active {
		t.fallback.Add(ctx, 1)
		t.switches.Add(ctx, 1, metric.WithAttributes(attrFallbackTo.String(names.ModeLocal)))
		return
	}
	t.fallback.Add(ctx, -1)
	t.switches.Add(ctx, 1, metric.WithAttributes(attrFallbackTo.String(names.ModeRedis)))
}

// RedisCall implements reserve.Metrics: the call's duration, with
// error.type when it failed (see ErrorType).
func (t *Telemetry) RedisCall(op string, d time.Duration, err error) {
	if err == nil {
		t.callDuration.Record(context.Background(), d.Seconds(), metric.WithAttributes(attrOperation.String(op)))
		return
	}
	t.callDuration.Record(context.Background(), d.Seconds(),
		metric.WithAttributes(attrOperation.String(op), attrErrorType.String(ErrorType(err))))
}

// ErrorType is the error.type of a failed call to Redis, one of a few
// values: "timeout" (the call outlasted reserve.Options.CallTimeout, or a
// network timeout), "canceled" (the caller's context ended), "unavailable"
// (no answer: refused, reset, closed), or the error code Redis answered
// with ("LOADING", "READONLY", "NOSCRIPT", "PACER_WRONGTYPE", ...: the first
// word of its error reply, when made of capital letters and '_', else
// "other").
func ErrorType(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	code, ok := layout.ErrorCode(err)
	if !ok {
		return "unavailable"
	}
	if code == "" || len(code) > 32 {
		return "other"
	}
	for _, c := range code {
		if (c < 'A' || c > 'Z') && c != '_' {
			return "other"
		}
	}
	return code
}

// laneOption returns the attributes of a fair metric: pacer.lane and, with
// Options.TenantAttribute, pacer.tenant.
func (t *Telemetry) laneOption(tenant string, lane reserve.Lane) metric.MeasurementOption {
	if t.tenantAttr == nil {
		return metric.WithAttributes(attrLane.String(lane.String()))
	}
	return metric.WithAttributes(attrLane.String(lane.String()), attrTenant.String(t.tenants.Admit(t.tenantAttr(tenant))))
}

// Turn implements reserve.FairMetrics.
func (t *Telemetry) Turn(_, tenant string, lane reserve.Lane, turn time.Duration) {
	t.turn.Record(context.Background(), turn.Seconds(), t.laneOption(tenant, lane))
}

// Deferred implements reserve.FairMetrics.
func (t *Telemetry) Deferred(_, tenant string, lane reserve.Lane) {
	t.deferred.Add(context.Background(), 1, t.laneOption(tenant, lane))
}

// seatsOption returns the attributes of the seats instruments: pacer.band
// (the in-flight band's name), kv, and with Options.KeyAttribute pacer.key.
func (t *Telemetry) seatsOption(key, band string, kv ...attribute.KeyValue) metric.MeasurementOption {
	return t.withKey(key, append(kv, attrBand.String(band))...)
}

// SeatsTaken implements reserve.SeatMetrics: the seats' time_in_queue.
func (t *Telemetry) SeatsTaken(key, band string, _ int, waited time.Duration, handedOff, local bool) {
	src, got := names.SourceRedis, names.SeatsFree
	if local {
		src = names.SourceLocal
	}
	if handedOff {
		got = names.SeatsHandoff
	}
	t.seatWait.Record(context.Background(), waited.Seconds(),
		t.seatsOption(key, band, attrSource.String(src), attrSeatsGot.String(got)))
}

// SeatsHeld implements reserve.SeatMetrics: pacer.rate_limiting.seats.held.
func (t *Telemetry) SeatsHeld(key, band string, delta int) {
	t.seatsHeld.Add(context.Background(), int64(delta), t.seatsOption(key, band))
}

// SeatWaiters implements reserve.SeatMetrics.
func (t *Telemetry) SeatWaiters(key, band string, delta int) {
	t.seatWaiters.Add(context.Background(), int64(delta), t.seatsOption(key, band))
}

// ObserveRate implements adaptive.Observer: it records a learned rate on
// the pacer.adaptive.rate gauge. Set the Telemetry as the Observer of the
// Config of adaptive.New or of pacehttp.Options.Adaptive:
//
//	cfg.Observer = tel
//
// Without Options.KeyAttribute the gauge holds the last rate learned on
// any key.
func (t *Telemetry) ObserveRate(key string, rate float64) {
	t.adaptiveRate.Record(context.Background(), rate, t.keyOption(key))
}
