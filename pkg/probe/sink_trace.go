package probe

import (
	"context"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traceSink puts the outcomes of traced writes on their spans: arrivals,
// misses, losses and anomalies as events, the end of the span when the
// write is settled. An anomaly after that goes on a short span of its own
// that links to the write's.
type traceSink struct {
	tracer trace.Tracer
}

func (s traceSink) Outcome(o Outcome) {
	if o.trace == nil {
		return
	}
	span := o.trace.span
	switch o.Kind {
	case Arrived:
		attrs := arrivalAttrs(o.Path.attrs, o.Latency, o.rv)
		if o.Late {
			s.event(o, "watchprobe.late", attrs...)
		} else if span.IsRecording() {
			span.AddEvent("watchprobe.arrived", trace.WithTimestamp(o.At), trace.WithAttributes(attrs...))
		}
	case Missed:
		if span.IsRecording() {
			span.AddEvent("watchprobe.missed", trace.WithTimestamp(o.At), trace.WithAttributes(
				append(slices.Clip(o.Path.attrs), attribute.String("watchprobe.reason", o.Reason))...))
		}
	case Lost:
		if !o.Gone {
			s.event(o, "watchprobe.lost", append(slices.Clip(o.Path.attrs), attribute.String("watchprobe.reason", o.Reason))...)
		}
	case ArrivedAfterLost:
		s.event(o, "watchprobe.arrived_after_lost", o.Path.attrs...)
	case Duplicate:
		s.event(o, "watchprobe.duplicate", o.Path.attrs...)
	case Replayed:
		s.event(o, "watchprobe.replayed", o.Path.attrs...)
	case OutOfOrder:
		s.event(o, "watchprobe.out_of_order", append(slices.Clip(o.Path.attrs), attribute.Int64("watchprobe.after_seq", int64(o.AfterSeq)))...)
	case Answered:
		if o.Err != nil {
			span.RecordError(o.Err)
			span.SetStatus(codes.Error, "write failed")
		}
	case Settled:
		if len(o.missedOn) > 0 && span.IsRecording() {
			span.SetStatus(codes.Error, "missed on "+strings.Join(o.missedOn, ", "))
		}
		span.End()
	}
}

// event records an anomaly on the write's span, or, once that span has
// ended, on a short span of its own that links to it.
func (s traceSink) event(o Outcome, name string, attrs ...attribute.KeyValue) {
	span := o.trace.span
	if !span.SpanContext().IsSampled() && !span.IsRecording() {
		return // tracing is off: build nothing
	}
	if !o.ended {
		span.AddEvent(name, trace.WithTimestamp(o.At), trace.WithAttributes(attrs...))
		return
	}
	if !span.SpanContext().IsValid() {
		return
	}
	_, linked := s.tracer.Start(context.Background(), name,
		trace.WithTimestamp(o.At),
		trace.WithLinks(trace.Link{SpanContext: span.SpanContext()}),
		trace.WithAttributes(append(slices.Clip(attrs), attribute.String("watchprobe.marker", o.Marker), attribute.Int64("watchprobe.seq", int64(o.Seq)))...))
	linked.End(trace.WithTimestamp(o.At))
}

func arrivalAttrs(path []attribute.KeyValue, latency time.Duration, rv string) []attribute.KeyValue {
	return append(slices.Clip(path),
		attribute.Float64("watchprobe.latency_seconds", latency.Seconds()),
		attribute.String("k8s.resource_version", rv),
	)
}
