package otelpacer

import (
	"context"
	"errors"
	"time"

	"github.com/pacer-go/pacer/internal/names"
	"github.com/pacer-go/pacer/reserve"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// SpanName is the name of a Wait's span.
const SpanName = "pacer.wait"

// The spans' own attributes (the metrics' pacer.key, pacer.band,
// pacer.source and pacer.moved.reason are theirs too).
const (
	attrWait        = attribute.Key("pacer.wait")
	attrSlot        = attribute.Key("pacer.slot")
	attrSleep       = attribute.Key("pacer.sleep")
	attrLate        = attribute.Key("pacer.late")
	attrDeadline    = attribute.Key("pacer.deadline")
	attrRefusedWait = attribute.Key("pacer.refused.wait")
	attrMaxWait     = attribute.Key("pacer.max_wait")
)

// StartWait implements reserve.Tracer: it starts the Wait's span, a child
// of the span in ctx, and returns the span's context.
func (t *Telemetry) StartWait(ctx context.Context, key string) (context.Context, reserve.WaitTrace) {
	ctx, span := t.tracer.Start(ctx, SpanName, trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrKey.String(key)))
	return ctx, &waitTrace{t: t, span: span, key: key, recording: span.IsRecording()}
}

// waitTrace follows one Wait; its methods are called from one goroutine.
type waitTrace struct {
	t         *Telemetry
	span      trace.Span
	key       string
	recording bool
	r         *reserve.Reservation     // the reservation, once granted
	granted   time.Time                // when, on the Limiter's clock
	queued    metric.MeasurementOption // counted in queued_requests with these attributes (nil: not)
}

func seconds(d time.Duration) attribute.KeyValue { return attrWait.Float64(d.Seconds()) }

// grantAttrs are the attributes of a slot granted: when, the wait, why,
// from where.
func grantAttrs(r *reserve.Reservation, at time.Time, wait time.Duration, extra ...attribute.KeyValue) []attribute.KeyValue {
	return append(extra,
		attrSlot.String(at.Format(time.RFC3339Nano)),
		seconds(wait),
		attrBand.String(bandValue(r.Band())),
		attrSource.String(r.Source().String()))
}

// Reserved implements reserve.WaitTrace: the "reserved" event.
func (w *waitTrace) Reserved(r *reserve.Reservation) {
	at := r.Time()
	d := r.Delay()
	w.r, w.granted = r, at.Add(-d)
	if w.recording {
		w.span.AddEvent("reserved", trace.WithAttributes(grantAttrs(r, at, d)...))
	}
}

// Sleeping implements reserve.WaitTrace: the "slept" event, with the sleep
// planned, and the Wait counts in queued_requests until its end.
func (w *waitTrace) Sleeping(r *reserve.Reservation, d time.Duration) {
	if w.r == nil {
		w.r, w.granted = r, r.Time().Add(-r.Delay())
	}
	if w.queued == nil {
		w.queued = w.t.keyOption(w.key)
		w.t.queued.Add(context.Background(), 1, w.queued)
	}
	if w.recording {
		w.span.AddEvent("slept", trace.WithAttributes(attrSleep.Float64(d.Seconds())))
	}
}

// Moved implements reserve.WaitTrace: the "moved" event, with the reason
// and the fresh slot.
func (w *waitTrace) Moved(r *reserve.Reservation, why string) {
	w.r = r
	if w.recording {
		w.span.AddEvent("moved", trace.WithAttributes(grantAttrs(r, r.Time(), r.Delay(), attrMovedReason.String(why))...))
	}
}

// End implements reserve.WaitTrace: the "woke" event, or the error, and
// the span's end.
func (w *waitTrace) End(err error, late time.Duration) {
	if w.queued != nil {
		w.t.queued.Add(context.Background(), -1, w.queued)
	}
	var tooLong *reserve.WaitTooLongError
	refused := errors.As(err, &tooLong)
	band := names.BandUnknown
	if refused {
		if tooLong.Band != "" {
			band = tooLong.Band
		}
		reason := "max_wait"
		if tooLong.Deadline {
			reason = "deadline"
		}
		w.t.refused.Add(context.Background(), 1, w.t.withKey(w.key, attrBand.String(band), attrReason.String(reason)))
	}
	if !w.recording {
		w.span.End()
		return
	}
	if w.r != nil {
		// The wait granted: from the grant to the slot it had at the end
		// (after any move), on the wall clock, as the events show them.
		// (Slots placed from different replies carry the monotonic
		// readings of different time.Now calls, each read a moment apart
		// from its wall reading: a thread preempted between the two skews
		// them. A CI run's span said 500 µs less than its events.)
		wait := max(0, w.r.Time().Round(0).Sub(w.granted.Round(0)))
		w.span.SetAttributes(attrBand.String(bandValue(w.r.Band())), attrSource.String(w.r.Source().String()), seconds(wait))
	}
	switch {
	case err == nil:
		w.span.AddEvent("woke", trace.WithAttributes(attrLate.Float64(late.Seconds())))
	case refused:
		w.span.SetAttributes(attrBand.String(band), attrDeadline.Bool(tooLong.Deadline),
			attrRefusedWait.Float64(tooLong.Wait.Seconds()), attrMaxWait.Float64(tooLong.MaxWait.Seconds()))
		fallthrough
	default:
		w.span.RecordError(err)
		w.span.SetStatus(codes.Error, err.Error())
	}
	w.span.End()
}
